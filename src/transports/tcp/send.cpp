#include "transports/tcp/transport.hpp"

#include <algorithm>

#include "core/bytes.hpp"
#include "core/crc32c.hpp"
#include "core/status.hpp"

namespace holmes::tcp {

CompletionPtr TcpTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  require(tag != kNoticeTag, "tcp: tag {:#x} is reserved for the transport", tag);
  auto request = std::make_shared<Completion>();
  request->set_progress(engine_.request_progress());
  run_or_hand([this, peer, tag, signature, data, request] {
    start_send(peer, tag, signature, data, request);
  });
  return request;
}

void TcpTransport::start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<const std::byte> data, const CompletionPtr& request) {
  if (closed_.fail(request)) return;
  auto& p = peers_[peer];
  if (p.failure.failed()) {
    request->complete(p.failure.status, p.failure.message);
    return;
  }
  const std::size_t total = data.size();
  const auto sockets = static_cast<std::size_t>(config_.sockets_per_peer);
  std::size_t piece = total;
  if (total > kMinSplitBytes) {
    piece = std::max(kMinSplitBytes, (total + sockets - 1) / sockets);
  }
  piece = std::min(piece, kMaxFragmentBytes);
  const std::size_t count = total == 0 ? 1 : (total + piece - 1) / piece;
  auto op = std::make_shared<SendOp>();
  op->request = request;
  op->fragments_left = count;
  for (std::size_t i = 0; i < count; ++i) {
    Fragment f;
    f.op = op;
    f.data = data.data() + i * piece;
    f.length = std::min(piece, total - i * piece);
    FrameHeader h;
    h.signature = signature;
    h.tag = tag;
    h.total = total;
    h.offset = i * piece;
    h.length = static_cast<std::uint32_t>(f.length);
    if (config_.checksum && f.length > 0) {
      h.flags = kFlagChecksum;
      f.checksum = true;
      store_le<std::uint32_t>(f.trailer.data(), crc32c({f.data, f.length}));
    }
    f.header = h.encode();
    if (p.out_ready == config_.sockets_per_peer) {
      enqueue(peer, std::move(f));
    } else {
      p.backlog.push_back(std::move(f));
    }
  }
  if (p.out_ready < config_.sockets_per_peer && !p.connecting) connect_peer(peer);
}

void TcpTransport::enqueue(int peer, Fragment fragment) {
  auto& p = peers_[peer];
  auto best = std::min_element(p.out.begin(), p.out.end(), [](const auto& a, const auto& b) {
    return a->queued_bytes < b->queued_bytes;
  });
  auto& link = *best;
  link->queued_bytes += fragment.length;
  link->queue.push_back(std::move(fragment));
  if (!link->writing) write_next(peer, link);
}

void TcpTransport::write_next(int peer, const std::shared_ptr<OutLink>& link) {
  if (link->queue.empty()) {
    link->writing = false;
    return;
  }
  link->writing = true;
  const Fragment& f = link->queue.front();  // deque references survive push_back
  const std::array<asio::const_buffer, 3> buffers{
      asio::buffer(f.header), asio::buffer(f.data, f.length),
      asio::buffer(f.trailer, f.checksum ? kChecksumBytes : 0)};
  asio::async_write(
      link->socket, buffers, AllAtOnce(), [this, peer, link](const error_code& ec, std::size_t) {
        if (closed_.closed() || link->queue.empty())
          return;  // shut down: the op was already failed
        if (ec) {
          const auto message = link_down(peer, ec).value_or(
              fmt::format("sending to {} failed: {}", peer_name(peer), ec.message()));
          const bool closed_by_peer =
              ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
          if (closed_by_peer && !peers_[peer].gone) {  // gone: its notice, if any, was read
            peers_[peer].send_reset = true;
            fail_peer_after_notice_grace(peer, message);
          } else {
            fail_peer_now(peer, HM_ERR_PEER_FAILED, message);
          }
          return;
        }
        Fragment done = std::move(link->queue.front());
        link->queue.pop_front();
        link->queued_bytes -= done.length;
        if (--done.op->fragments_left == 0) done.op->request->complete();
        write_next(peer, link);
      });
}

}  // namespace holmes::tcp
