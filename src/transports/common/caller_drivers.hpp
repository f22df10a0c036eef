// The threads inside CallerDrive::begin_caller_drive .. end_caller_drive of one endpoint. A
// transport asks whether the thread calling it drives, on every poll of a waiting caller, so
// the question costs no lock: a thread's membership is only ever changed by that thread, and a
// few slots of atomics hold the members (a rare extra thread goes to a locked overflow list). A
// transport also drops a thread that stops keeping its promise (about to sleep in a wait).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace holmes {

class CallerDrivers {
 public:
  void add() {
    const auto me = std::this_thread::get_id();
    std::lock_guard lock(mutex_);  // against other threads taking the same free slot
    count_.fetch_add(1, std::memory_order_relaxed);
    for (auto& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) == std::thread::id()) {
        slot.store(me, std::memory_order_relaxed);
        return;
      }
    }
    overflow_.push_back(me);
    overflow_count_.fetch_add(1, std::memory_order_relaxed);
  }

  // Whether this thread drives; if it did, it no longer does.
  bool remove() {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    const auto me = std::this_thread::get_id();
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) == me) {
        slot.store(std::thread::id(), std::memory_order_relaxed);
        count_.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
    }
    const auto it = std::find(overflow_.begin(), overflow_.end(), me);
    if (it == overflow_.end()) return false;
    overflow_.erase(it);
    overflow_count_.fetch_sub(1, std::memory_order_relaxed);
    count_.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }

  // Relaxed loads suffice: only this thread writes its own id, and it sees its own writes.
  bool contains() const {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    const auto me = std::this_thread::get_id();
    for (const auto& slot : slots_) {
      if (slot.load(std::memory_order_relaxed) == me) return true;
    }
    if (overflow_count_.load(std::memory_order_relaxed) == 0) return false;
    std::lock_guard lock(mutex_);
    return std::find(overflow_.begin(), overflow_.end(), me) != overflow_.end();
  }

 private:
  static constexpr std::size_t kSlots = 4;
  mutable std::mutex mutex_;
  std::array<std::atomic<std::thread::id>, kSlots> slots_{};
  std::vector<std::thread::id> overflow_;  // members beyond the slots (under mutex_)
  std::atomic<int> count_{0};
  std::atomic<int> overflow_count_{0};
};

}  // namespace holmes
