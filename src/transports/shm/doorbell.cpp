#include "transports/shm/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>

namespace holmes::shm {
namespace {

long futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

// Sleeps while `word` holds `seen`, at most `timeout`. Returns at once with EAGAIN when the word
// has moved in between; EINTR and ETIMEDOUT are ordinary: callers look again either way.
void futex_wait_for(std::uint32_t* word, std::uint32_t seen, std::chrono::nanoseconds timeout) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(seconds.count());
  relative.tv_nsec = static_cast<long>((timeout - seconds).count());
  futex(word, FUTEX_WAIT, seen, &relative);
}

}  // namespace

void ring_doorbell(SegmentHeader& header) {
  // seq_cst on both sides (this bump then the `sleeping` load; the sleeper's `sleeping` store then
  // its doorbell load) orders them in one total order: either the sleeper sees the bump and does
  // not sleep, or this side sees `sleeping` and wakes it. The same holds for `polling`: a poller
  // that stops decrements it and then reads the doorbell, so it sees this bump whenever this
  // side saw it polling and skipped the wake.
  std::atomic_ref<std::uint32_t>(header.doorbell).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(header.polling).load(std::memory_order_seq_cst) != 0) return;
  if (std::atomic_ref<std::uint32_t>(header.sleeping).load(std::memory_order_seq_cst) != 0) {
    futex(&header.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void wake_owner(SegmentHeader& header) {
  std::atomic_ref<std::uint32_t>(header.doorbell).fetch_add(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(header.sleeping).load(std::memory_order_seq_cst) != 0) {
    futex(&header.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void start_polling(SegmentHeader& header) {
  std::atomic_ref<std::uint32_t>(header.polling).fetch_add(1, std::memory_order_seq_cst);
}

void stop_polling(SegmentHeader& header) {
  std::atomic_ref<std::uint32_t>(header.polling).fetch_sub(1, std::memory_order_seq_cst);
}

std::uint32_t doorbell_value(SegmentHeader& header) {
  return std::atomic_ref<std::uint32_t>(header.doorbell).load(std::memory_order_acquire);
}

void publish_word(std::uint32_t& word, std::uint32_t value, std::uint32_t& waiters) {
  std::atomic_ref<std::uint32_t>(word).store(value, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(waiters).load(std::memory_order_seq_cst) != 0) {
    futex(&word, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void wait_for_word(std::uint32_t& word, std::uint32_t value, std::uint32_t& waiters,
                   std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  std::atomic_ref<std::uint32_t> count(waiters);
  count.fetch_add(1, std::memory_order_seq_cst);
  const std::uint32_t seen = std::atomic_ref<std::uint32_t>(word).load(std::memory_order_seq_cst);
  if (seen != value) futex_wait_for(&word, seen, timeout);
  count.fetch_sub(1, std::memory_order_seq_cst);
}

void sleep_on_doorbell(SegmentHeader& header, std::uint32_t seen,
                       std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  std::atomic_ref<std::uint32_t> sleeping(header.sleeping);
  sleeping.store(1, std::memory_order_seq_cst);
  if (std::atomic_ref<std::uint32_t>(header.doorbell).load(std::memory_order_seq_cst) == seen) {
    futex_wait_for(&header.doorbell, seen, timeout);
  }
  sleeping.store(0, std::memory_order_relaxed);
}

}  // namespace holmes::shm
