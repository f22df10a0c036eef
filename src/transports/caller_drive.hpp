// The threads inside Transport::begin_caller_drive .. end_caller_drive of one endpoint. A
// transport asks whether the thread calling it drives (cheap when none does: one atomic load)
// and drops a thread that stops keeping its promise (about to sleep in a wait).
#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace holmes {

class CallerDrivers {
 public:
  void add() {
    std::lock_guard lock(mutex_);
    threads_.push_back(std::this_thread::get_id());
    count_.fetch_add(1, std::memory_order_relaxed);
  }

  // Whether this thread drives; if it did, it no longer does.
  bool remove() {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    const auto it = std::find(threads_.begin(), threads_.end(), std::this_thread::get_id());
    if (it == threads_.end()) return false;
    threads_.erase(it);
    count_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  bool contains() const {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    return std::find(threads_.begin(), threads_.end(), std::this_thread::get_id()) !=
           threads_.end();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::thread::id> threads_;
  std::atomic<int> count_{0};
};

}  // namespace holmes
