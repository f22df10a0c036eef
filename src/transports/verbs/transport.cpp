#include "transports/verbs/transport.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::verbs {

VerbsTransport::VerbsTransport(const TransportOptions& options, const VerbsConfig& config,
                               std::unique_ptr<Nic> nic)
    : options_(options),
      token_(options.token, options.context),
      config_(checked_verbs_config(config)),
      nic_(std::move(nic)),
      path_{config_.service_level, config_.traffic_class, config_.ack_timeout, config_.retry_count},
      work_(asio::make_work_guard(io_)),
      listener_(io_, options.listen_host, "verbs") {
  // The reactor gets its own descriptors (dup) so that closing them never closes the device's.
  const int completion_fd = ::dup(nic_->completion_fd());
  if (completion_fd < 0) {
    fail(HM_ERR_TRANSPORT, "verbs: cannot watch the completion channel: {}", std::strerror(errno));
  }
  completion_events_.assign(completion_fd);
  if (nic_->async_fd() >= 0) {
    const int device_fd = ::dup(nic_->async_fd());
    if (device_fd < 0) {
      fail(HM_ERR_TRANSPORT, "verbs: cannot watch device events: {}", std::strerror(errno));
    }
    device_events_.assign(device_fd);
    wait_for_device_events();
  }
  wait_for_completions();
  listener_.start([this](tcp::socket socket,
                         std::string remote) { accepted(std::move(socket), std::move(remote)); },
                  [this] { return directory_.rank(); });
  thread_.start([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        // A handler must not take the progress thread down with it: log and go on.
        HM_LOG_ERROR("verbs: progress thread: {}", e.what());
      }
    }
  });
}

VerbsTransport::~VerbsTransport() {
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", ShutdownWait::kUntilReleased);
  // Let the goodbyes reach the peers before their queue pairs go away (bounded: a dead peer
  // never acknowledges).
  auto settled = std::make_shared<std::promise<void>>();
  auto done = settled->get_future();
  asio::post(io_, [this, settled] {
    goodbyes_settled_ = settled;
    check_goodbyes();
  });
  if (!thread_.here()) done.wait_for(config_.goodbye_wait);
  work_.reset();
  io_.stop();
  thread_.join();
  error_code ignored;
  completion_events_.close(ignored);
  device_events_.close(ignored);
  dials_.clear();
  accepts_.clear();
  early_hellos_.clear();
  by_id_.clear();
  peers_.clear();  // queue pairs, then their memory, before the device
  nic_.reset();
}

std::string VerbsTransport::remote_device(int peer) const {
  std::lock_guard lock(devices_mutex_);
  return peer >= 0 && static_cast<std::size_t>(peer) < remote_devices_.size()
             ? remote_devices_[static_cast<std::size_t>(peer)]
             : std::string();
}

LinkProperties VerbsTransport::link(int peer) const {
  const std::string where = directory_.address(peer);
  std::string device = remote_device(peer);
  if (device.empty()) device = "?";
  const auto& port = nic_->port();
  return {"verbs",
          fmt::format("verbs {} ({}, {} Gb/s) -> rank {} {} at {}", port.name,
                      link_layer_name(port.link_layer), port.rate_gbps, peer, device, where),
          port.rate_gbps / 8, 0};
}

std::string VerbsTransport::peer_name(int peer) const {
  const std::string where = directory_.address(peer);
  if (const std::string device = remote_device(peer); !device.empty()) {
    return fmt::format("rank {} (verbs {} at {})", peer, device, where);
  }
  return fmt::format("rank {} (verbs at {})", peer, where);
}

std::unique_ptr<Transport> make_verbs_transport_on(const TransportOptions& options,
                                                   const VerbsConfig& config,
                                                   std::unique_ptr<Nic> nic) {
  require(nic != nullptr, "verbs: no device");
  return std::make_unique<VerbsTransport>(options, config, std::move(nic));
}

}  // namespace holmes::verbs
