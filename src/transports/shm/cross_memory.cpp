#include "transports/shm/transport.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/status.hpp"
#include "transports/shm/cma.hpp"

namespace holmes::shm {

bool ShmTransport::start_pull(int peer, const Parked& parked) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  std::optional<Matcher::Landing> landing;
  try {
    landing = matcher_.land(peer, parked.header);  // unposted: a buffer of the message's size
  } catch (const std::bad_alloc&) {
    peer_gone(peer, HM_ERR_OUT_OF_MEMORY,
              fmt::format("shm: {} sent a message of {} bytes before its receive was posted, and "
                          "this rank cannot hold it",
                          peer_name(peer), parked.header.total),
              FailureLog::kWarn);
    return false;
  }
  if (!landing) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} broke the protocol: fragments of message {:#x} disagree on "
                          "its size",
                          peer_name(peer), parked.header.tag),
              FailureLog::kWarn);
    return false;
  }
  if (landing->target == nullptr) {
    // Refused (size or signature mismatch, the receive has failed): nothing to read.
    acknowledge_rts(peer, parked.cookie);
    return true;
  }
  p.pulls.push_back(Pull{parked.header, std::move(*landing), parked.address, parked.cookie, 0});
  return true;
}

bool ShmTransport::expire_parked(Clock::time_point now) {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    for (auto it = p.parked.begin(); it != p.parked.end() && !p.failure.failed();) {
      if (now - it->second.since < tuning_.park_grace) {
        ++it;
        continue;
      }
      const Parked parked = it->second;
      it = p.parked.erase(it);
      busy = true;
      if (!start_pull(static_cast<int>(i), parked)) break;
    }
  }
  return busy;
}

void ShmTransport::acknowledge_rts(int peer, std::uint64_t cookie) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  store_release(own_.control(peer).rts_acked[cookie % kAckSlots], cookie);
  if (p.segment) {
    ring_doorbell(p.segment->header());
  } else {
    p.owe_wakeup = true;
    want_attach(peer);
  }
}

bool ShmTransport::continue_pulls() {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (p.pulls.empty() || p.failure.failed()) continue;
    const int peer = static_cast<int>(i);
    busy = true;
    Pull& pull = p.pulls.front();
    const std::uint64_t piece = std::min(kPullBytes, pull.header.total - pull.done);
    const int error =
        read_process_memory(p.pid, pull.address + pull.done,
                            {pull.landing.target + pull.done, static_cast<std::size_t>(piece)});
    if (error != 0) {
      peer_gone(peer, error == ESRCH ? HM_ERR_PEER_FAILED : HM_ERR_TRANSPORT,
                error == ESRCH
                    ? fmt::format("{} (pid {}) exited while its message was being read",
                                  peer_name(peer), p.pid)
                    : fmt::format("shm: cannot read {}'s message {:#x} from its memory: {}",
                                  peer_name(peer), pull.header.tag, std::strerror(error)),
                FailureLog::kWarn);
      continue;
    }
    pull.done += piece;
    // The producer only lets go of its buffer after marking its ring closed; so if it is not
    // closed now, everything read so far was read from the live buffer.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (load_acquire(own_.control(peer).closed) != 0) {
      const auto message = fmt::format(
          "{} closed its shm endpoint while its message was being read", peer_name(peer));
      for (const auto& dropped : p.pulls) {
        if (dropped.landing.request) {
          matcher_.fail_posted(peer, dropped.header.tag, HM_ERR_PEER_FAILED, message);
        }
      }
      p.pulls.clear();  // read_ring sees the closed ring next and fails the rest
      continue;
    }
    if (pull.done < pull.header.total) continue;
    Pull done = std::move(pull);
    p.pulls.pop_front();
    // Release the sender first: once the receive below completes this rank may close, and the
    // sender must find its message acknowledged before it finds this endpoint closed.
    acknowledge_rts(peer, done.cookie);
    matcher_.landed(peer, done.header, done.landing);
  }
  return busy;
}

}  // namespace holmes::shm
