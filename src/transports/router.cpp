#include "transports/router.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace holmes {

Router::Router(int rank, std::vector<std::unique_ptr<Transport>> transports,
               std::vector<Route> routes, const std::vector<std::vector<std::string>>& addresses)
    : rank_(rank),
      arrivals_(static_cast<int>(routes.size())),
      transports_(std::move(transports)),
      routes_(std::move(routes)) {
  transports_.resize(std::size(kAllTransportKinds));
  auto& tcp = transports_[static_cast<std::size_t>(TransportKind::kTcp)];
  if (!tcp) fail(HM_ERR_INTERNAL, "router without its tcp control plane");
  // What each transport can do besides moving messages, asked once.
  kinds_.resize(transports_.size());
  for (std::size_t k = 0; k < transports_.size(); ++k) {
    if (Transport* t = transports_[k].get()) {
      kinds_[k] = {t, capability<CombiningReceive>(*t), capability<CallerDrive>(*t),
                   capability<SharedBoardAccess>(*t)};
    }
  }
  for (const auto& r : routes_) {
    if (!transports_[static_cast<std::size_t>(r.kind)]) {
      fail(HM_ERR_INTERNAL, "route through {}, which was not created", transport_name(r.kind));
    }
  }
  // The one kind every peer's traffic takes, if there is one (sole_carrier), and every kind that
  // carries some peer's traffic (drives_); routes are fixed.
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
  // A caller drives the carriers only if each can be driven (verbs cannot: its waiters sleep).
  std::vector<Progress*> progress;
  bool drivable = true;
  for (std::size_t k = 0; k < kinds_.size(); ++k) {
    if (!carries[k]) continue;
    CallerDrive* drive = kinds_[k].drive;
    drivable = drivable && drive != nullptr;
    if (drive == nullptr) continue;
    drives_.push_back(drive);
    progress.push_back(drive->caller_progress());
  }
  if (!drivable) drives_.clear();
  if (drives_.size() > 1 &&
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
    arrivals_.peer_failed(peer, status, message);
    if (observer_) observer_(peer, status, message);
  });
  for (auto& t : transports_) {
    if (t)
      t->set_arrival_listener(
          [this](int peer, std::uint64_t tag) { arrivals_.arrived(peer, tag); });
  }
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

CompletionPtr Router::connect_all() {
  std::vector<CompletionPtr> parts;
  for (const auto& t : transports_) {
    if (t) parts.push_back(t->connect_all());
  }
  return Completion::all_of(parts);
}

const Router::Carrier& Router::carrier(int peer) const {
  require(peer >= 0 && peer < size() && peer != rank_, "no route to rank {}", peer);
  return kinds_[static_cast<std::size_t>(routes_[static_cast<std::size_t>(peer)].kind)];
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
        return carrier(peer).transport->isend(peer, tag, signature, data);
      });
}

CompletionPtr Router::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<const std::byte> data) {
  if (shaper_ && shaper_->shape(peer) != nullptr) return shaper_->isend(peer, tag, signature, data);
  return carrier(peer).transport->isend(peer, tag, signature, data);
}

CompletionPtr Router::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<std::byte> data) {
  return carrier(peer).transport->irecv(peer, tag, signature, data);
}

CompletionPtr Router::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                   std::span<std::byte> data, const ReceiveCombine& combine) {
  const Carrier& c = carrier(peer);
  return c.combining != nullptr ? c.combining->irecv_reduce(peer, tag, signature, data, combine)
                                : nullptr;
}

void Router::cancel_receive(int peer, std::uint64_t tag) {
  const Carrier& c = carrier(peer);
  if (c.board != nullptr) c.board->cancel_receive(peer, tag);
}

