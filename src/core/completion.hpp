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
// sleeps (see Transport::yield_before_sleep).
inline constexpr std::chrono::microseconds kYieldBeforeSleep{50};

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

  // Blocks until done or the deadline; returns done().
  bool wait_until(const Deadline& deadline,
                  std::chrono::microseconds yield_first = std::chrono::microseconds(0));

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
};

using CompletionPtr = std::shared_ptr<Completion>;

}  // namespace holmes
