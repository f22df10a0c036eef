// Whose turn it is to progress a transport: its own thread (tcp's io thread, ucx's progress
// thread) or a caller that drives a small collective (CallerDrive::begin_caller_drive). Bundles
// the parts every such transport needs: the callers that drive (caller_drivers.hpp), the lease
// that parks the transport's thread while they do (io_lease.hpp), and the turn lock that lets one
// thread at a time touch the transport's state (turn_lock.hpp).
#pragma once

#include <chrono>
#include <utility>

#include "transports/common/caller_drivers.hpp"
#include "transports/common/io_lease.hpp"
#include "transports/common/turn_lock.hpp"

namespace holmes {

class ProgressTurns {
 public:
  // How long a driving caller polls and yields before it sleeps (yield_before_sleep): a round
  // trip over loopback or shared memory on a busy host takes microseconds to tens of them; 1 ms
  // covers it with room.
  static constexpr std::chrono::microseconds kDrivenYield{1000};
  // How long the transport's thread stays parked after the last driving call ended, so that
  // back-to-back small collectives keep progressing the transport from the callers' threads.
  static constexpr std::chrono::microseconds kDriveLinger{1000};

  // `linger`: how long the transport's thread stays parked after the last sign of a driver.
  explicit ProgressTurns(std::chrono::microseconds linger = kDriveLinger) : lease_(linger) {}

  // CallerDrive::begin_caller_drive. True when the transport's thread must be nudged out of its
  // wait (a no-op handler, an eventfd) to park.
  bool begin_drive() {
    drivers_.add();
    return lease_.begin();
  }
  // CallerDrive::end_caller_drive (a no-op if the thread already handed over in stop_polling).
  void end_drive() {
    if (drivers_.remove()) lease_.end(IoLease::Ending::kLinger);
  }
  // Progress::stop_polling: a driving caller about to sleep hands over to the transport's thread.
  void stop_polling(bool satisfied) {
    if (!satisfied && drivers_.remove()) lease_.end(IoLease::Ending::kResumeNow);
  }
  // Whether this thread drives.
  bool drives() const { return drivers_.contains(); }
  // CallerDrive::yield_before_sleep: a driving caller polls for a while before it sleeps; any
  // other wait sleeps at once (a large transfer would only burn the core the transport's thread
  // needs).
  std::chrono::microseconds yield_before_sleep() const {
    return drives() ? kDrivenYield : std::chrono::microseconds(0);
  }
  // Work was queued for the transport: its thread resumes now unless a caller drives (that
  // caller's next poll runs it).
  void handed_over() {
    if (!drivers_.contains()) lease_.release();
  }
  // Shutdown: the transport's thread runs from now on, whoever drives.
  void close() { lease_.close(); }
  // Whether this thread is taking a turn now (inside run_as_driver or own_turn).
  bool running() const { return turn_.held_here(); }

  // A driving caller's turn: runs `run` on this thread and returns true if this thread drives,
  // the transport's thread is parked and no other thread is taking a turn; false (nothing run)
  // otherwise, and never from inside a turn. Renews the lease either way when this thread drives.
  template <typename Run>
  bool run_as_driver(Run&& run) {
    if (running() || !drivers_.contains()) return false;
    lease_.renew();
    if (!lease_.parked()) return false;
    // Refused while the transport's thread is leaving the lease, or another caller runs.
    return turn_.try_run(std::forward<Run>(run));
  }

  // The transport's own thread: waits while callers hold the lease, then runs `turn` as the one
  // thread taking a turn, and returns what it returns.
  template <typename Turn>
  decltype(auto) own_turn(Turn&& turn) {
    lease_.wait_while_leased();
    return turn_.run(std::forward<Turn>(turn));
  }

 private:
  CallerDrivers drivers_;
  IoLease lease_;
  TurnLock turn_;
};

}  // namespace holmes
