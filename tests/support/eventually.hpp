// Waits, bounded, for a condition another thread makes true (a counter a server or a transport's
// thread updates a little after the test's own call returns): polls it, sleeping `step` between
// looks. Returns whether it held in time.
#pragma once

#include <chrono>
#include <thread>

namespace holmes::test_support {

template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds patience = std::chrono::seconds(5),
                std::chrono::microseconds step = std::chrono::microseconds(100)) {
  const auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(step);
  }
  return condition();
}

}  // namespace holmes::test_support
