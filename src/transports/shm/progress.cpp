#include "transports/shm/transport.hpp"

#include <new>
#include <thread>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::shm {

using namespace std::chrono_literals;

void ShmTransport::run() {
  turn_.run([this] { next_liveness_ = Clock::now() + kLivenessPeriod; });
  // What one turn of the loop leaves to do outside the lock.
  struct Next {
    bool stop = false;
    bool busy = false;
    std::uint32_t seen = 0;  // the doorbell when the pass began
    std::chrono::nanoseconds bound{0};
  };
  while (true) {
    const Next next = turn_.run([this] {
      Next n;
      if (closed_.closed()) {
        n.stop = true;
        return n;
      }
      progress_sleep_until_ = Clock::time_point::max();
      // Read the doorbell before looking for work: anything that arrives after this moves it.
      n.busy = pass();
      n.seen = last_pass_seen_;
      if (closed_.closed()) {
        n.stop = true;
      } else if (!n.busy) {
        const auto now = Clock::now();
        n.bound = sleep_bound(now);
        progress_sleep_until_ = now + n.bound;
      }
      return n;
    });
    if (next.stop) break;
    if (next.busy) continue;
    const std::uint32_t seen = next.seen;
    const auto bound = next.bound;
    // Peers answer within microseconds while a collective runs: yield the core a little before
    // sleeping on the doorbell (a futex wake-up costs tens of microseconds). Not while a caller
    // polls the rings itself: it sees the news first.
    bool moved = false;
    if (load_relaxed(own_.header().polling) == 0) {
      const auto spin_until = Clock::now() + kYieldBeforeSleep;
      while (!moved && Clock::now() < spin_until && load_relaxed(own_.header().polling) == 0) {
        std::this_thread::yield();
        moved = doorbell_value(own_.header()) != seen;
      }
    }
    if (!moved) sleep_on_doorbell(own_.header(), seen, bound);
  }
  // Stopped: whatever is queued now, or arrives later, fails at once.
  std::vector<Command> left;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    left.swap(commands_);
  }
  for (auto& c : left) {
    if (c.request) c.request->complete(final_status_, final_why_);
    if (c.done) c.done->set_value();
  }
}

bool ShmTransport::pass() {
  last_pass_seen_ = doorbell_value(own_.header());
  bool busy = take_commands();
  if (closed_.closed()) return busy;
  try {
    const auto now = Clock::now();
    busy |= attach_peers(now);
    busy |= read_rings(now);
    busy |= expire_parked(now);
    busy |= continue_pulls();
    busy |= write_rings();
    check_liveness(now);
    maybe_unlink();
  } catch (const std::exception& e) {
    // Nothing here throws by design; should memory run out, fail everything cleanly rather
    // than terminate the process from this thread.
    const bool memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    const auto why = fmt::format("shm: the progress loop failed: {}", e.what());
    HM_LOG_ERROR("shm rank {}: {}", directory_.rank(), why);
    do_shutdown(memory ? HM_ERR_OUT_OF_MEMORY : HM_ERR_INTERNAL, why);
  }
  return busy;
}

std::chrono::nanoseconds ShmTransport::sleep_bound(Clock::time_point now, Liveness liveness) const {
  // The liveness check's period bounds every sleep (it only looks when requests are pending, but
  // waking when nothing is costs two wake-ups a second and keeps the bound simple for callers
  // that post receives themselves).
  Clock::time_point until = now + kIdleWait;
  if (liveness == Liveness::kCounted) until = std::min(until, std::max(now, next_liveness_));
  for (const auto& p : peers_) {
    if (p.attach_wanted && !p.segment && !p.failure.failed()) {
      until = std::min(until, p.next_attach_try);
    }
    if (p.waiting_for_space) until = std::min(until, now + kSpaceWait);
    if (p.stuck_since) until = std::min(until, *p.stuck_since + tuning_.park_grace);
    for (const auto& [tag, parked] : p.parked) {
      until = std::min(until, parked.since + tuning_.park_grace);
    }
  }
  return std::max<std::chrono::nanoseconds>(until - now, 0ns);
}

bool ShmTransport::take_commands() {
  // Callers poll many times per message: look before taking the lock.
  if (!commands_queued_.load(std::memory_order_acquire)) return false;
  std::vector<Command> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(commands_);
    commands_queued_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : batch) {
    if (closed_.closed()) {
      if (c.request) c.request->complete(final_status_, final_why_);
      if (c.done) c.done->set_value();
      continue;
    }
    try {
      handle(c);
    } catch (const std::exception& e) {  // out of memory in the matcher: fail this request only
      if (c.request) c.request->complete(HM_ERR_OUT_OF_MEMORY, fmt::format("shm: {}", e.what()));
      if (c.done) c.done->set_value();
    }
  }
  return !batch.empty();
}

