#include "transports/ucx/transport.hpp"

#include "core/status.hpp"

namespace holmes::ucx {

void Engine::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.check(rank, addresses.size());
  const auto size = static_cast<int>(addresses.size());
  // Decode here, on the caller's thread, so that a bad address fails set_peers with its reason.
  std::vector<std::vector<std::uint8_t>> decoded(addresses.size());
  for (int peer = 0; peer < size; ++peer) {
    const auto& text = addresses[static_cast<std::size_t>(peer)];
    if (peer == rank || text.empty()) continue;
    decoded[static_cast<std::size_t>(peer)] =
        decode_worker_address(text, version_, fmt::format("rank {}'s ucx address", peer));
  }
  {
    std::lock_guard lock(links_mutex_);
    links_.assign(addresses.size(), std::string());
  }
  directory_.set(rank, std::move(addresses));
  post([this, decoded = std::move(decoded)]() mutable { install_peers(std::move(decoded)); });
}

CompletionPtr Engine::connect_all() {
  auto done = std::make_shared<Completion>();
  if (!post([this, done] { start_connect(done); })) {
    std::string why;
    const auto status = final_status(&why);
    done->complete(status, why);
  }
  return done;
}

void Engine::install_peers(std::vector<std::vector<std::uint8_t>> addresses) {
  peers_.resize(addresses.size());
  for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = std::move(addresses[i]);
  auto early = std::move(early_goodbyes_);
  early_goodbyes_.clear();
  for (const int peer : early) {
    if (serves(peer)) peer_said_goodbye(peer);
  }
}

void Engine::start_connect(const CompletionPtr& done) {
  if (closed_.fail(done)) return;
  connect_waiters_.add(done, Deadline::after(config_.connect_timeout));
  for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
    if (serves(static_cast<int>(peer))) connect_peer(static_cast<int>(peer));
  }
  check_connected();
}

void Engine::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        if (!serves(peer)) return ConnectWaiters::Peer::kNotServed;
        return peers_[static_cast<std::size_t>(peer)].connected ? ConnectWaiters::Peer::kConnected
                                                                : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (p.failure.failed() || !p.gone) return p.failure;
        return PeerFailure{HM_ERR_PEER_FAILED,
                           fmt::format("{} closed its ucx endpoint while this rank connected to it",
                                       peer_name(peer))};
      });
}

ucp_ep_h Engine::endpoint(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.ep != nullptr) return p.ep;
  if (p.failure.failed() || p.gone) return nullptr;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(p.address.data());
  // Mode "peer" would make UCX drop its shared memory lanes; failures are learnt otherwise.
  params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(ucp_->get(), &params, &ep);
  if (status != UCS_OK) {
    fail_peer_now(peer, HM_ERR_TRANSPORT,
                  fmt::format("ucx: cannot create an endpoint to {}: {}", peer_name(peer),
                              ucs_status_string(status)));
    return nullptr;
  }
  p.ep = ep;
  connect_peer(peer);  // learn which lanes UCX chose once they are up
  return ep;
}

void Engine::connect_peer(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.connected || p.flushing || p.failure.failed() || p.gone) return;
  const ucp_ep_h ep = endpoint(peer);
  if (ep == nullptr || p.flushing || p.connected) return;
  p.flushing = true;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kFlush;
  op->peer = peer;
  launch(std::move(op),
         [ep](Op&, ucp_request_param_t& param) { return ucp_ep_flush_nbx(ep, &param); });
}

void Engine::describe_link(int peer) {
  auto lanes = endpoint_lanes(peers_[static_cast<std::size_t>(peer)].ep);
  std::lock_guard lock(links_mutex_);
  if (lanes.empty()) lanes = "worker " + worker_name_;
  links_[static_cast<std::size_t>(peer)] = std::move(lanes);
}

}  // namespace holmes::ucx
