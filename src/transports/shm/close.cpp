#include "transports/shm/transport.hpp"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <string_view>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::shm {

using namespace std::chrono_literals;

namespace {

// Whether process `pid` has ended: gone, or a zombie its parent has not reaped yet (kill() still
// succeeds on those).
bool process_ended(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const std::size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the state follows the last ')' (comm may contain anything).
  const std::string_view text(line, n);
  const auto close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace

void ShmTransport::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  Command c;
  c.kind = Command::Kind::kShutdown;
  c.status = status;
  c.message = why;
  c.done = done;
  if (!submit(std::move(c))) {
    // Never started (no set_peers yet) or already stopped: nothing can touch a buffer.
    std::lock_guard lock(mutex_);
    if (accepting_) {
      accepting_ = false;
      final_status_ = status;
      final_why_ = why;
      write_close_reason(own_.header(), status, why);
      store_release(own_.header().closed, 1u);
      own_.unlink();
    }
    return;
  }
  if (wait == ShutdownWait::kUntilReleased && !thread_.here()) {
    // The progress thread never blocks for long (its copies are bounded per pass), so this is
    // quick; the bound only guards against a wedged thread.
    finished.wait_for(30s);
  }
}

void ShmTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  Command c;
  c.kind = Command::Kind::kFailPeer;
  c.peer = peer;
  c.status = status;
  c.message = message;
  submit(std::move(c));
}

void ShmTransport::check_liveness(Clock::time_point now) {
  if (now < next_liveness_) return;
  next_liveness_ = now + kLivenessPeriod;
  bool pending = false;
  for (auto& p : peers_) {
    std::erase_if(p.posted, [](const auto& entry) { return entry.second->done(); });
    pending = pending || !p.posted.empty() || !p.sends.empty() || !p.awaiting.empty() ||
              !p.pulls.empty() || !p.parked.empty();
  }
  if (!pending) return;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (!p.served || p.failure.failed() || !p.pid_checkable || p.pid <= 0 || !p.ending.empty()) {
      continue;
    }
    if (process_ended(p.pid)) {
      // Read what it wrote before it died, then fail the rest.
      p.pulls.clear();
      end_after_drain(static_cast<int>(i), HM_ERR_PEER_FAILED,
                      fmt::format("{} (pid {}) exited without closing its shm endpoint (killed or "
                                  "crashed)",
                                  peer_name(static_cast<int>(i)), p.pid),
                      FailureLog::kWarn);
    }
  }
}

void ShmTransport::end_after_drain(int peer, hm_status_t status, std::string message,
                                   FailureLog log) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed() || !p.ending.empty()) return;
  p.ending = std::move(message);
  p.ending_status = status;
  p.ending_log = log;
  p.attach_wanted = false;
  // read_ring does the rest, on this pass or the next (the doorbell makes sure there is one).
  wake();
}

void ShmTransport::peer_gone(int peer, hm_status_t status, const std::string& message,
                             FailureLog log) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) return;
  if (log == FailureLog::kWarn) HM_LOG_WARN("shm rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  {
    std::lock_guard lock(board_mutex_);
    board_failures_[static_cast<std::size_t>(peer)] = {status, message};
  }
  board_failed_[static_cast<std::size_t>(peer)].store(true, std::memory_order_release);
  p.attach_wanted = false;
  p.pulls.clear();
  p.parked.clear();
  p.posted.clear();
  p.held.clear();
  p.held_by_tag.clear();
  p.held_bytes = 0;
  p.stuck_since.reset();
  if (p.writer) {
    // Nothing more goes to it, and any message of ours it may be reading is about to be
    // released: tell it before failing the sends.
    {
      std::lock_guard lock(p.lane->mutex);
      p.lane->open = false;
    }
    store_release(p.writer->control().closed, 1u);
    ring_doorbell(p.segment->header());
    complete_acknowledged(p);  // messages it finished reading succeeded
  }
  for (auto& [cookie, op] : p.awaiting) op.request->complete(status, message);
  p.awaiting.clear();
  for (auto& op : p.sends) op.request->complete(status, message);
  p.sends.clear();
  matcher_.fail_peer(peer, status, message);
  check_connected();
  failure_listener_(peer, status, message);
}

void ShmTransport::do_shutdown(hm_status_t status, const std::string& why) {
  if (!closed_.close(status, why)) return;
  {
    std::lock_guard lock(mutex_);
    final_status_ = status;
    final_why_ = why;
  }
  // Tell the peers first: the rings this rank writes, then its own segment, then their doorbells.
  for (auto& p : peers_) {
    if (p.writer) {
      {
        std::lock_guard lock(p.lane->mutex);
        p.lane->open = false;
      }
      store_release(p.writer->control().closed, 1u);
    }
  }
  write_close_reason(own_.header(), status, why);
  store_release(own_.header().closed, 1u);
  for (auto& p : peers_) {
    if (p.segment) ring_doorbell(p.segment->header());
  }
  // From here on no copy touches a caller's buffer.
  for (auto& p : peers_) {
    p.pulls.clear();
    p.parked.clear();
    p.posted.clear();
    p.held.clear();
    p.held_by_tag.clear();
    p.held_bytes = 0;
    p.stuck_since.reset();
    complete_acknowledged(p);
    for (auto& [cookie, op] : p.awaiting) op.request->complete(status, why);
    p.awaiting.clear();
    for (auto& op : p.sends) op.request->complete(status, why);
    p.sends.clear();
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  own_.unlink();
}

}  // namespace holmes::shm