void ShmTransport::handle(Command& c) {
  switch (c.kind) {
    case Command::Kind::kSend: {
      auto& p = peers_[static_cast<std::size_t>(c.peer)];
      if (!p.served || p.failure.failed()) {
        {
          std::lock_guard lock(p.lane->mutex);
          --p.lane->handed_off;
        }
        if (!p.served) {
          c.request->complete(HM_ERR_INVALID_ARGUMENT,
                              fmt::format("shm: rank {} is not reached through shm", c.peer));
        } else {
          c.request->complete(p.failure.status, p.failure.message);
        }
      } else {
        p.sends.push_back(SendOp{c.request, c.tag, c.signature, c.send_data, c.sent});
        want_attach(c.peer);
      }
      break;
    }
    case Command::Kind::kRecv: {
      auto& p = peers_[static_cast<std::size_t>(c.peer)];
      if (!p.served) {
        c.request->complete(HM_ERR_INVALID_ARGUMENT,
                            fmt::format("shm: rank {} is not reached through shm", c.peer));
        break;
      }
      if (matcher_.post(c.peer, c.tag, c.signature, c.recv_data, c.request, c.combine)) break;
      if (p.failure.failed()) {
        matcher_.fail_posted(c.peer, c.tag, p.failure.status, p.failure.message);
        break;
      }
      // Delivered receives leave their entry behind (erased here in bulk rather than on every
      // delivery, which would cost a lookup per fragment).
      if (p.posted.size() >= 64) {
        std::erase_if(p.posted, [](const auto& entry) { return entry.second->done(); });
      }
      p.posted[c.tag] = c.request;
      // Mapping the sender's segment lets this rank see it close even if it never writes
      // (and is needed anyway to wake it when its ring has room again).
      want_attach(c.peer);
      deliver_held(c.peer, c.tag);
      if (auto it = p.parked.find(c.tag); it != p.parked.end()) {
        const Parked parked = it->second;
        p.parked.erase(it);
        start_pull(c.peer, parked);
      }
      break;
    }
    case Command::Kind::kConnect:
      connect_waiters_.add(c.request);
      for (std::size_t p = 0; p < peers_.size(); ++p) {
        if (peers_[p].served) want_attach(static_cast<int>(p));
      }
      check_connected();
      break;
    case Command::Kind::kFailPeer:
      // The router calls this when the tcp control plane closes, which races with data the peer
      // wrote into its ring just before it finished: deliver that first. (The caller logs.)
      if (c.peer >= 0 && static_cast<std::size_t>(c.peer) < peers_.size() &&
          peers_[static_cast<std::size_t>(c.peer)].served) {
        end_after_drain(c.peer, c.status, c.message, FailureLog::kQuiet);
      }
      break;
    case Command::Kind::kCancelRecv:
      if (c.peer >= 0 && static_cast<std::size_t>(c.peer) < peers_.size()) {
        matcher_.fail_posted(c.peer, c.tag, HM_ERR_ABORTED, "shm: the receive was cancelled");
      }
      break;
    case Command::Kind::kShutdown:
      do_shutdown(c.status, c.message);
      c.done->set_value();
      break;
  }
}

bool ShmTransport::progress_thread_needed(Clock::time_point now) {
  // Work due before the progress thread wakes by itself (a parked message's grace, a pull to
  // continue, an attach to retry) needs it now, and so do copies a pass started and only the
  // progress thread would go on with. The liveness check does not: the thread wakes for it every
  // period anyway.
  for (const auto& p : peers_) {
    if (!p.pulls.empty() || (!p.sends.empty() && !p.waiting_for_space)) return true;
  }
  return now + sleep_bound(now, Liveness::kNotCounted) < progress_sleep_until_;
}

void ShmTransport::poll(const Completion*) {
  // One whole pass even when the awaited request is done early in it: a pass is cheap (no system
  // call) and leaves every ring read.
  bool ended = false;
  turn_.try_run([&] {
    if (closed_.closed()) return;
    pass();
    ended = closed_.closed();
  });
  if (ended) wake();  // the progress thread finishes the shutdown
}

void ShmTransport::begin_caller_drive() {
  // Only where waiters poll: a caller that would sleep at once could not keep its promise.
  if (!tuning_.caller_progress || tuning_.poll_window.count() == 0) return;
  drivers_.add();
  shm::start_polling(own_.header());
}

void ShmTransport::end_caller_drive() {
  // Dropped already when the thread went to sleep in a wait (stop_polling).
  if (drivers_.remove()) stop_polling(true);
}

void ShmTransport::stop_polling(bool satisfied) {
  shm::stop_polling(own_.header());
  // A waiter about to sleep hands over to the progress thread, and so ends its drive: peers
  // must wake that thread again.
  if (!satisfied || turn_.held_here()) {
    if (!satisfied && drivers_.remove()) shm::stop_polling(own_.header());
    wake();
    return;
  }
  // A driving thread still counts as polling and passes again soon (end_caller_drive at the
  // latest): nothing to hand over.
  if (drivers_.contains()) return;
  // Peers skipped the wake system call while this thread polled. News that came after its last
  // pass is read by one more pass here (peers wake the progress thread again from now on, unless
  // someone else polls). When another thread is in a pass, wake the progress thread instead:
  // that costs no system call when it is the one awake.
  bool wake_needed = true;
  turn_.try_run([&] {
    if (!closed_.closed() && doorbell_value(own_.header()) != last_pass_seen_) pass();
    wake_needed = closed_.closed() || progress_thread_needed(Clock::now());
  });
  if (wake_needed) wake();
}

bool ShmTransport::post_directly(Command& c) {
  // A completion callback run by a pass on this thread may post a receive: that one goes the
  // long way (the pass is in the middle of its work; try_run refuses it).
  if (!tuning_.caller_progress) return false;
  bool posted = false;
  bool wake_needed = false;
  turn_.try_run([&] {
    if (closed_.closed()) return;
    {
      std::lock_guard queue(mutex_);
      if (!accepting_ || !thread_.started()) return;
    }
    posted = true;
    take_commands();  // whatever was queued before this receive goes first
    if (!closed_.closed()) {
      try {
        handle(c);
      } catch (const std::exception& e) {  // out of memory in the matcher: fail this request only
        c.request->complete(HM_ERR_OUT_OF_MEMORY, fmt::format("shm: {}", e.what()));
      }
    } else {
      std::lock_guard queue(mutex_);
      c.request->complete(final_status_, final_why_);
    }
    wake_needed = progress_thread_needed(Clock::now());
  });
  if (wake_needed) wake();
  return posted;
}

}  // namespace holmes::shm
