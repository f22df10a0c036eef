#include "transports/tcp/transport.hpp"

#include <future>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::tcp {

void TcpTransport::shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  shutdown_requested_.store(true);
  // The io thread runs from now on: this thread may be a caller that drives and is about to
  // block below.
  engine_.turns().close();
  // A failure (not a destroy or an abort) is worth telling the peers about.
  const bool notify = status != HM_SUCCESS && status != HM_ERR_ABORTED;
  asio::post(io_, [this, status, why, done, notify] {
    do_shutdown(status, why, notify);
    done->set_value();
  });
  if (wait == ShutdownWait::kUntilReleased && !running_handlers()) {
    // Handlers never block, so this is quick; the bound only guards against a stopped
    // io_context.
    finished.wait_for(std::chrono::seconds(30));
  }
}

void TcpTransport::revoke(const std::string& why) {
  shutdown_requested_.store(true);
  engine_.turns().close();
  asio::post(io_, [this, why] { do_shutdown(HM_ERR_ABORTED, why, true); });
}

void TcpTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  hand_to_io([this, peer, status, message] {
    if (!closed_.closed() && peer >= 0 && static_cast<std::size_t>(peer) < peers_.size()) {
      fail_peer_now(peer, status, message);
    }
  });
}

std::optional<std::string> TcpTransport::link_down(int peer, const error_code& ec) const {
  if (ec == asio::error::timed_out) {
    return fmt::format(
        "the link to {} is down: the kernel gave up waiting for acknowledgements (limit {} ms; "
        "{})",
        peer_name(peer), liveness_.count(), ec.message());
  }
  if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable ||
      ec == asio::error::network_down) {
    return fmt::format("the link to {} is down: {}", peer_name(peer), ec.message());
  }
  return std::nullopt;
}

void TcpTransport::in_link_closed(const std::shared_ptr<InLink>& link, const error_code& ec) {
  if (link->closed) return;
  link->closed = true;
  error_code ignored;
  link->socket.close(ignored);
  in_links_.erase(link);
  if (link->peer < 0) return;
  auto& p = peers_[link->peer];
  if (ec != asio::error::eof) {
    fail_peer_now(link->peer, HM_ERR_PEER_FAILED,
                  link_down(link->peer, ec)
                      .value_or(fmt::format("connection from {} broke: {}", peer_name(link->peer),
                                            ec.message())));
    return;
  }
  // A clean close: the peer finished (or died and the kernel closed its sockets). Once all its
  // links are closed nothing more can arrive from it.
  if (++p.in_closed >= p.in_expected && !p.gone) {
    p.gone = true;
    const auto message = fmt::format(
        "{} closed its connections (process exited or communicator destroyed) while this rank "
        "waits for data from it",
        peer_name(link->peer));
    // The listener first: whoever wakes from a failed receive finds the failure known.
    failure_listener_(link->peer, HM_ERR_PEER_FAILED, message);
    matcher_.fail_peer(link->peer, HM_ERR_PEER_FAILED, message);
    // A notice would have come before the close: a send that failed need not wait for one.
    if (p.send_reset) fail_peer_now(link->peer, HM_ERR_PEER_FAILED, message);
  }
}

void TcpTransport::fail_peer_after_notice_grace(int peer, const std::string& message) {
  auto timer = std::make_shared<asio::steady_timer>(io_, kNoticeGrace);
  timer->async_wait([this, timer, peer, message](const error_code&) {
    if (!closed_.closed()) fail_peer_now(peer, HM_ERR_PEER_FAILED, message);
  });
}

void TcpTransport::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  if (peer < 0) return;
  auto& p = peers_[peer];
  if (p.failure.failed()) return;
  HM_LOG_WARN("tcp rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  // The listener first: whoever wakes from a failed request finds the failure known.
  failure_listener_(peer, status, message);
  error_code ignored;
  for (auto& link : p.out) {
    link->timer.cancel();
    link->socket.close(ignored);
    for (auto& f : link->queue) f.op->request->complete(status, message);
    link->queue.clear();
    link->queued_bytes = 0;
  }
  for (auto& f : p.backlog) f.op->request->complete(status, message);
  p.backlog.clear();
  for (auto it = in_links_.begin(); it != in_links_.end();) {
    if ((*it)->peer == peer) {
      (*it)->closed = true;
      (*it)->timer.cancel();
      (*it)->socket.close(ignored);
      it = in_links_.erase(it);
    } else {
      ++it;
    }
  }
  matcher_.fail_peer(peer, status, message);
  check_connected();
}

// The last words of a failed communicator: one notice to every peer it is still connected to,
// on a send link that is idle (a link in the middle of a fragment cannot take it, and waiting
// would block the shutdown). Written without blocking; a link whose kernel buffer is full gets
// none. The peers then report this rank's reason instead of a bare closed connection.
void TcpTransport::send_notices(hm_status_t status, const std::string& why) {
  std::string text = fmt::format("{}: {}", status_name(status), why);
  if (text.size() > kMaxNoticeBytes) text.resize(kMaxNoticeBytes);
  FrameHeader h;
  h.signature = static_cast<std::uint32_t>(status);
  h.tag = kNoticeTag;
  h.total = text.size();
  h.length = static_cast<std::uint32_t>(text.size());
  const auto header = h.encode();
  const std::array<asio::const_buffer, 2> frame{asio::buffer(header), asio::buffer(text)};
  const std::size_t frame_bytes = header.size() + text.size();
  for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
    auto& p = peers_[peer];
    if (p.failure.failed() || !p.connected()) continue;
    for (auto& link : p.out) {
      if (!link->ready || link->writing || !link->queue.empty()) continue;
      error_code ec;
      link->socket.non_blocking(true, ec);
      const std::size_t sent = ec ? 0 : link->socket.send(frame, 0, ec);
      if (sent != frame_bytes) {
        HM_LOG_DEBUG("tcp rank {}: no notice to rank {}: {}", directory_.rank(), peer,
                     ec ? ec.message() : "kernel buffer full");
      }
      break;
    }
  }
}

void TcpTransport::do_shutdown(hm_status_t status, const std::string& why, bool notify) {
  if (!closed_.close(status, why)) return;
  error_code ignored;
  listener_.close();
  for (auto& listener : nic_listeners_) listener->close();
  if (notify) send_notices(status, why);
  // Close every socket first: from here on no read can land in a caller's buffer.
  for (auto& p : peers_) {
    for (auto& link : p.out) {
      link->timer.cancel();
      link->socket.close(ignored);
    }
  }
  for (const auto& link : in_links_) {
    link->closed = true;
    link->timer.cancel();
    link->socket.close(ignored);
  }
  in_links_.clear();
  for (auto& p : peers_) {
    for (auto& link : p.out) {
      for (auto& f : link->queue) f.op->request->complete(status, why);
      link->queue.clear();
    }
    for (auto& f : p.backlog) f.op->request->complete(status, why);
    p.backlog.clear();
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
}

}  // namespace holmes::tcp
