// Runs a communicator's nonblocking collectives on one worker thread, one after another, in the
// order they were issued (every rank issues them in the same order, so their tags agree). The
// thread starts with the first nonblocking call and sleeps while the queue is empty.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace holmes::detail {

class OpQueue {
 public:
  OpQueue() = default;
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;
  ~OpQueue() { stop(); }

  void submit(std::function<void()> op);
  // Nothing queued and nothing running.
  bool idle() const;
  // Operations queued or running.
  std::size_t pending() const;
  // Runs what is queued (callers make it fail fast first), then joins the thread.
  void stop();

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace holmes::detail
