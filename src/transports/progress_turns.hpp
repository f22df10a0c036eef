// Whose turn it is to progress a transport: its own thread (tcp's io thread, ucx's progress
// thread) or a caller that drives a small collective (Transport::begin_caller_drive). Bundles
// the parts every such transport needs: the callers that drive (caller_drive.hpp), the lease that
// parks the transport's thread while they do (io_lease.hpp), and the run mutex that lets one
// thread at a time touch the transport's state, with a note of which thread holds it, so that
// work handed over from inside a turn is queued rather than run re-entrantly.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

#include "transports/caller_drive.hpp"
#include "transports/io_lease.hpp"

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

  // Transport::begin_caller_drive. True when the transport's thread must be nudged out of its
  // wait (a no-op handler, an eventfd) to park.
  bool begin_drive() {
    drivers_.add();
    return lease_.begin();
  }
  // Transport::end_caller_drive (a no-op if the thread already handed over in stop_polling).
  void end_drive() {
    if (drivers_.remove()) lease_.end(true);
  }
  // Progress::stop_polling: a driving caller about to sleep hands over to the transport's thread.
  void stop_polling(bool satisfied) {
    if (!satisfied && drivers_.remove()) lease_.end(false);
  }
  // Whether this thread drives.
  bool drives() const { return drivers_.contains(); }
  // Transport::yield_before_sleep: a driving caller polls for a while before it sleeps; any
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
  bool running() const { return runner_.load() == std::this_thread::get_id(); }

  // A driving caller's turn: runs `run` on this thread and returns true if this thread drives,
  // the transport's thread is parked and no other thread is taking a turn; false (nothing run)
  // otherwise, and never from inside a turn. Renews the lease either way when this thread drives.
  template <typename Run>
  bool run_as_driver(Run&& run) {
    if (running() || !drivers_.contains()) return false;
    lease_.renew();
    if (!lease_.parked()) return false;
    std::unique_lock lock(run_mutex_, std::try_to_lock);
    if (!lock.owns_lock())
      return false;  // the transport's thread is leaving the lease, or a caller
    const Runner runner(runner_);
    std::forward<Run>(run)();
    return true;
  }

  // The transport's own thread: waits while callers hold the lease, then runs `turn` as the one
  // thread taking a turn, and returns what it returns.
  template <typename Turn>
  decltype(auto) own_turn(Turn&& turn) {
    lease_.wait_while_leased();
    const std::lock_guard lock(run_mutex_);
    const Runner runner(runner_);
    return std::forward<Turn>(turn)();
  }

 private:
  // Notes the thread holding run_mutex_ for as long as it does.
  class Runner {
   public:
    explicit Runner(std::atomic<std::thread::id>& runner) : runner_(runner) {
      runner_.store(std::this_thread::get_id());
    }
    ~Runner() { runner_.store(std::thread::id()); }
    Runner(const Runner&) = delete;
    Runner& operator=(const Runner&) = delete;

   private:
    std::atomic<std::thread::id>& runner_;
  };

  CallerDrivers drivers_;
  IoLease lease_;
  std::mutex run_mutex_;
  std::atomic<std::thread::id> runner_{};
};

}  // namespace holmes
