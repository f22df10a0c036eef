// A Completion is the outcome of one asynchronous operation: a transport send or receive, or a
// whole nonblocking collective. Whoever does the work calls complete() once; callers wait()
// until a deadline. Waiting blocks on a condition variable: it never spins.
#pragma once

#include <holmes/holmes.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.hpp"

namespace holmes {

// How long a waiter on a shared-memory link yields the core, checking for completion, before it
// sleeps (see CallerDrive::yield_before_sleep).
inline constexpr std::chrono::microseconds kYieldBeforeSleep{50};

// Work a waiter can do itself while it waits, instead of only waiting for another thread to do
// it: a shared-memory transport's progress (read the rings, deliver, post receives). Handing
// every small message from the transport's thread to the waiting thread costs a wake-up through
// the kernel each time; polling from the waiter does not. Implementations never block.
class Completion;

class Progress {
 public:
  virtual ~Progress() = default;
  // Bracket a waiter's calls of poll(); `satisfied` says whether what it waited for has
  // happened (otherwise it is about to sleep and another thread must take over).
  virtual void start_polling() = 0;
  // Runs what is ready. `awaited` (may be nullptr) is what the waiter waits for: a poll may stop
  // as soon as that is done, sparing the waiter one more look for news it does not need yet.
  virtual void poll(const Completion* awaited) = 0;
  virtual void stop_polling(bool satisfied) = 0;
};

class Completion {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // Records the outcome and wakes waiters. Only the first call counts; returns whether it was.
  bool complete(hm_status_t status = HM_SUCCESS, std::string message = {});

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Meaningful once done().
  hm_status_t status() const { return status_; }
  const std::string& message() const { return message_; }

  // Lets waiters drive `progress` while they yield (set before the completion is handed out).
  void set_progress(std::shared_ptr<Progress> progress) { progress_ = std::move(progress); }

  // Blocks until done or the deadline; returns done(). For `yield_first` it yields the core
  // between checks (and polls the progress, when there is one) before it sleeps. `drive`, when
  // given, is polled instead of this completion's own progress: everything the waiting thread
  // drives, of which this completion's transport is a part (a router's caller drives each of its
  // carriers and must keep them all going while it waits on one).
  bool wait_until(const Deadline& deadline,
                  std::chrono::microseconds yield_first = std::chrono::microseconds(0),
                  Progress* drive = nullptr);

  // Runs `callback` once the outcome is known: at once (on this thread) if already done, else on
  // the thread that completes it. Callbacks must be short and must not block.
  void on_complete(std::function<void(const Completion&)> callback);

  // A completion that ends when all of `parts` have: with the first failure among them, or
  // success.
  static std::shared_ptr<Completion> all_of(const std::vector<std::shared_ptr<Completion>>& parts);

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
  hm_status_t status_ = HM_SUCCESS;
  std::string message_;
  std::vector<std::function<void(const Completion&)>> callbacks_;
  std::shared_ptr<Progress> progress_;
};

using CompletionPtr = std::shared_ptr<Completion>;

}  // namespace holmes
