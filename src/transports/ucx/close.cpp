#include "transports/ucx/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::ucx {

void Engine::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  // The progress thread runs from now on, whoever drives: it tears the worker down.
  progress_.turns().close();
  post([this, status, why] { begin_shutdown(status, why); });
  // Not from inside a turn: the progress thread could not take the worker over meanwhile.
  if (wait == ShutdownWait::kReturnAtOnce || on_progress_thread() || running_turn()) return;
  std::unique_lock lock(finished_mutex_);
  if (!finished_cv_.wait_for(lock, kShutdownWaitTimeout, [this] { return finished_; })) {
    HM_LOG_ERROR("ucx rank {}: the progress thread did not finish within {} s of shutdown",
                 directory_.rank(), kShutdownWaitTimeout.count());
  }
}

void Engine::fail_peer(int peer, hm_status_t status, const std::string& message) {
  post([this, peer, status, message] {
    // The peer's last messages may be waiting in this worker (its sends completed before it
    // closed the control plane, and a shared-memory send completes once it is in this rank's
    // queue): take them in before failing what is still missing.
    drain();
    if (!closed_.closed() && serves(peer)) fail_peer_now(peer, status, message);
  });
}

void Engine::close_endpoint(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.ep == nullptr) return;
  const ucp_ep_h ep = p.ep;
  p.ep = nullptr;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kClose;
  op->peer = peer;
  launch(std::move(op), [ep](Op&, ucp_request_param_t& param) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = 0;  // flush
    return ucp_ep_close_nbx(ep, &param);
  });
}

void Engine::say_goodbye(int peer) {
  const ucp_ep_h ep = peers_[static_cast<std::size_t>(peer)].ep;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kGoodbye;
  op->peer = peer;
  AmHeader header;
  header.cookie = cookie_;
  header.sender = static_cast<std::uint32_t>(directory_.rank());
  header.kind = AmKind::kGoodbye;
  op->header = header.encode();
  launch(std::move(op), [ep](Op& o, ucp_request_param_t& param) {
    return ucp_am_send_nbx(ep, kAmId, o.header.data(), o.header.size(), nullptr, 0, &param);
  });
}

void Engine::peer_said_goodbye(int peer) {
  if (closed_.closed()) return;
  if (peers_.empty()) {
    early_goodbyes_.insert(peer);
    return;
  }
  if (!serves(peer)) return;
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.gone || p.failure.failed()) return;
  p.gone = true;
  const auto message = fmt::format(
      "{} closed its ucx endpoint (communicator destroyed or process exiting) while this rank "
      "waits for data from it",
      peer_name(peer));
  HM_LOG_DEBUG("ucx rank {}: {}", directory_.rank(), message);
  matcher_.fail_peer(peer, HM_ERR_PEER_FAILED, message);
  // Sends in flight to it end by themselves while it closes (it refuses what reaches it then),
  // or fail after a grace period (check_deadlines).
  p.sends_fail_at = Clock::now() + kGoodbyeGrace;
  check_connected();
  failure_listener_(peer, HM_ERR_PEER_FAILED, message);
}

void Engine::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  if (closed_.closed() || !serves(peer)) return;
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) return;
  if (p.gone) {
    // It said goodbye already: the Router reports the close its control plane saw.
    HM_LOG_DEBUG("ucx rank {}: {}", directory_.rank(), message);
  } else {
    HM_LOG_WARN("ucx rank {}: {}", directory_.rank(), message);
  }
  p.failure.set(status, message);
  matcher_.fail_peer(peer, status, message);
  // Whatever UCP still holds for the peer is answered now. With error-handling mode "none" UCP
  // can neither cancel these requests nor force-close the endpoint; the peer is gone, so nothing
  // more arrives from it into a receive buffer and nothing more is read from a send buffer for
  // it, and the requests are dropped with the worker. The endpoint stays until then.
  std::vector<Op*> held;
  for (const auto& [raw, op] : in_flight_) {
    if (op->peer == peer) held.push_back(raw);
  }
  for (Op* raw : held) {
    if (raw->caller) raw->caller->complete(status, message);
    if (raw->receive) raw->receive->caller->complete(status, message);
  }
  check_connected();
  failure_listener_(peer, status, message);
}

void Engine::begin_shutdown(hm_status_t status, const std::string& why) {
  if (closed_.closed()) return;
  // Take in what has arrived first: a peer's goodbye waiting there spares it a goodbye to a
  // worker that is gone.
  drain();
  closed_.close(status, why);
  shutdown_deadline_ = Clock::now() + kShutdownFlushTimeout;
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  // Tell every served peer that nothing more will come (one that never heard from this rank may
  // still wait for a message from it), then flush: the close completes once UCP has delivered
  // the goodbye and let go of every send buffer.
  // Endpoints of failed or closed peers are left to the worker's destruction: a flush could
  // wait forever for them, and mode "none" allows no forced close.
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const int peer = static_cast<int>(i);
    if (!serves(peer) || !alive(peer) || endpoint(peer) == nullptr) continue;
    say_goodbye(peer);
    close_endpoint(peer);
  }
}

}  // namespace holmes::ucx
