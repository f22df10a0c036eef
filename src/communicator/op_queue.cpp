#include "communicator/op_queue.hpp"

namespace holmes::detail {

void OpQueue::submit(std::function<void()> op) {
  std::lock_guard lock(mutex_);
  queue_.push_back(std::move(op));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_one();
}

bool OpQueue::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !running_;
}

std::size_t OpQueue::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size() + (running_ ? 1 : 0);
}

void OpQueue::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void OpQueue::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    auto op = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    op();  // never throws: operations report through their Request
    lock.lock();
    running_ = false;
  }
}

}  // namespace holmes::detail
