#include "transports/shm/transport.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/status.hpp"

namespace holmes::shm {
namespace {

std::string mib(std::uint64_t bytes) {
  return bytes % (1u << 20) == 0 ? fmt::format("{} MiB", bytes >> 20)
                                 : fmt::format("{} KiB", bytes >> 10);
}

}  // namespace

ShmTransport::ShmTransport(const TransportOptions& options, const ShmTuning& tuning)
    : options_(options),
      tuning_(tuning),
      proofs_(options.token, options.context),
      own_(options.context) {
  const auto nonce = auth::random_nonce();
  std::memcpy(&cma_probe_, nonce.data(), sizeof(cma_probe_));
  cma_probe_ |= 1;  // never 0, which an unset word would read as
}

ShmTransport::~ShmTransport() {
  caller_progress_->detach();
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", ShutdownWait::kUntilReleased);
  thread_.join();
}

CompletionPtr ShmTransport::submit_request(Command command) {
  CompletionPtr request = command.request;
  if (!submit(std::move(command))) {
    std::lock_guard lock(mutex_);
    request->complete(final_status_, final_why_);
  }
  return request;
}

bool ShmTransport::submit(Command command) {
  {
    std::lock_guard lock(mutex_);
    if (!accepting_ || !thread_.started()) return false;
    commands_.push_back(std::move(command));
    commands_queued_.store(true, std::memory_order_release);
  }
  wake();
  return true;
}

LinkProperties ShmTransport::link(int peer) const {
  const std::string where = directory_.address(peer);
  const auto ring = own_.ring_bytes();
  return {"shm",
          fmt::format("shm {} ring {}{}", where, mib(ring),
                      tuning_.cma ? fmt::format(", cma from {}", mib(tuning_.cma_min_bytes))
                                  : std::string()),
          0, 0};
}

std::string ShmTransport::peer_name(int peer) const {
  const std::string where = directory_.address(peer);
  return fmt::format("rank {} (shm {})", peer, where);
}

bool shm_available(std::string* why) {
  // Checked once per process (a function-local static: whether /dev/shm works does not change
  // under a running job); the same pass removes segments that dead processes left behind.
  static const std::string reason = [] {
    const std::string name = fmt::format("{}probe-{}", kNamePrefix, getpid());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      return fmt::format("cannot create POSIX shared memory ({}): is /dev/shm mounted?",
                         std::strerror(errno));
    }
    if (fd >= 0) {
      close(fd);
      shm_unlink(name.c_str());
    }
    remove_stale_segments();
    return std::string();
  }();
  if (why != nullptr) *why = reason;
  return reason.empty();
}

std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options,
                                              const ShmTuning& tuning) {
  return std::make_unique<ShmTransport>(options, checked_shm_tuning(tuning));
}

}  // namespace holmes::shm
