#include "transports/arrival_order.hpp"

#include <fmt/format.h>

#include "transports/common/tag_codec.hpp"

namespace holmes {
namespace {

// Whether sequence number `s` (modulo 2^32) comes before `next`: a message already taken.
bool taken(std::uint32_t s, std::uint64_t next) {
  const std::uint32_t ahead = s - static_cast<std::uint32_t>(next);
  return ahead >= (std::uint32_t{1} << 31);
}

}  // namespace

ArrivalOrder::ArrivalOrder(int size) : next_untagged_(static_cast<std::size_t>(size), 0) {}

std::uint64_t& ArrivalOrder::next(int peer, std::uint32_t user_tag) {
  if (user_tag == 0) return next_untagged_.at(static_cast<std::size_t>(peer));
  return next_tagged_[{peer, user_tag}];
}

void ArrivalOrder::arrived(int peer, std::uint64_t tag) {
  const auto p2p = decode_p2p_tag(tag);
  if (!p2p || peer < 0 || peer >= static_cast<int>(next_untagged_.size())) return;
  std::lock_guard lock(mutex_);
  if (taken(p2p->sequence, next(peer, p2p->user_tag))) return;
  if (!arrivals_.try_emplace({p2p->user_tag, peer, p2p->sequence}, arrival_count_).second) return;
  ++arrival_count_;
  if (waiting_.contains(p2p->user_tag)) match(p2p->user_tag);
}

std::uint64_t ArrivalOrder::claim(int peer, std::uint32_t user_tag) {
  std::lock_guard lock(mutex_);
  std::uint64_t& n = next(peer, user_tag);
  const std::uint64_t sequence = n++;
  arrivals_.erase({user_tag, peer, static_cast<std::uint32_t>(sequence)});
  // The peer's following message may have arrived already: now it is next, for a waiting ticket.
  if (waiting_.contains(user_tag)) match(user_tag);
  return sequence;
}

std::shared_ptr<ArrivalOrder::Ticket> ArrivalOrder::expect_any(std::uint32_t user_tag) {
  auto ticket = std::make_shared<Ticket>();
  ticket->user_tag = user_tag;
  std::lock_guard lock(mutex_);
  waiting_[user_tag].push_back(ticket);
  match(user_tag);
  fail_waiting();
  return ticket;
}

bool ArrivalOrder::cancel(const std::shared_ptr<Ticket>& ticket) {
  std::lock_guard lock(mutex_);
  const auto it = waiting_.find(ticket->user_tag);
  if (it == waiting_.end()) return ticket->peer < 0;
  const auto erased = std::erase(it->second, ticket);
  if (it->second.empty()) waiting_.erase(it);
  return erased > 0 || ticket->peer < 0;
}

void ArrivalOrder::match(std::uint32_t user_tag) {
  auto queue = waiting_.find(user_tag);
  while (queue != waiting_.end() && !queue->second.empty()) {
    // The earliest arrival with this tag that is its peer's next message.
    auto best = arrivals_.end();
    for (auto it = arrivals_.lower_bound({user_tag, 0, 0});
         it != arrivals_.end() && std::get<0>(it->first) == user_tag; ++it) {
      const auto [tag, peer, sequence] = it->first;
      if (sequence != static_cast<std::uint32_t>(next(peer, tag))) continue;
      if (best == arrivals_.end() || it->second < best->second) best = it;
    }
    if (best == arrivals_.end()) return;
    const auto [tag, peer, sequence] = best->first;
    arrivals_.erase(best);
    const std::uint64_t full = next(peer, tag)++;
    auto ticket = std::move(queue->second.front());
    queue->second.pop_front();
    if (queue->second.empty()) {
      waiting_.erase(queue);
      queue = waiting_.end();
    }
    ticket->peer = peer;
    ticket->tag = p2p_tag(tag, full);
    ticket->matched.complete();
  }
}

void ArrivalOrder::fail_waiting() {
  if (!failure_) return;
  for (auto& [tag, queue] : waiting_) {
    for (auto& ticket : queue) ticket->matched.complete(failure_->first, failure_->second);
  }
  waiting_.clear();
}

void ArrivalOrder::peer_failed(int peer, hm_status_t status, const std::string& message) {
  std::lock_guard lock(mutex_);
  if (!failure_) {
    failure_.emplace(status, fmt::format("a receive from any source cannot know whether rank {} "
                                         "was to send its message, and rank {} failed: {}",
                                         peer, peer, message));
  }
  fail_waiting();
}

void ArrivalOrder::close(hm_status_t status, const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!failure_) failure_.emplace(status, why);
  fail_waiting();
}

}  // namespace holmes
