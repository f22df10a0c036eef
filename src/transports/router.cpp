#include "transports/router.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace holmes {

Router::Router(int rank, std::vector<std::unique_ptr<Transport>> transports,
               std::vector<Route> routes, const std::vector<std::vector<std::string>>& addresses)
    : rank_(rank), transports_(std::move(transports)), routes_(std::move(routes)) {
  transports_.resize(std::size(kAllTransportKinds));
  auto& tcp = transports_[static_cast<std::size_t>(TransportKind::kTcp)];
  if (!tcp) fail(HM_ERR_INTERNAL, "router without its tcp control plane");
  for (const auto& r : routes_) {
    if (!transports_[static_cast<std::size_t>(r.kind)]) {
      fail(HM_ERR_INTERNAL, "route through {}, which was not created", transport_name(r.kind));
    }
  }
  // The one kind every peer's traffic takes, if there is one (sole_carrier), and every kind that
  // carries some peer's traffic (carriers_); routes are fixed.
  bool uniform = true;
  std::vector<bool> carries(transports_.size(), false);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_) continue;
    const auto kind = routes_[static_cast<std::size_t>(peer)].kind;
    uniform = uniform && (!sole_kind_ || *sole_kind_ == kind);
    sole_kind_ = kind;
    carries[static_cast<std::size_t>(kind)] = true;
  }
  if (!uniform) sole_kind_.reset();
  std::vector<Progress*> progress;
  for (std::size_t k = 0; k < transports_.size(); ++k) {
    if (!carries[k]) continue;
    carriers_.push_back(transports_[k].get());
    progress.push_back(transports_[k]->caller_progress());
  }
  if (carriers_.size() > 1 &&
      std::none_of(progress.begin(), progress.end(), [](Progress* p) { return p == nullptr; })) {
    drive_all_ = std::make_unique<CombinedProgress>(std::move(progress));
  }
  // When the control plane sees a peer go, fail that peer's traffic wherever it is carried.
  tcp->set_peer_failure_listener([this](int peer, hm_status_t status, const std::string& message) {
    // The io thread may report while the router is being built or torn down: the lock orders it
    // against set_shaping and the destructor, and nothing is touched once closing.
    const std::lock_guard lock(listener_mutex_);
    if (closing_) return;
    if (shaper_) shaper_->fail_peer(peer, status, message);
    const auto kind = routes_[static_cast<std::size_t>(peer)].kind;
    if (kind != TransportKind::kTcp) {
      transports_[static_cast<std::size_t>(kind)]->fail_peer(peer, status, message);
    }
  });
  for (std::size_t k = 0; k < transports_.size(); ++k) {
    if (transports_[k]) transports_[k]->set_peers(rank_, addresses.at(k));
  }
}

Router::~Router() {
  {
    const std::lock_guard lock(listener_mutex_);
    closing_ = true;
  }
  // The shaper first: it hands messages to the transports.
  shaper_.reset();
  // Stop the data transports before the control plane, whose listener points at them.
  for (std::size_t k = transports_.size(); k-- > 0;) transports_[k].reset();
}

std::string Router::listen_address() const {
  return transports_[static_cast<std::size_t>(TransportKind::kTcp)]->listen_address();
}

void Router::set_peers(int, std::vector<std::string>) {
  fail(HM_ERR_INTERNAL, "a router's peers are set when it is built");
}

CompletionPtr Router::connect_all() {
  std::vector<CompletionPtr> parts;
  for (const auto& t : transports_) {
    if (t) parts.push_back(t->connect_all());
  }
  return Completion::all_of(parts);
}

Transport& Router::carrier(int peer) const {
  require(peer >= 0 && peer < size() && peer != rank_, "no route to rank {}", peer);
  return *transports_[static_cast<std::size_t>(routes_[static_cast<std::size_t>(peer)].kind)];
}

