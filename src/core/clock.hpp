// Deadlines for every blocking wait. Waits take a Deadline rather than a duration so that a
// multi-step operation shares one budget.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace holmes {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  static Deadline after(std::chrono::milliseconds timeout) {
    return Deadline(Clock::now() + timeout);
  }

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  std::chrono::milliseconds remaining() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return left.count() > 0 ? left : std::chrono::milliseconds(0);
  }

 private:
  Clock::time_point at_;
};

// The pauses of a poll of something with no wake-up to wait on (a CUDA event, a counter in the
// store): short at first, for a quick answer, doubling up to `longest`, so that a long wait costs
// the CPU nothing (on 2 cores a spinning rank starves the others).
class GrowingPause {
 public:
  GrowingPause(Clock::duration first, Clock::duration longest) : pause_(first), longest_(longest) {}

  // Sleeps the current pause, then doubles it.
  void sleep() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, longest_);
  }
  // The same, but never past `deadline`.
  void sleep(const Deadline& deadline) {
    std::this_thread::sleep_for(
        std::max(Clock::duration::zero(), std::min(pause_, deadline.at() - Clock::now())));
    pause_ = std::min(pause_ * 2, longest_);
  }

 private:
  Clock::duration pause_;
  Clock::duration longest_;
};

}  // namespace holmes
