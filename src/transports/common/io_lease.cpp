#include "transports/common/io_lease.hpp"

namespace holmes {

bool IoLease::begin() {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  ++drivers_;
  extend(Clock::now());
  if (parked_.load(std::memory_order_relaxed) || nudged_) return false;
  nudged_ = true;
  return true;
}

void IoLease::end(Ending ending) {
  std::lock_guard lock(mutex_);
  if (drivers_ > 0) --drivers_;
  if (ending == Ending::kLinger) {
    // No wake-up here: that would cost what the lease saves. The parked thread looks again
    // every `linger` (wait_while_leased).
    extend(Clock::now());
  } else if (drivers_ == 0) {
    resume_now();
  }
}

void IoLease::release() {
  if (!parked()) return;
  std::lock_guard lock(mutex_);
  if (drivers_ == 0) resume_now();
}

void IoLease::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  resume_now();
}

void IoLease::resume_now() {
  until_.store(0, std::memory_order_relaxed);
  resume_.notify_one();
}

void IoLease::wait_while_leased() {
  std::unique_lock lock(mutex_);
  nudged_ = false;
  while (!closed_ &&
         Clock::now().time_since_epoch().count() < until_.load(std::memory_order_relaxed)) {
    parked_.store(true, std::memory_order_release);
    // Bounded: renewals and the end of a call do not notify.
    resume_.wait_for(lock, linger_);
  }
  parked_.store(false, std::memory_order_release);
}

}  // namespace holmes
