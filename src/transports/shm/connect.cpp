#include "transports/shm/transport.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "bootstrap/auth.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/shm/cma.hpp"

namespace holmes::shm {

void ShmTransport::set_peers(int rank, std::vector<std::string> addresses) {
  const auto size = static_cast<int>(addresses.size());
  directory_.check(rank, addresses.size());
  require(size <= static_cast<int>(kMaxRings), "shm: {} ranks, at most {} supported", size,
          kMaxRings);
  std::vector<bool> serve(addresses.size(), false);
  int served = 0;
  for (int p = 0; p < size; ++p) {
    serve[static_cast<std::size_t>(p)] =
        p != rank && !addresses[static_cast<std::size_t>(p)].empty();
    served += serve[static_cast<std::size_t>(p)] ? 1 : 0;
  }
  // Rings shrink for large communicators so the whole segment stays within the budget.
  std::uint64_t ring = tuning_.ring_bytes;
  while (ring > kMinRingBytes &&
         static_cast<std::uint64_t>(served) * (ring + kRingControlBytes) > tuning_.segment_budget) {
    ring /= 2;
  }
  own_.set_layout(rank, static_cast<std::uint32_t>(size), ring, serve, proofs_);

  peers_.resize(addresses.size());
  board_peers_ = std::make_unique<std::atomic<PeerSegment*>[]>(addresses.size());
  board_failed_ = std::make_unique<std::atomic<bool>[]>(addresses.size());
  board_failures_.resize(addresses.size());
  for (int p = 0; p < size; ++p) {
    peers_[static_cast<std::size_t>(p)].address = addresses[static_cast<std::size_t>(p)];
    peers_[static_cast<std::size_t>(p)].served = serve[static_cast<std::size_t>(p)];
  }
  served_ = served;
  std::lock_guard lock(mutex_);
  if (!accepting_) return;  // shut down before it started
  directory_.set(rank, std::move(addresses));
  thread_.start([this] { run(); });
}

CompletionPtr ShmTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  Command c;
  c.kind = Command::Kind::kConnect;
  c.request = done;
  return submit_request(std::move(c));
}

void ShmTransport::want_attach(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.attach_wanted || p.segment || p.failure.failed() || !p.ending.empty()) return;
  p.attach_wanted = true;
  const auto now = Clock::now();
  p.attach_deadline = now + options_.connect_timeout;
  p.next_attach_try = now;
}

bool ShmTransport::attach_peers(Clock::time_point now) {
  bool busy = false;
  const PeerSegment::Expect base{-1, static_cast<std::uint32_t>(peers_.size()), context_hash_};
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (!p.attach_wanted || p.segment || p.failure.failed() || now < p.next_attach_try) {
      continue;
    }
    const int peer = static_cast<int>(i);
    std::unique_ptr<PeerSegment> segment;
    try {
      auto expect = base;
      expect.owner_rank = peer;
      segment = PeerSegment::open(p.address, expect, proofs_);
    } catch (const Error& e) {
      const auto message = fmt::format("shm: cannot reach rank {}: {}", peer, e.what());
      if (e.status() == HM_ERR_PEER_FAILED) {
        // Its segment is gone: it closed or died, maybe after writing to this rank. Read that
        // first, then fail the rest.
        end_after_drain(peer, e.status(), message, FailureLog::kWarn);
        busy = true;
      } else {
        peer_gone(peer, e.status(), message, FailureLog::kWarn);
      }
      continue;
    }
    if (!segment) {  // its owner has not published its layout yet
      if (now >= p.attach_deadline) {
        peer_gone(peer, HM_ERR_TIMEOUT,
                  fmt::format("shm: {} did not set up its segment within {} ms", peer_name(peer),
                              options_.connect_timeout.count()),
                  FailureLog::kWarn);
        continue;
      }
      p.next_attach_try = now + p.attach_backoff;
      p.attach_backoff =
          std::min<std::chrono::milliseconds>(p.attach_backoff * 2, kMaxAttachBackoff);
      continue;
    }
    attach(peer, std::move(segment));
    busy = true;
  }
  return busy;
}

