// Who runs a transport's progress (tcp: its io_context; ucx: its UCP worker): the transport's
// own thread, or the callers driving small collectives (CallerDrive::begin_caller_drive).
//
// A small message costs far less than the two thread wake-ups it takes when the transport's
// thread does the work: the sender's caller posts, its transport thread wakes and sends; the
// receiver's transport thread wakes in epoll/poll, takes the message in and completes the
// request, and the receiving caller wakes. While callers drive, the transport's thread parks
// here instead and the callers progress the transport themselves between yields (their sends
// leave from their own thread, their events are polled by their own thread), as Open MPI's ranks
// do with their sockets. One thread at a time runs the transport's work (the transport's run
// mutex), so it does not matter which one.
//
// The transport's thread parks at its next chance once a caller begins (it is nudged out of its
// poll for that). The lease runs `linger` past the last sign of a driving caller (its start,
// each poll, its end), so that back-to-back small collectives do not pay a wake-up each, and a
// caller that blocks somewhere without polling costs at most `linger` of delay, never a hang.
// The transport's thread resumes at once when a driving caller is about to sleep in a wait, when
// a thread that does not drive hands the transport work, and for good once the lease is closed
// (shutdown).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "core/clock.hpp"

namespace holmes {

class IoLease {
 public:
  explicit IoLease(std::chrono::microseconds linger) : linger_(linger) {}

  // A caller begins driving. Returns whether the transport's thread must be nudged (a no-op handler
  // posted, an eventfd written) to leave its poll and park.
  bool begin();
  // A driving caller polls: the lease runs on.
  void renew() { extend(Clock::now()); }
  // How a caller stops driving: at the end of its call (kLinger: the transport's thread stays
  // parked a while longer for the next call) or because it is about to sleep (kResumeNow: the
  // thread resumes now unless another caller still drives).
  enum class Ending : bool { kResumeNow = false, kLinger = true };
  void end(Ending ending);
  // Work came from a thread that does not drive: the transport's thread resumes now unless a caller
  // drives (that caller runs it).
  void release();
  // The transport's thread runs from now on, whoever drives.
  void close();

  // Whether the transport's thread is parked: only then do callers progress the transport.
  bool parked() const { return parked_.load(std::memory_order_acquire); }

  // The transport's thread, between turns: returns once it should progress the transport again.
  void wait_while_leased();

 private:
  void extend(Clock::time_point now) {
    until_.store((now + linger_).time_since_epoch().count(), std::memory_order_relaxed);
  }
  void resume_now();  // holds mutex_

  const std::chrono::microseconds linger_;
  std::mutex mutex_;
  std::condition_variable resume_;
  int drivers_ = 0;
  // The lease's end, as Clock ticks: parked until then. Renewed without the mutex by polls.
  std::atomic<Clock::rep> until_{0};
  bool nudged_ = false;  // a nudge is on its way to the transport's thread
  bool closed_ = false;
  std::atomic<bool> parked_{false};
};

}  // namespace holmes
