#include "transports/tcp/transport.hpp"

#include "core/byte_buffer.hpp"
#include "core/bytes.hpp"
#include "core/crc32c.hpp"
#include "core/status.hpp"

namespace holmes::tcp {

CompletionPtr TcpTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<std::byte> data) {
  return post_receive(peer, tag, signature, data, std::nullopt);
}

CompletionPtr TcpTransport::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data, const ReceiveCombine& combine) {
  if (!config_.fused_reduce) return nullptr;
  return post_receive(peer, tag, signature, data, combine);
}

CompletionPtr TcpTransport::post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data,
                                         const std::optional<ReceiveCombine>& combine) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  request->set_progress(engine_.request_progress());
  run_or_hand([this, peer, tag, signature, data, request, combine] {
    start_recv(peer, tag, signature, data, request, combine);
  });
  return request;
}

void TcpTransport::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<std::byte> data, const CompletionPtr& request,
                              const std::optional<ReceiveCombine>& combine) {
  if (closed_.fail(request)) return;
  if (matcher_.post(peer, tag, signature, data, request, combine)) return;  // it was already here
  const auto& p = peers_[peer];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.gone) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its connections before sending this message", peer_name(peer)));
  }
}

void TcpTransport::read_frames(const std::shared_ptr<InLink>& link) {
  auto& box = link->inbox;
  if (box.size() >= kFrameHeaderBytes) return parse_frames(link);
  box.compact();
  const auto space = box.free_space();
  link->socket.async_read_some(asio::buffer(space.data(), space.size()),
                               [this, link](const error_code& ec, std::size_t got) {
                                 if (closed_.closed() || link->closed) return;
                                 if (ec) return in_link_closed(link, ec);
                                 link->inbox.filled(got);
                                 parse_frames(link);
                               });
}

void TcpTransport::parse_frames(const std::shared_ptr<InLink>& link) {
  // Every frame the inbox holds whole is handled here, in this handler; a frame whose payload
  // goes on past the inbox reads the rest straight into its destination, and reading resumes
  // from its completion.
  while (!closed_.closed() && !link->closed) {
    auto& box = link->inbox;
    if (box.size() < kFrameHeaderBytes) return read_frames(link);
    const auto header = FrameHeader::decode(box.take_header());
    if (!header) {
      fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                    fmt::format("{} sent a malformed frame header; connection dropped",
                                peer_name(link->peer)));
      return;
    }
    if (header->tag == kNoticeTag) return read_notice(link, *header);
    if (!on_fragment(link, *header)) return;
  }
}

bool TcpTransport::read_rest(const std::shared_ptr<InLink>& link,
                             std::array<asio::mutable_buffer, 2> rest, std::function<void()> then) {
  // The inbox's bytes go first; what it lacks comes straight from the socket.
  for (auto& part : rest) {
    const std::size_t n = link->inbox.take({static_cast<std::byte*>(part.data()), part.size()});
    part += n;
  }
  if (rest[0].size() + rest[1].size() == 0) return true;
  asio::async_read(link->socket, rest, AllAtOnce(),
                   [this, link, then = std::move(then)](const error_code& ec, std::size_t) {
                     if (closed_.closed() || link->closed) return;
                     if (ec) return in_link_closed(link, ec);
                     then();
                   });
  return false;
}

void TcpTransport::read_notice(const std::shared_ptr<InLink>& link, const FrameHeader& h) {
  if (h.length > kMaxNoticeBytes || h.offset != 0 || h.total != h.length || h.flags != 0) {
    fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                  fmt::format("{} sent a malformed failure notice ({} bytes); connection dropped",
                              peer_name(link->peer), h.length));
    return;
  }
  // Ranks that disagree about a call disagree for everyone in it: a mismatch stays a mismatch
  // (a bug to fix, not a failure to restart from). A revocation (hm_comm_revoke) revokes the
  // communicator here too. Any other failure of the peer is one here.
  hm_status_t status = HM_ERR_PEER_FAILED;
  if (h.signature == HM_ERR_MISMATCH || h.signature == HM_ERR_ABORTED) {
    status = static_cast<hm_status_t>(h.signature);
  }
  link->notice.assign(h.length, '\0');
  auto report = [this, link, status] {
    // Text from the network: printable ASCII only in our messages and logs.
    for (char& c : link->notice) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    const char* what =
        status == HM_ERR_ABORTED ? "revoked the communicator" : "failed and closed its connections";
    fail_peer_now(link->peer, status,
                  fmt::format("{} {}: {}", peer_name(link->peer), what, link->notice));
  };
  if (read_rest(link, {asio::buffer(link->notice), asio::mutable_buffer()}, report)) report();
}

bool TcpTransport::on_fragment(const std::shared_ptr<InLink>& link, const FrameHeader& h) {
  const int peer = link->peer;
  const FragmentHeader header{h.tag, h.signature, h.total, h.offset, h.length};
  const auto landing = matcher_.land(peer, header);
  if (!landing) {
    fail_peer_now(peer, HM_ERR_TRANSPORT,
                  fmt::format("{} sent fragments of one message with different sizes; connection "
                              "dropped",
                              peer_name(peer)));
    return false;
  }
  if (h.length == 0) {
    matcher_.landed(peer, header, *landing);
    return true;
  }
  const bool checksum = (h.flags & kFlagChecksum) != 0;
  const std::size_t trailer = checksum ? kChecksumBytes : 0;
  if (landing->target == nullptr) {  // a mismatch: the receive has failed, skip the payload
    return discard_payload(link, h.length + trailer);
  }
  // Lands the fragment once its payload (and checksum) are in; false when it failed the peer.
  auto verify_and_land = [this, link, header, landing = *landing, checksum] {
    if (checksum) {
      const std::uint32_t sent = load_le<std::uint32_t>(link->trailer.data());
      const std::uint32_t got = crc32c({landing.target, header.length});
      if (sent != got) {
        // Reported, never reduced: the receive fails with the peer, whatever the buffer holds.
        fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                      fmt::format("{} sent a corrupted chunk (tag {:#x}, bytes {}..{} of {}): "
                                  "CRC32C {:#010x} on the wire, {:#010x} computed "
                                  "(HOLMES_CHECKSUM); connection dropped",
                                  peer_name(link->peer), header.tag, header.offset,
                                  header.offset + header.length, header.total, sent, got));
        return false;
      }
    }
    // Counted before it lands: landing may complete the receive, and a caller that then reads
    // the counters must find these bytes in them.
    if (link->nic >= 0) nic_received_[static_cast<std::size_t>(link->nic)] += header.length;
    matcher_.landed(link->peer, header, landing);
    return true;
  };
  // All in the inbox (small messages): land it and go on parsing.
  if (read_rest(link,
                {asio::buffer(landing->target, h.length), asio::buffer(link->trailer, trailer)},
                [this, link, verify_and_land] {
                  if (verify_and_land()) read_frames(link);
                })) {
    return verify_and_land();
  }
  return false;
}

bool TcpTransport::discard_payload(const std::shared_ptr<InLink>& link, std::size_t length) {
  // Read like any payload (the inbox's share first), into a sink that lives until the read ends
  // (at most a fragment: FrameHeader::decode bounds it).
  auto sink = std::make_shared<ByteBuffer>(length);
  return read_rest(link, {asio::buffer(sink->data(), length), asio::mutable_buffer()},
                   [this, link, sink] { read_frames(link); });
}

}  // namespace holmes::tcp
