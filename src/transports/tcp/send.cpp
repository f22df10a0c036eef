#include "transports/tcp/transport.hpp"

#include <linux/sockios.h>
#include <sys/ioctl.h>

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
  // The connections exist (not yet open) once connect_peer ran: a message is cut for them all.
  if (!p.connecting && !p.failure.failed()) connect_peer(peer);
  if (p.failure.failed()) {
    request->complete(p.failure.status, p.failure.message);
    return;
  }
  const std::size_t total = data.size();
  const auto links = std::max<std::size_t>(1, p.out.size());
  std::size_t piece = total;
  if (total > kMinSplitBytes) {
    piece = std::max(kMinSplitBytes, (total + links - 1) / links);
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
    if (p.connected()) {
      enqueue(peer, std::move(f));
    } else {
      p.backlog.push_back(std::move(f));
    }
  }
}

const std::shared_ptr<OutLink>& TcpTransport::pick_link(PeerState& p, std::size_t bytes) const {
  if (!p.striped) {
    return *std::min_element(p.out.begin(), p.out.end(), [](const auto& a, const auto& b) {
      return a->queued_bytes < b->queued_bytes;
    });
  }
  // Over several lanes: the connection that would have these bytes out first, its backlog (here,
  // and unacknowledged in the kernel's send queue) over its share of the rate. The kernel's part
  // drains at the pace the NIC really keeps, so a NIC slower than declared gets less. Small
  // messages skip the system calls: they go where nothing waits here.
  const bool ask_kernel = bytes >= kMinSplitBytes;
  std::size_t best = 0;
  double best_finish = 0;
  for (std::size_t i = 0; i < p.out.size(); ++i) {
    OutLink& link = *p.out[i];
    double backlog = static_cast<double>(link.queued_bytes);
    int unsent = 0;
    if (ask_kernel && ::ioctl(link.socket.native_handle(), SIOCOUTQ, &unsent) == 0) {
      backlog += unsent;
    }
    const double finish = (backlog + static_cast<double>(bytes)) / link.weight;
    if (i == 0 || finish < best_finish) {
      best = i;
      best_finish = finish;
    }
  }
  return p.out[best];
}

void TcpTransport::enqueue(int peer, Fragment fragment) {
  const auto& link = pick_link(peers_[peer], fragment.length);
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
        if (link->nic >= 0) nic_sent_[static_cast<std::size_t>(link->nic)] += done.length;
        if (--done.op->fragments_left == 0) done.op->request->complete();
        write_next(peer, link);
      });
}

}  // namespace holmes::tcp
