#include "transports/verbs/transport.hpp"

#include "core/status.hpp"

namespace holmes::verbs {

CompletionPtr VerbsTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                    std::span<std::byte> data) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  asio::post(io_, [this, peer, tag, signature, data, request] {
    start_recv(peer, tag, signature, data, request);
  });
  return request;
}

void VerbsTransport::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                                std::span<std::byte> data, const CompletionPtr& request) {
  if (closed_.fail(request)) return;
  if (matcher_.post(peer, tag, signature, data, request)) return;  // it was already here
  const auto& p = peers_[peer];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.silent) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its verbs connection before sending this message", peer_name(peer)));
  }
}

void VerbsTransport::on_message(Connection& c, std::uint32_t slot, std::uint32_t byte_len) {
  if (byte_len > c.recv_slot_bytes) {
    protocol_error(
        c, fmt::format("a {}-byte message overran a {}-byte slot", byte_len, c.recv_slot_bytes));
    return;
  }
  const auto bytes = c.recv_slot(slot).first(byte_len);
  const std::span<const std::uint8_t> raw(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                          bytes.size());
  std::string why;
  const auto header = WireHeader::decode(raw, &why);
  if (!header) {
    protocol_error(c, why);
    return;
  }
  if (!c.credits.on_grant(header->credits)) {
    protocol_error(
        c, fmt::format("it returned {} credits, more than this rank had used", header->credits));
    return;
  }
  switch (header->kind) {
    case MessageKind::kData: {
      if (c.outbound) {
        protocol_error(c, "data arrived on the queue pair this rank sends on");
        return;
      }
      const FragmentHeader fragment{header->tag, header->signature, header->total, header->offset,
                                    header->length};
      if (!matcher_.deliver(c.peer, fragment, bytes.subspan(kWireHeaderBytes))) {
        protocol_error(c, "pieces of one message disagree on its size or signature");
        return;
      }
      break;
    }
    case MessageKind::kCredit:
      break;
    case MessageKind::kGoodbye:
      peer_said_goodbye(c);
      return;  // the slot stays: nothing more comes here
  }
  repost(c, slot);
}

void VerbsTransport::repost(Connection& c, std::uint32_t slot) {
  if (c.broken) return;
  try {
    c.qp->post_recv(kRecvBit | slot, c.recv_slot(slot), *c.region);
  } catch (const Error& e) {
    connection_failed(c, HM_ERR_TRANSPORT,
                      fmt::format("cannot repost a receive for {} on {}: {}", peer_name(c.peer),
                                  nic_->port().name, e.what()));
    return;
  }
  c.credits.on_reposted();
}

}  // namespace holmes::verbs
