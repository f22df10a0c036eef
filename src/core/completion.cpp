#include "core/completion.hpp"

namespace holmes {

bool Completion::complete(hm_status_t status, std::string message) {
  {
    std::lock_guard lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return false;
    status_ = status;
    message_ = std::move(message);
    done_.store(true, std::memory_order_release);
  }
  done_cv_.notify_all();
  return true;
}

bool Completion::wait_until(const Deadline& deadline) {
  if (done()) return true;
  std::unique_lock lock(mutex_);
  done_cv_.wait_until(lock, deadline.at(), [&] { return done_.load(std::memory_order_relaxed); });
  return done_.load(std::memory_order_acquire);
}

}  // namespace holmes
