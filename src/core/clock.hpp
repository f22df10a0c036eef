// Deadlines for every blocking wait. Waits take a Deadline rather than a duration so that a
// multi-step operation shares one budget.
#pragma once

#include <chrono>

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

}  // namespace holmes
