#include "transports/shaping/link_shaper.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/status.hpp"

namespace holmes {
namespace {

// The longest the scheduler sleeps without checking for work: waits stay bounded even when a
// wake-up were lost; an idle shaper wakes this rarely.
constexpr std::chrono::milliseconds kLongestSleep{500};

// Time on the link for `bytes`, rounded up so that a message never arrives early.
Clock::duration serialization_time(std::size_t bytes, double bytes_per_s) {
  return std::chrono::ceil<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_s));
}

}  // namespace

std::string LinkShape::describe() const {
  const double us = std::chrono::duration<double, std::micro>(latency).count();
  std::string out = fmt::format("shaped to {:.4g} Gbit/s + {:.4g} us", bytes_per_s * 8 / 1e9, us);
  if (!origin.empty()) out += fmt::format(" ({})", origin);
  return out;
}

LinkShaper::LinkShaper(std::vector<std::optional<LinkShape>> shapes, SendFunction send)
    : shapes_(std::move(shapes)), send_(std::move(send)), bucket_of_(shapes_.size(), 0) {
  std::map<int, std::size_t> shared;  // bucket number -> index into free_at_
  for (std::size_t peer = 0; peer < shapes_.size(); ++peer) {
    const auto& s = shapes_[peer];
    if (!s) continue;
    if (s->bucket < 0) {
      bucket_of_[peer] = free_at_.size();
      free_at_.emplace_back();
    } else {
      auto [it, added] = shared.emplace(s->bucket, free_at_.size());
      if (added) free_at_.emplace_back();
      bucket_of_[peer] = it->second;
    }
    require(std::isfinite(s->bytes_per_s) && s->bytes_per_s > 0,
            "link to rank {}: shaped rate must be positive and finite, got {} bytes/s", peer,
            s->bytes_per_s);
    require(s->latency.count() >= 0,
            "link to rank {}: shaped latency must not be negative, got {} ns", peer,
            s->latency.count());
  }
  require(static_cast<bool>(send_), "a link shaper needs a send function");
  scheduler_ = std::thread([this] { run(); });
}

LinkShaper::~LinkShaper() {
  shutdown(HM_ERR_ABORTED, "the link shaper was destroyed", ShutdownWait::kUntilReleased);
  // Still joinable only when destroyed from its own thread (an owner let go in a completion
  // callback), after which that thread would lock a destroyed mutex. The router owns its shaper
  // and no completion callback owns a router, so this never happens: refused loudly rather than
  // risked.
  if (scheduler_.joinable()) std::terminate();
}

const LinkShape* LinkShaper::shape(int peer) const {
  if (peer < 0 || static_cast<std::size_t>(peer) >= shapes_.size()) return nullptr;
  const auto& s = shapes_[static_cast<std::size_t>(peer)];
  return s ? &*s : nullptr;
}

bool LinkShaper::any_shaped() const {
  for (const auto& s : shapes_) {
    if (s) return true;
  }
  return false;
}

CompletionPtr LinkShaper::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                std::span<const std::byte> data) {
  const LinkShape* link = shape(peer);
  if (link == nullptr)
    fail(HM_ERR_INTERNAL, "link shaper: the link to rank {} is not shaped", peer);
  auto done = std::make_shared<Completion>();
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      done->complete(stop_status_, stop_message_);
      return done;
    }
    // A message starts when its bucket is free, occupies it for its serialization time, and is
    // due one latency after its last byte.
    auto& free_at = free_at_[bucket_of_[static_cast<std::size_t>(peer)]];
    free_at = std::max(free_at, Clock::now()) + serialization_time(data.size(), link->bytes_per_s);
    const Key key{free_at + link->latency, next_sequence_++};
    const bool earliest = queue_.empty() || key < queue_.begin()->first;
    queue_.emplace(key, Pending{peer, tag, signature, data, done});
    if (earliest) wake_.notify_one();
  }
  return done;
}

void LinkShaper::run() {
  std::unique_lock lock(mutex_);
  while (!stopped_) {
    const auto now = Clock::now();
    if (queue_.empty() || queue_.begin()->first.first > now) {
      const auto until = queue_.empty()
                             ? now + kLongestSleep
                             : std::min(queue_.begin()->first.first, now + kLongestSleep);
      wake_.wait_until(lock, until);
      continue;
    }
    // One message at a time, so that shutdown() stops the hand-over between two messages.
    auto node = queue_.extract(queue_.begin());
    lock.unlock();
    hand_over(node.mapped());
    lock.lock();
  }
}

void LinkShaper::hand_over(Pending& message) {
  try {
    auto inner = send_(message.peer, message.tag, message.signature, message.data);
    inner->on_complete(
        [done = message.done](const Completion& c) { done->complete(c.status(), c.message()); });
  } catch (const Error& e) {
    message.done->complete(e.status(), e.what());
  } catch (const std::exception& e) {
    message.done->complete(HM_ERR_INTERNAL, e.what());
  }
}

void LinkShaper::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  std::map<Key, Pending> dropped;
  {
    std::lock_guard lock(mutex_);
    if (!stopped_) {
      stopped_ = true;
      stop_status_ = status;
      stop_message_ = why;
    }
    dropped.swap(queue_);
  }
  wake_.notify_all();
  // Completed outside the lock: their callbacks may call back into this shaper.
  for (auto& [key, message] : dropped) message.done->complete(status, why);
  // The thread finishes the hand-over in progress (a nonblocking call) and exits. A shutdown
  // from the scheduler thread itself (a completion callback) cannot wait for it.
  if (wait == ShutdownWait::kUntilReleased && scheduler_.joinable() &&
      scheduler_.get_id() != std::this_thread::get_id()) {
    scheduler_.join();
  }
}

void LinkShaper::fail_peer(int peer, hm_status_t status, const std::string& message) {
  std::vector<CompletionPtr> failed;
  {
    std::lock_guard lock(mutex_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->second.peer == peer) {
        failed.push_back(std::move(it->second.done));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& done : failed) done->complete(status, message);
}

}  // namespace holmes
