#include "transports/verbs/transport.hpp"

#include <algorithm>
#include <cstring>

#include "core/status.hpp"

namespace holmes::verbs {

CompletionPtr VerbsTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                    std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  require(data.size() <= kMaxMessageBytes, "verbs: a {}-byte message exceeds the {}-byte limit",
          data.size(), kMaxMessageBytes);
  auto request = std::make_shared<Completion>();
  SendOp op;
  op.request = request;
  op.data = data.data();
  op.size = data.size();
  op.tag = tag;
  op.signature = signature;
  asio::post(io_, [this, peer, op = std::move(op)]() mutable { start_send(peer, std::move(op)); });
  return request;
}

void VerbsTransport::start_send(int peer, SendOp op) {
  if (closed_.closed()) {
    op.request->complete(closed_.status(), closed_.why());
    return;
  }
  auto& p = peers_[peer];
  if (p.failure.failed()) {
    op.request->complete(p.failure.status, p.failure.message);
    return;
  }
  if (p.deaf) {
    op.request->complete(HM_ERR_PEER_FAILED,
                         fmt::format("{} closed its verbs connection before this message was sent",
                                     peer_name(peer)));
    return;
  }
  if (p.address.empty()) {
    op.request->complete(HM_ERR_INVALID_ARGUMENT,
                         fmt::format("rank {} is not reached through verbs", peer));
    return;
  }
  p.sends.push_back(std::move(op));
  if (!p.out) dial(peer);
  pump(peer);
}

void VerbsTransport::pump(int peer) {
  auto& p = peers_[peer];
  Connection* c = p.out.get();
  if (c == nullptr || !c->usable() || closed_.closed()) return;
  const std::uint64_t capacity =
      std::min(c->send_slot_bytes, c->remote_slot_bytes) - kWireHeaderBytes;
  while (!p.sends.empty() && !c->free_send_slots.empty() &&
         c->credits.can_send(MessageKind::kData)) {
    SendOp& op = p.sends.front();
    if (!op.cutter) op.cutter.emplace(op.size, capacity);
    const auto piece = op.cutter->next();
    WireHeader h;
    h.kind = MessageKind::kData;
    h.credits = c->credits.take_owed();
    h.signature = op.signature;
    h.tag = op.tag;
    h.total = op.size;
    h.offset = piece.offset;
    h.length = static_cast<std::uint32_t>(piece.length);
    if (!post_message(*c, h, {op.data + piece.offset, piece.length})) return;  // peer failed
    if (op.cutter->done()) {
      // Every byte is copied into the slots: the caller's buffer is free.
      auto request = std::move(op.request);
      p.sends.pop_front();
      request->complete();
    }
  }
  maybe_send_credit(*c);
}

bool VerbsTransport::post_message(Connection& c, const WireHeader& header,
                                  std::span<const std::byte> payload) {
  const std::uint32_t slot = c.free_send_slots.back();
  c.free_send_slots.pop_back();
  const auto buffer = c.send_slot(slot);
  const auto encoded = header.encode();
  std::memcpy(buffer.data(), encoded.data(), encoded.size());
  if (!payload.empty())
    std::memcpy(buffer.data() + kWireHeaderBytes, payload.data(), payload.size());
  try {
    c.qp->post_send(slot, buffer.first(kWireHeaderBytes + payload.size()), *c.region);
  } catch (const Error& e) {
    c.free_send_slots.push_back(slot);
    connection_failed(
        c, HM_ERR_TRANSPORT,
        fmt::format("cannot send to {} on {}: {}", peer_name(c.peer), nic_->port().name, e.what()));
    return false;
  }
  c.credits.on_send();
  ++c.sends_in_flight;
  if (header.kind == MessageKind::kGoodbye) {
    c.goodbye_posted = true;
    c.goodbye_slot = slot;
  }
  return true;
}

void VerbsTransport::maybe_send_credit(Connection& c) {
  if (!c.usable() || closed_.closed() || !c.credits.credit_update_due() ||
      c.free_send_slots.empty() || !c.credits.can_send(MessageKind::kCredit)) {
    return;
  }
  WireHeader h;
  h.kind = MessageKind::kCredit;
  h.credits = c.credits.take_owed();
  post_message(c, h, {});
}

void VerbsTransport::post_goodbye(Connection& c) {
  if (!c.goodbye_wanted || c.goodbye_posted || !c.usable()) return;
  // Without a free slot or credit now, it goes when a send completion frees one.
  if (c.free_send_slots.empty() || !c.credits.can_send(MessageKind::kGoodbye)) return;
  WireHeader h;
  h.kind = MessageKind::kGoodbye;
  h.credits = c.credits.take_owed();
  post_message(c, h, {});
}

}  // namespace holmes::verbs
