// The progress of a transport: the thread it owns, and how a caller drives it instead.
//
// - ProgressThread: the transport's own thread (tcp's io thread, the ucx and shm progress
//   threads, the verbs completion thread). Joined when the transport goes, except from the
//   thread itself (a transport destroyed from one of its own callbacks), which then ends by
//   itself.
// - ProgressEngine: for a transport whose thread steps aside while callers drive a small
//   collective (tcp, ucx): whose turn it is (progress_turns.hpp), what a driving caller's waits
//   poll (Completion::wait_until's progress), and the caller-drive calls themselves
//   (begin/end_caller_drive, caller_progress, yield_before_sleep). The transport supplies two
//   hooks: its share of work for a driving caller's poll, and the nudge that wakes its thread out
//   of its wait so that it parks.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "core/completion.hpp"
#include "transports/common/caller_progress.hpp"
#include "transports/common/progress_turns.hpp"

namespace holmes {

class ProgressThread {
 public:
  ProgressThread() = default;
  ~ProgressThread() { join(); }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  void start(std::function<void()> body) { thread_ = std::thread(std::move(body)); }
  bool started() const { return thread_.joinable(); }
  // Whether the calling thread is this one.
  bool here() const { return started() && std::this_thread::get_id() == thread_.get_id(); }
  // Waits for the thread to end; from the thread itself, lets it end by itself instead.
  void join() {
    if (!thread_.joinable()) return;
    if (here()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  // Lets the thread end by itself (it must own what it uses).
  void detach() {
    if (thread_.joinable()) thread_.detach();
  }

 private:
  std::thread thread_;
};

class ProgressEngine {
 public:
  struct Hooks {
    // A driving caller's share of the transport's work while it waits for `awaited` (may be
    // nullptr); run as the one thread taking a turn.
    std::function<void(const Completion* awaited)> driven_poll;
    // Wakes the transport's thread out of its wait (a no-op handler, an eventfd).
    std::function<void()> nudge;
  };

  explicit ProgressEngine(Hooks hooks) : hooks_(std::move(hooks)) {}
  // Requests may outlive the engine: their progress stops calling it first.
  ~ProgressEngine() { detach_callers(); }
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  ProgressTurns& turns() { return turns_; }
  const ProgressTurns& turns() const { return turns_; }

  // What the transport's begin/end_caller_drive, yield_before_sleep and caller_progress do.
  void begin_drive() {
    // Out of its wait: the transport's thread parks after its current turn.
    if (turns_.begin_drive()) hooks_.nudge();
  }
  void end_drive() { turns_.end_drive(); }
  std::chrono::microseconds yield_before_sleep() const { return turns_.yield_before_sleep(); }
  // What a driving caller polls while it waits on any of the transport's requests.
  Progress* caller_progress() { return progress_.get(); }
  // Set on every request, so that a waiter drives the transport when it may.
  const std::shared_ptr<CallerProgress<ProgressEngine>>& request_progress() const {
    return progress_;
  }

  // From here on waiters' polls do nothing; returns once none is inside the transport. For a
  // transport about to go, before it stops its thread.
  void detach_callers() { progress_->detach(); }

  // For CallerProgress: a driving caller's turns, and its hand-over when it is about to sleep.
  void start_polling() {}
  void poll(const Completion* awaited) {
    turns_.run_as_driver([this, awaited] { hooks_.driven_poll(awaited); });
  }
  void stop_polling(bool satisfied) { turns_.stop_polling(satisfied); }

 private:
  Hooks hooks_;
  ProgressTurns turns_;
  std::shared_ptr<CallerProgress<ProgressEngine>> progress_ =
      std::make_shared<CallerProgress<ProgressEngine>>(*this);
};

}  // namespace holmes