void Router::set_shaping(std::vector<std::optional<LinkShape>> shapes) {
  require(shapes.size() == routes_.size(), "shaping for {} peers, the router has {}", shapes.size(),
          routes_.size());
  shapes[static_cast<std::size_t>(rank_)].reset();
  const std::lock_guard lock(listener_mutex_);
  shaper_.reset();
  if (std::none_of(shapes.begin(), shapes.end(), [](const auto& s) { return s.has_value(); })) {
    return;
  }
  shaper_ = std::make_unique<LinkShaper>(
      std::move(shapes), [this](int peer, std::uint64_t tag, std::uint32_t signature,
                                std::span<const std::byte> data) {
        return carrier(peer).isend(peer, tag, signature, data);
      });
}

CompletionPtr Router::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<const std::byte> data) {
  if (shaper_ && shaper_->shape(peer) != nullptr) return shaper_->isend(peer, tag, signature, data);
  return carrier(peer).isend(peer, tag, signature, data);
}

CompletionPtr Router::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<std::byte> data) {
  return carrier(peer).irecv(peer, tag, signature, data);
}

CompletionPtr Router::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                   std::span<std::byte> data, const ReceiveCombine& combine) {
  return carrier(peer).irecv_reduce(peer, tag, signature, data, combine);
}

void Router::shutdown(hm_status_t status, const std::string& why, bool wait) {
  // Data transports first: their goodbyes should reach peers before the control plane closes,
  // or peers read the tcp close as a failure. The shaper before them: nothing it holds may reach
  // a transport after that one's shutdown.
  if (shaper_) shaper_->shutdown(status, why, wait);
  for (std::size_t k = transports_.size(); k-- > 0;) {
    if (transports_[k]) transports_[k]->shutdown(status, why, wait);
  }
}

Transport* Router::sole_carrier() const {
  if (shaper_ || !sole_kind_) return nullptr;
  return transports_[static_cast<std::size_t>(*sole_kind_)].get();
}

std::span<Transport* const> Router::driven() const {
  // A drive promises that every wait of the caller polls the driven transports. With one
  // carrier its own waits do. With several, the collectives' waits poll them all (through
  // caller_progress) if every carrier's waiters poll; a wait on a carrier whose waiters sleep at
  // once (verbs), or on the shaper's thread, would leave the others unpolled: no drive.
  // carriers_ is fixed, so this costs no allocation on a small collective's way in and out.
  if (shaper_ || (carriers_.size() != 1 && !drive_all_)) return {};
  return carriers_;
}

void Router::begin_caller_drive() {
  for (Transport* t : driven()) t->begin_caller_drive();
}

void Router::end_caller_drive() {
  for (Transport* t : driven()) t->end_caller_drive();
}

Progress* Router::caller_progress() {
  if (shaper_) return nullptr;
  if (Transport* t = sole_carrier()) return t->caller_progress();
  return drive_all_.get();
}

SharedBoard* Router::shared_board() {
  Transport* t = sole_carrier();
  return t != nullptr ? t->shared_board() : nullptr;
}

std::chrono::microseconds Router::yield_before_sleep(int peer) const {
  // A shaped send completes after its delay, on the shaper's thread: nothing to yield for.
  if (shaper_ && shaper_->shape(peer) != nullptr) return std::chrono::microseconds(0);
  return peer >= 0 && peer < size() ? carrier(peer).yield_before_sleep(peer)
                                    : std::chrono::microseconds(0);
}

LinkProperties Router::link(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) return {"self", "this rank", 0, 0};
  LinkProperties link = carrier(peer).link(peer);
  if (const LinkShape* shape = shaper_ ? shaper_->shape(peer) : nullptr) {
    link.description += ", " + shape->describe();
    link.bandwidth_gbytes = shape->bytes_per_s / 1e9;
    link.latency_us = std::chrono::duration<double, std::micro>(shape->latency).count();
  }
  return link;
}

void Router::fail_peer(int peer, hm_status_t status, const std::string& message) {
  if (shaper_) shaper_->fail_peer(peer, status, message);
  carrier(peer).fail_peer(peer, status, message);
}

}  // namespace holmes