void Router::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  // Data transports first: their goodbyes should reach peers before the control plane closes,
  // or peers read the tcp close as a failure. The shaper before them: nothing it holds may reach
  // a transport after that one's shutdown.
  arrivals_.close(status, why);
  if (shaper_) shaper_->shutdown(status, why, wait);
  for (std::size_t k = transports_.size(); k-- > 0;) {
    if (transports_[k]) transports_[k]->shutdown(status, why, wait);
  }
}

void Router::revoke(const std::string& why) {
  // The notices through the control plane first, which reaches every peer: a peer should hear
  // "revoked" before it sees this rank's data transports close (which it would take for a
  // failure). Then the shaper and the data transports as on any shutdown.
  arrivals_.close(HM_ERR_ABORTED, why);
  for (const auto& t : transports_) {
    if (auto* revocation = t ? capability<PeerRevocation>(*t) : nullptr) revocation->revoke(why);
  }
  if (shaper_) shaper_->shutdown(HM_ERR_ABORTED, why, ShutdownWait::kReturnAtOnce);
  for (std::size_t k = transports_.size(); k-- > 0;) {
    if (transports_[k] && capability<PeerRevocation>(*transports_[k]) == nullptr) {
      transports_[k]->shutdown(HM_ERR_ABORTED, why, ShutdownWait::kReturnAtOnce);
    }
  }
}

void Router::set_failure_observer(Transport::PeerFailureListener observer) {
  const std::lock_guard lock(listener_mutex_);
  observer_ = std::move(observer);
}

const Router::Carrier* Router::sole_carrier() const {
  if (shaper_ || !sole_kind_) return nullptr;
  return &kinds_[static_cast<std::size_t>(*sole_kind_)];
}

std::span<CallerDrive* const> Router::driven() const {
  // A drive promises that every wait of the caller polls the driven transports. With one
  // carrier its own waits do. With several, the collectives' waits poll them all (through
  // caller_progress) if every carrier's waiters poll; a wait on a carrier whose waiters sleep at
  // once (verbs), or on the shaper's thread, would leave the others unpolled: no drive.
  // drives_ is fixed, so this costs no allocation on a small collective's way in and out.
  if (shaper_ || (drives_.size() != 1 && !drive_all_)) return {};
  return drives_;
}

void Router::begin_caller_drive() {
  for (CallerDrive* d : driven()) d->begin_caller_drive();
}

void Router::end_caller_drive() {
  for (CallerDrive* d : driven()) d->end_caller_drive();
}

Progress* Router::caller_progress() {
  if (shaper_) return nullptr;
  if (const Carrier* c = sole_carrier()) {
    return c->drive != nullptr ? c->drive->caller_progress() : nullptr;
  }
  return drive_all_.get();
}

SharedBoard* Router::shared_board() {
  const Carrier* c = sole_carrier();
  return c != nullptr && c->board != nullptr ? &c->board->shared_board() : nullptr;
}

std::chrono::microseconds Router::yield_before_sleep(int peer) const {
  // A shaped send completes after its delay, on the shaper's thread: nothing to yield for.
  if (shaper_ && shaper_->shape(peer) != nullptr) return std::chrono::microseconds(0);
  if (peer < 0 || peer >= size()) return std::chrono::microseconds(0);
  const Carrier& c = carrier(peer);
  return c.drive != nullptr ? c.drive->yield_before_sleep(peer) : std::chrono::microseconds(0);
}

LinkProperties Router::link(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) return {"self", "this rank", 0, 0};
  LinkProperties link = carrier(peer).transport->link(peer);
  if (const LinkShape* shape = shaper_ ? shaper_->shape(peer) : nullptr) {
    link.description += ", " + shape->describe();
    link.bandwidth_gbytes = shape->bytes_per_s / 1e9;
    link.latency_us = std::chrono::duration<double, std::micro>(shape->latency).count();
  }
  return link;
}

void Router::fail_peer(int peer, hm_status_t status, const std::string& message) {
  if (shaper_) shaper_->fail_peer(peer, status, message);
  carrier(peer).transport->fail_peer(peer, status, message);
}

}  // namespace holmes
