// Credit-based flow control for one queue pair, the same at both ends. An RC send needs a
// receive posted at the peer (otherwise the hardware retries receiver-not-ready, or fails), so
// a sender only sends while it holds a credit for one of the peer's posted receive slots.
//
// - Every message (data, credit, goodbye) uses one peer slot: one credit.
// - A receiver reposts each slot once it has used what arrived in it and owes the sender one
//   credit for it; every outgoing message carries all credits owed ("piggybacking").
// - When a receiver owes at least half its slots and has no data to carry them, it sends a
//   credit-only message.
// - Reserves keep this deadlock-free: data needs 3 credits, a credit message 2, a goodbye 1.
//   So a credit message can always be sent when owed (the last credits are never taken by
//   data), a goodbye can always be sent once, and two idle ends never both wait: the last
//   message either end sent carried everything it owed, so at most one side can be short, and
//   the other then owes it at least (its slots - 2) >= the threshold and sends credits back.
//   Credit messages only ever answer a threshold, never one another, so they cannot ping-pong.
// Pure bookkeeping: the transport does the posting.
#pragma once

#include <cstdint>

#include "transports/verbs/wire.hpp"

namespace holmes::verbs {

class CreditWindow {
 public:
  // Fewer slots than this cannot hold the reserves.
  static constexpr std::uint32_t kMinSlots = 4;

  CreditWindow() = default;
  // `peer_slots`: receive slots the peer posted for this queue pair (what we may send into);
  // `own_slots`: receive slots this end posted (what we owe credits for). Both >= kMinSlots.
  CreditWindow(std::uint32_t peer_slots, std::uint32_t own_slots);

  // Whether a message of `kind` may be sent now.
  bool can_send(MessageKind kind) const;
  // One message was posted: one peer slot is taken until the peer returns it.
  void on_send();
  // The peer returned `n` slots. False when it returns more than we have used: a broken peer.
  bool on_grant(std::uint32_t n);

  // One of our slots was reposted: the peer may use it again once told.
  void on_reposted() { ++owed_; }
  // The credits to put on the next outgoing message; they are then no longer owed.
  std::uint32_t take_owed();
  // Enough is owed that a credit-only message should carry it now.
  bool credit_update_due() const { return owed_ >= threshold_; }

  std::uint32_t credits() const { return peer_slots_ - in_use_; }
  std::uint32_t owed() const { return owed_; }
  std::uint32_t threshold() const { return threshold_; }

 private:
  std::uint32_t peer_slots_ = 0;
  std::uint32_t in_use_ = 0;  // peer slots taken by our messages and not yet returned
  std::uint32_t owed_ = 0;
  std::uint32_t threshold_ = 0;
};

}  // namespace holmes::verbs
