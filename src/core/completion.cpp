#include "core/completion.hpp"

#include <thread>

namespace holmes {

bool Completion::complete(hm_status_t status, std::string message) {
  std::vector<std::function<void(const Completion&)>> callbacks;
  {
    std::lock_guard lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return false;
    status_ = status;
    message_ = std::move(message);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  done_cv_.notify_all();
  for (auto& callback : callbacks) callback(*this);
  return true;
}

void Completion::on_complete(std::function<void(const Completion&)> callback) {
  {
    std::lock_guard lock(mutex_);
    if (!done_.load(std::memory_order_relaxed)) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(*this);
}

std::shared_ptr<Completion> Completion::all_of(
    const std::vector<std::shared_ptr<Completion>>& parts) {
  auto joined = std::make_shared<Completion>();
  if (parts.empty()) {
    joined->complete();
    return joined;
  }
  auto left = std::make_shared<std::atomic<std::size_t>>(parts.size());
  for (const auto& part : parts) {
    part->on_complete([joined, left](const Completion& done) {
      if (done.status() != HM_SUCCESS) joined->complete(done.status(), done.message());
      if (left->fetch_sub(1) == 1) joined->complete();  // no-op if a failure came first
    });
  }
  return joined;
}

bool Completion::wait_until(const Deadline& deadline, std::chrono::microseconds yield_first,
                            Progress* drive) {
  if (done()) return true;
  Progress* const progress = drive != nullptr ? drive : progress_.get();
  // On a fast link (shared memory) completions arrive within microseconds: yield the core for a
  // short while before sleeping, since a wake-up through the kernel costs tens of microseconds
  // (more in a virtual machine) and would dominate small messages. Yielding, not spinning:
  // another rank's thread on this core runs meanwhile.
  const auto spin_until = std::chrono::steady_clock::now() + yield_first;
  if (progress != nullptr && yield_first.count() > 0) {
    // Do the transport's work here rather than wait for its thread to be woken and scheduled.
    progress->start_polling();
    bool satisfied = false;
    while (!satisfied && std::chrono::steady_clock::now() < spin_until) {
      progress->poll(this);
      satisfied = done();
      if (!satisfied) {
        std::this_thread::yield();
        satisfied = done();
      }
    }
    progress->stop_polling(satisfied);
    if (satisfied) return true;
  }
  while (std::chrono::steady_clock::now() < spin_until) {
    std::this_thread::yield();
    if (done()) return true;
  }
  std::unique_lock lock(mutex_);
  done_cv_.wait_until(lock, deadline.at(), [&] { return done_.load(std::memory_order_relaxed); });
  return done_.load(std::memory_order_acquire);
}

}  // namespace holmes
