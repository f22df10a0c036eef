// A torch Work over Holmes's nonblocking requests. The backend's completer thread waits for each
// work's requests in the order they were issued, runs its finishing step (copies back into
// non-contiguous outputs, a bitwise fold), then completes the work and its future, so DDP's comm
// hooks and future.then() chains run without anyone calling wait().
#pragma once

#include <holmes/holmes.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace holmes::torch_backend {

class HolmesWork final : public c10d::Work {
 public:
  // `bound`: how long wait() without a timeout may block (the group's timeout and some slack:
  // every Holmes wait below is bounded by the group's timeout already).
  HolmesWork(int rank, c10d::OpType type, std::string what, std::vector<at::Tensor> outputs,
             std::chrono::milliseconds bound);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override { return source_rank_; }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Filled by the backend when it issues the operation, before the completer sees the work.
  std::vector<Request> requests;
  std::function<void()> finish;  // after every request is done; may be empty
  std::vector<at::Tensor> keep;  // buffers the requests use, alive until completion
  int source_rank_ = -1;

  const std::string& what() const { return what_; }
  // Waits for the requests, runs finish, completes the work and its future: on the completer's
  // thread, or on a thread that waits for the work first (one wake-up fewer for the common
  // "issue, then wait" of a synchronous call). Whoever claims it first does it, once.
  bool claim() { return !claimed_.exchange(true); }
  void run_to_completion() noexcept;

 private:
  std::string what_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds bound_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> claimed_{false};
};

// One thread per process group that completes its works in issue order. It sleeps on a
// condition variable while there is nothing to wait for. It never drops the last reference to a
// work: releasing a tensor whose Python object torch keeps alive takes the GIL, which the thread
// destroying the group may hold (a deadlock), or which Python, finalizing, answers by ending the
// thread. Finished works wait in a list that the issuing thread empties (take_finished).
class Completer {
 public:
  Completer();
  ~Completer() { stop(); }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void submit(c10::intrusive_ptr<HolmesWork> work);
  // Completes what is queued (each wait is bounded), then joins the thread.
  void stop();
  // The works completed since the last call; the caller's thread drops them.
  std::vector<c10::intrusive_ptr<HolmesWork>> take_finished();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<c10::intrusive_ptr<HolmesWork>> queue_;
  std::vector<c10::intrusive_ptr<HolmesWork>> finished_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace holmes::torch_backend
