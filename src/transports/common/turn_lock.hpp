// The lock a transport's progress state lives under: one thread at a time takes a turn (the
// transport's own thread, or a caller that polls or drives), with a note of which thread holds
// it, so that work handed over from inside a turn (a completion callback that sends) is queued
// rather than run re-entrantly.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

namespace holmes {

class TurnLock {
 public:
  // Whether this thread is taking a turn now.
  bool held_here() const {
    return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  // Runs `turn` now if no thread (this one included) is taking a turn; false (nothing run)
  // otherwise. Never waits.
  template <typename Turn>
  bool try_run(Turn&& turn) {
    if (held_here()) return false;
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    const Owner owner(owner_);
    std::forward<Turn>(turn)();
    return true;
  }

  // Waits for the lock, then runs `turn` and returns what it returns. Not from inside a turn.
  template <typename Turn>
  decltype(auto) run(Turn&& turn) {
    const std::lock_guard lock(mutex_);
    const Owner owner(owner_);
    return std::forward<Turn>(turn)();
  }

 private:
  // Notes the thread holding mutex_ for as long as it does.
  class Owner {
   public:
    explicit Owner(std::atomic<std::thread::id>& owner) : owner_(owner) {
      owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }
    ~Owner() { owner_.store(std::thread::id(), std::memory_order_relaxed); }
    Owner(const Owner&) = delete;
    Owner& operator=(const Owner&) = delete;

   private:
    std::atomic<std::thread::id>& owner_;
  };

  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
};

}  // namespace holmes
