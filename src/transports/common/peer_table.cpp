#include "transports/common/peer_table.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace holmes {

void PeerDirectory::check(int rank, std::size_t size) const {
  require(rank >= 0 && static_cast<std::size_t>(rank) < size, "{}: rank {} outside [0, {})",
          transport_, rank, size);
  require(size_.load() == 0, "{}: peers were already set", transport_);
}

void PeerDirectory::set(int rank, std::vector<std::string> addresses) {
  check(rank, addresses.size());
  const auto size = static_cast<int>(addresses.size());
  {
    const std::lock_guard lock(mutex_);
    addresses_ = std::move(addresses);
  }
  rank_.store(rank);
  size_.store(size);
}

std::string PeerDirectory::address(int peer) const {
  const std::lock_guard lock(mutex_);
  return peer >= 0 && static_cast<std::size_t>(peer) < addresses_.size()
             ? addresses_[static_cast<std::size_t>(peer)]
             : std::string("?");
}

void PeerDirectory::require_peer(int peer, const char* action) const {
  require(peer >= 0 && peer < size_.load() && peer != rank_.load(), "{}: cannot {} rank {}",
          transport_, action, peer);
}

void ConnectWaiters::complete_all(hm_status_t status, const std::string& why) {
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters) w.done->complete(status, why);
}

std::optional<Clock::time_point> ConnectWaiters::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& w : waiters_) {
    if (w.deadline && (!next || w.deadline->at() < *next)) next = w.deadline->at();
  }
  return next;
}

}  // namespace holmes
