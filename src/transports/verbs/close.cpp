#include "transports/verbs/transport.hpp"

#include <future>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::verbs {

void VerbsTransport::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  asio::post(io_, [this, status, why, done] {
    do_shutdown(status, why);
    done->set_value();
  });
  if (wait == ShutdownWait::kUntilReleased && !thread_.here()) {
    // The progress thread never blocks, so this is quick; the bound only guards against a
    // stopped io_context.
    finished.wait_for(std::chrono::seconds(30));
  }
}

void VerbsTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  asio::post(io_, [this, peer, status, message] {
    if (closed_.closed() || peer < 0 || static_cast<std::size_t>(peer) >= peers_.size()) return;
    // Deliver what already arrived from it first: the control plane may notice a peer's exit
    // before this thread has read its last messages.
    drain_all();
    fail_peer_now(peer, status, message);
  });
}

void VerbsTransport::peer_said_goodbye(Connection& c) {
  c.peer_closed = true;
  auto& p = peers_[c.peer];
  if (p.failure.failed()) return;
  if (!c.outbound) {
    p.silent = true;
    const auto message = fmt::format(
        "{} closed its verbs connection (process exited or communicator destroyed) while this "
        "rank waits for data from it",
        peer_name(c.peer));
    // The listener first: whoever wakes from a failed receive finds the failure known.
    notify_listener(c.peer, HM_ERR_PEER_FAILED, message);
    matcher_.fail_peer(c.peer, HM_ERR_PEER_FAILED, message);
  } else {
    p.deaf = true;
    const auto message = fmt::format(
        "{} closed its verbs connection (process exited or communicator destroyed) before this "
        "rank's message to it was sent",
        peer_name(c.peer));
    auto sends = std::move(p.sends);
    p.sends.clear();
    for (auto& op : sends) op.request->complete(HM_ERR_PEER_FAILED, message);
  }
}

void VerbsTransport::protocol_error(Connection& c, const std::string& why) {
  connection_failed(c, HM_ERR_TRANSPORT,
                    fmt::format("{} broke the verbs protocol on {}: {}; its traffic is failed",
                                peer_name(c.peer), nic_->port().name, why));
}

void VerbsTransport::connection_failed(Connection& c, hm_status_t status,
                                       const std::string& message) {
  c.broken = true;
  fail_peer_now(c.peer, status, message);
}

void VerbsTransport::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  auto& p = peers_[peer];
  if (p.failure.failed()) return;
  HM_LOG_WARN("verbs rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  // Its queue pairs stay until the transport goes (the hardware may still use their slots),
  // but nothing more is posted on or read from them.
  if (p.out) p.out->broken = true;
  if (p.in) p.in->broken = true;
  // The listener first: whoever wakes from a failed request finds the failure known.
  notify_listener(peer, status, message);
  auto sends = std::move(p.sends);
  p.sends.clear();
  for (auto& op : sends) op.request->complete(status, message);
  matcher_.fail_peer(peer, status, message);
  check_connected();
  check_goodbyes();
}

void VerbsTransport::notify_listener(int peer, hm_status_t status, const std::string& message) {
  auto& p = peers_[peer];
  if (p.listener_told) return;
  p.listener_told = true;
  failure_listener_(peer, status, message);
}

void VerbsTransport::check_goodbyes() {
  if (!goodbyes_settled_) return;
  for (const auto& [id, c] : by_id_) {
    const bool waiting = c->goodbye_wanted && !c->goodbye_done && !c->broken && !c->peer_closed;
    if (waiting) return;
  }
  goodbyes_settled_->set_value();
  goodbyes_settled_.reset();
}

void VerbsTransport::do_shutdown(hm_status_t status, const std::string& why) {
  if (closed_.closed()) return;
  // What has already arrived is delivered first, and goodbyes that arrived are seen, so that
  // no goodbye goes to a peer that is already gone.
  drain_all();
  closed_.close(status, why);
  listener_.close();
  for (auto& d : std::vector<std::shared_ptr<Dial>>(dials_.begin(), dials_.end())) end_dial(d);
  for (auto& a : std::vector<std::shared_ptr<Accept>>(accepts_.begin(), accepts_.end())) {
    end_accept(a);
  }
  early_hellos_.clear();
  for (auto& p : peers_) {
    auto sends = std::move(p.sends);
    p.sends.clear();
    for (auto& op : sends) op.request->complete(status, why);
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  for (auto& p : peers_) {
    if (p.failure.failed()) continue;
    for (Connection* c : {p.out.get(), p.in.get()}) {
      if (c == nullptr || !c->ready) continue;  // a handshake cut short: nothing to tell
      c->goodbye_wanted = true;
      post_goodbye(*c);
    }
  }
  check_goodbyes();
}

}  // namespace holmes::verbs