void ShmTransport::attach(int peer, std::unique_ptr<PeerSegment> segment) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const int rank = directory_.rank();
  RingControl& control = segment->control(rank);
  if (load_acquire(control.attached) != 0) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: the ring for rank {} in {}'s segment {} is already taken: two "
                          "endpoints claim rank {}",
                          rank, peer_name(peer), segment->name(), rank),
              FailureLog::kWarn);
    return;
  }
  control.producer_pid = getpid();
  control.producer_pid_namespace = pid_namespace_id();
  const auto nonce = auth::random_nonce();
  std::memcpy(control.producer_nonce, nonce.data(), kNonceBytes);
  control.cma_probe_address = reinterpret_cast<std::uintptr_t>(&cma_probe_);
  control.cma_probe_value = cma_probe_;
  proofs_.producer_mac(segment->header(), control, rank, peer, control.producer_mac);
  store_release(control.attached, 1u);
  p.writer.emplace(control, segment->ring_data(rank), segment->ring_bytes());
  if (p.pid == 0 && segment->same_pid_namespace()) {
    p.pid = segment->owner_pid();
    p.pid_checkable = true;
  }
  p.segment = std::move(segment);
  board_peers_[static_cast<std::size_t>(peer)].store(p.segment.get(), std::memory_order_release);
  p.attach_wanted = false;
  {
    std::lock_guard lock(p.lane->mutex);
    p.lane->open = true;
  }
  ring_doorbell(p.segment->header());
  if (p.owe_wakeup) {
    p.owe_wakeup = false;
    ring_doorbell(p.segment->header());
  }
  check_connected();
}

void ShmTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (!p.served) return ConnectWaiters::Peer::kNotServed;
        return p.segment ? ConnectWaiters::Peer::kConnected : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

void ShmTransport::maybe_unlink() {
  // Every sender has mapped the segment: the name has done its job, and removing it now means a
  // crash later leaves nothing behind in /dev/shm.
  if (own_.linked() && verified_ == served_) own_.unlink();
}

bool ShmTransport::verify_producer(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const int rank = directory_.rank();
  RingControl& control = own_.control(peer);
  if (!proofs_.proves_producer(own_.header(), control, peer, rank)) {
    peer_gone(peer, HM_ERR_AUTH,
              fmt::format("shm: the ring of rank {} in this rank's segment {} carries no valid "
                          "proof of the job token (HOLMES_TOKEN differs, or a stranger wrote it)",
                          peer, own_.name()),
              FailureLog::kWarn);
    return false;
  }
  const bool same_namespace =
      control.producer_pid_namespace != 0 && control.producer_pid_namespace == pid_namespace_id();
  if (same_namespace && control.producer_pid > 0) {
    p.pid = control.producer_pid;
    p.pid_checkable = true;
  }
  // Test cross-memory attach on this very pair: the producer published a word and its value.
  CmaState cma = CmaState::kRefused;
  if (tuning_.cma && p.pid_checkable) {
    std::uint64_t probe = 0;
    const int error =
        read_process_memory(p.pid, control.cma_probe_address,
                            std::as_writable_bytes(std::span<std::uint64_t>(&probe, 1)));
    if (error == 0 && probe == control.cma_probe_value) cma = CmaState::kWorks;
    if (error != 0) {
      HM_LOG_DEBUG(
          "shm rank {}: cross-memory attach to rank {} refused ({}); the ring carries "
          "everything",
          rank, peer, std::strerror(error));
    }
  }
  p.cma_from = cma == CmaState::kWorks;
  store_release(control.cma, static_cast<std::uint32_t>(cma));
  p.reader.emplace(control, own_.ring_data(peer), own_.ring_bytes());
  ++verified_;
  // Map the producer's segment too: to ring its doorbell after freeing space, and to send.
  want_attach(peer);
  return true;
}

}  // namespace holmes::shm
