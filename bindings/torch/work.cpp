#include "work.hpp"

#include <c10/util/Exception.h>

#include <stdexcept>
#include <utility>

namespace holmes::torch_backend {

HolmesWork::HolmesWork(int rank, c10d::OpType type, std::string what,
                       std::vector<at::Tensor> outputs, std::chrono::milliseconds bound)
    : c10d::Work(rank, type),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      bound_(bound),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

bool HolmesWork::isCompleted() {
  std::lock_guard lock(mutex_);
  return completed_;
}

bool HolmesWork::isSuccess() const {
  std::lock_guard lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr HolmesWork::exception() const {
  std::lock_guard lock(mutex_);
  return exception_;
}

bool HolmesWork::wait(std::chrono::milliseconds timeout) {
  // Without a timeout of its own the caller completes the work itself when the completer has not
  // got to it yet (Holmes bounds each of those waits by the group's timeout).
  if (timeout == kNoTimeout && claim()) run_to_completion();
  const auto bound = timeout == kNoTimeout ? bound_ : timeout;
  std::unique_lock lock(mutex_);
  if (!cv_.wait_for(lock, bound, [this] { return completed_; })) {
    TORCH_CHECK(false, "holmes backend: ", what_, " did not complete within ", bound.count(),
                " ms");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

namespace {

std::exception_ptr failure(const std::string& what) {
  try {
    throw;
  } catch (const Error& e) {
    return std::make_exception_ptr(std::runtime_error(
        "holmes backend: " + what + " failed (" + hm_status_string(e.status()) + "): " + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(
        std::runtime_error("holmes backend: " + what + " failed: " + e.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error("holmes backend: " + what + " failed"));
  }
}

}  // namespace

void HolmesWork::run_to_completion() noexcept {
  std::exception_ptr error;
  // Every request is waited for even after one failed (each wait is bounded, and quick once the
  // communicator is poisoned): none may run on into buffers this work then releases.
  for (auto& request : requests) {
    try {
      request.wait();
    } catch (...) {
      if (!error) error = failure(what_);
    }
  }
  if (!error && finish) {
    try {
      finish();
    } catch (...) {
      error = failure(what_);
    }
  }
  // The buffers (keep, finish's captures) stay with the work: dropping a tensor's last
  // reference can take the GIL, which this thread must never wait for (see Completer).
  requests.clear();
  c10d::Work::finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

Completer::Completer() : thread_([this] { run(); }) {}

void Completer::submit(c10::intrusive_ptr<HolmesWork> work) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void Completer::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Completer::run() {
  for (;;) {
    c10::intrusive_ptr<HolmesWork> work;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is completed
      work = queue_.front();
      queue_.pop_front();
    }
    if (work->claim()) work->run_to_completion();
    std::lock_guard lock(mutex_);
    finished_.push_back(std::move(work));
  }
}

std::vector<c10::intrusive_ptr<HolmesWork>> Completer::take_finished() {
  std::lock_guard lock(mutex_);
  return std::exchange(finished_, {});
}

}  // namespace holmes::torch_backend
