// The matcher's per-operation checks: a message, probe or verdict of another call in this rank's
// slot fails the slot's receives, whoever sent it; evidence about a slot this rank has yet to
// reach fails the slot when it gets there; control messages are bounds-checked, consumed and
// never handed to a receive.
#include "transports/matcher.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "transports/common/tag_codec.hpp"

namespace holmes {
namespace {

constexpr std::uint32_t kOurs = 0x1111;
constexpr std::uint32_t kTheirs = 0x2222;

Matcher make_matcher() {
  return Matcher([](int peer) { return "rank " + std::to_string(peer); });
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A receive of 4 bytes posted in (sequence, step) from `peer`.
struct Receive {
  std::vector<std::byte> buffer = std::vector<std::byte>(4);
  CompletionPtr request = std::make_shared<Completion>();
  bool finished_at_post = false;

  Receive(Matcher& m, int peer, std::uint64_t sequence, std::uint64_t step,
          std::uint32_t signature = kOurs) {
    finished_at_post = m.post(peer, collective_tag(sequence, step), signature, buffer, request);
  }
};

// Delivers an empty control message the way tcp and ucx do (land, then landed); false if the
// matcher refused it.
bool send_control(Matcher& m, int peer, std::uint64_t tag, std::uint32_t signature,
                  std::uint64_t total = 0) {
  const FragmentHeader h{tag, signature, total, 0, 0};
  const auto landing = m.land(peer, h);
  if (!landing) return false;
  EXPECT_EQ(landing->target, nullptr);
  EXPECT_EQ(landing->piece, nullptr);
  EXPECT_EQ(landing->request, nullptr);
  m.landed(peer, h, *landing);
  return true;
}

void send_data(Matcher& m, int peer, std::uint64_t tag, std::uint32_t signature) {
  const std::vector<std::byte> payload(4, std::byte{7});
  ASSERT_TRUE(m.deliver(peer, FragmentHeader{tag, signature, 4, 0, 4}, payload));
}

TEST(ControlTag, RoundTripsWithTheDocumentedLayout) {
  const std::uint64_t tag = control_tag(ControlType::kProbe, 5, 3);
  EXPECT_EQ(tag, (3ull << 62) | (5ull << 38) | (1ull << 36) | 4ull);
  const auto decoded = decode_control_tag(tag);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_TRUE(decoded->valid);
  EXPECT_EQ(decoded->message.type, ControlType::kProbe);
  EXPECT_EQ(decoded->message.slot, 5u);
  EXPECT_EQ(decoded->message.root, 3);

  // No root, and a sequence number past 2^24 (slots wrap like the collective tags' sequence).
  const auto verdict = decode_control_tag(control_tag(ControlType::kVerdict, (1ull << 24) + 7, -1));
  ASSERT_TRUE(verdict.has_value());
  EXPECT_TRUE(verdict->valid);
  EXPECT_EQ(verdict->message.type, ControlType::kVerdict);
  EXPECT_EQ(verdict->message.slot, 7u);
  EXPECT_EQ(verdict->message.root, -1);

  const auto largest = decode_control_tag(control_tag(ControlType::kProbe, 0, INT_MAX));
  ASSERT_TRUE(largest.has_value());
  EXPECT_TRUE(largest->valid);
  EXPECT_EQ(largest->message.root, INT_MAX);
}

TEST(ControlTag, OtherKindsAndMalformedTagsAreNotControlMessages) {
  EXPECT_FALSE(decode_control_tag(collective_tag(5, 1)).has_value());
  EXPECT_FALSE(decode_control_tag(p2p_tag(0, 5)).has_value());
  EXPECT_FALSE(decode_control_tag(42).has_value());
  const std::uint64_t probe = control_tag(ControlType::kProbe, 5, 3);
  const std::uint64_t type_bits = 3ull << 36;
  const std::uint64_t malformed[] = {
      probe & ~type_bits,                        // type 0
      probe | type_bits,                         // type 3
      probe | (1ull << 33),                      // a reserved bit
      (probe & ~0xffffffffull) | 0x80000001ull,  // root 2^31: not an int
      ~std::uint64_t{0},                         // all bits set
  };
  for (const std::uint64_t bad : malformed) {
    const auto decoded = decode_control_tag(bad);
    ASSERT_TRUE(decoded.has_value()) << std::hex << bad;
    EXPECT_FALSE(decoded->valid) << std::hex << bad;
  }
}

TEST(MatcherControl, MalformedControlMessagesAreProtocolErrors) {
  Matcher m = make_matcher();
  // A payload, an unknown type: refused (the transport drops the peer).
  EXPECT_FALSE(send_control(m, 1, control_tag(ControlType::kProbe, 0, 0), kTheirs, 8));
  EXPECT_FALSE(send_control(m, 1, control_tag(ControlType::kProbe, 0, 0) | (3ull << 36), kTheirs));
  const std::vector<std::byte> payload(8);
  EXPECT_FALSE(m.deliver(
      1, FragmentHeader{control_tag(ControlType::kVerdict, 0, 0), kTheirs, 8, 0, 8}, payload));
  EXPECT_EQ(m.unexpected_bytes(), 0u);
}

TEST(MatcherControl, AProbeOfAnotherCallFailsEveryReceiveOfTheSlot) {
  Matcher m = make_matcher();
  Receive from_one(m, 1, 9, 0);
  Receive from_two(m, 2, 9, 1);
  // A point-to-point receive is no part of any slot.
  std::vector<std::byte> p2p_buffer(4);
  auto p2p = std::make_shared<Completion>();
  EXPECT_FALSE(m.post(1, p2p_tag(0, 0), kTheirs, p2p_buffer, p2p));
  ASSERT_FALSE(from_one.finished_at_post);
  ASSERT_FALSE(from_two.finished_at_post);

  ASSERT_TRUE(send_control(m, 3, control_tag(ControlType::kProbe, 9, 2), kTheirs));
  for (const Receive* r : {&from_one, &from_two}) {
    ASSERT_TRUE(r->request->done());
    EXPECT_EQ(r->request->status(), HM_ERR_MISMATCH);
    EXPECT_TRUE(contains(r->request->message(),
                         "rank 3 waits in this operation for a call with "
                         "root 2 (signature 00002222; this rank's: 00001111)"))
        << r->request->message();
    EXPECT_FALSE(Matcher::failed_by_verdict(r->request->message()));
  }
  EXPECT_FALSE(p2p->done());
  // Later receives of the slot fail at once.
  Receive later(m, 1, 9, 5);
  EXPECT_TRUE(later.finished_at_post);
  EXPECT_EQ(later.request->status(), HM_ERR_MISMATCH);
  EXPECT_EQ(m.unexpected_bytes(), 0u);
}

TEST(MatcherControl, AProbeOfTheSameCallChangesNothing) {
  Matcher m = make_matcher();
  Receive r(m, 1, 9, 0);
  ASSERT_TRUE(send_control(m, 1, control_tag(ControlType::kProbe, 9, 0), kOurs));
  EXPECT_FALSE(r.request->done());
  send_data(m, 1, collective_tag(9, 0), kOurs);
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.request->status(), HM_SUCCESS);
  EXPECT_EQ(r.buffer[3], std::byte{7});
}

TEST(MatcherControl, AControlMessageNeverReachesAReceive) {
  Matcher m = make_matcher();
  // Even a receive posted with the very tag (nothing does this) is not filled by it.
  const std::uint64_t tag = control_tag(ControlType::kProbe, 9, 0);
  std::vector<std::byte> buffer(0);
  auto request = std::make_shared<Completion>();
  EXPECT_FALSE(m.post(1, tag, kOurs, buffer, request));
  ASSERT_TRUE(send_control(m, 1, tag, kOurs));
  EXPECT_FALSE(request->done());
  EXPECT_EQ(m.unexpected_bytes(), 0u);
}

TEST(MatcherControl, AProbeAheadFailsTheSlotWhenThisRankGetsThere) {
  Matcher m = make_matcher();
  Receive now(m, 1, 4, 0);
  // Peer 2 already waits in slot 5 for a call with another signature; peer 3 in slot 6 for ours.
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kProbe, 5, 1), kTheirs));
  ASSERT_TRUE(send_control(m, 3, control_tag(ControlType::kProbe, 6, 0), kOurs));
  EXPECT_FALSE(now.request->done());
  send_data(m, 1, collective_tag(4, 0), kOurs);
  EXPECT_EQ(now.request->status(), HM_SUCCESS);

  Receive in_five(m, 3, 5, 0);
  EXPECT_TRUE(in_five.finished_at_post);
  EXPECT_EQ(in_five.request->status(), HM_ERR_MISMATCH);
  EXPECT_TRUE(contains(in_five.request->message(),
                       "rank 2 waits in this operation for a call "
                       "with root 1"))
      << in_five.request->message();

  Receive in_six(m, 1, 6, 0);
  EXPECT_FALSE(in_six.finished_at_post);
}

TEST(MatcherControl, AProbeForASlotThisRankIsPastIsIgnored) {
  Matcher m = make_matcher();
  Receive r(m, 1, 8, 0);
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kProbe, 7, 0), kTheirs));
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kVerdict, 7, 0), kTheirs));
  EXPECT_FALSE(r.request->done());
}

TEST(MatcherControl, AVerdictFailsTheSlotWhateverTheSignature) {
  Matcher m = make_matcher();
  Receive r(m, 1, 3, 0);
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kVerdict, 3, 0), kOurs));
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.request->status(), HM_ERR_MISMATCH);
  EXPECT_TRUE(Matcher::failed_by_verdict(r.request->message())) << r.request->message();
  EXPECT_TRUE(contains(r.request->message(), "its call with root 0")) << r.request->message();

  // Ahead of this rank: the slot fails when it gets there.
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kVerdict, 4, -1), kOurs));
  Receive next(m, 1, 4, 0);
  EXPECT_TRUE(next.finished_at_post);
  EXPECT_EQ(next.request->status(), HM_ERR_MISMATCH);
  EXPECT_TRUE(Matcher::failed_by_verdict(next.request->message()));
}

TEST(MatcherControl, ControlMessagesLeftWithTheTransportTakeEffectWhenNoted) {
  // shm leaves a message it has no receive for in its ring and only notes it; it may deliver it
  // later when the ring fills up.
  Matcher m = make_matcher();
  Receive r(m, 1, 2, 0);
  const std::uint64_t probe = control_tag(ControlType::kProbe, 2, 0);
  m.note_arrival(3, probe, kTheirs);
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.request->status(), HM_ERR_MISMATCH);
  ASSERT_TRUE(m.deliver(3, FragmentHeader{probe, kTheirs, 0, 0, 0}, {}));
  EXPECT_EQ(m.unexpected_bytes(), 0u);
  // A malformed one noted is only refused once it is delivered.
  m.note_arrival(3, probe | (3ull << 36), kTheirs);
  EXPECT_FALSE(m.deliver(3, FragmentHeader{probe | (3ull << 36), kTheirs, 0, 0, 0}, {}));
}

TEST(MatcherSlots, AMessageOfAnotherCallFromAnyPeerFailsTheSlot) {
  Matcher m = make_matcher();
  Receive from_one(m, 1, 6, 0);
  // Peer 2 is not what this rank waits on, and its step meets no receive: still a disagreement.
  send_data(m, 2, collective_tag(6, 3), kTheirs);
  ASSERT_TRUE(from_one.request->done());
  EXPECT_EQ(from_one.request->status(), HM_ERR_MISMATCH);
  EXPECT_TRUE(contains(from_one.request->message(), "rank 2 is in a different operation"))
      << from_one.request->message();
  // The slot's later messages are dropped, its later receives fail at once.
  send_data(m, 2, collective_tag(6, 4), kTheirs);
  EXPECT_EQ(m.unexpected_bytes(), 0u);
  Receive later(m, 2, 6, 4);
  EXPECT_TRUE(later.finished_at_post);
  EXPECT_EQ(later.request->status(), HM_ERR_MISMATCH);
}

TEST(MatcherSlots, MessagesAheadAreJudgedWhenThisRankGetsThere) {
  Matcher m = make_matcher();
  Receive now(m, 1, 10, 0);
  send_data(m, 2, collective_tag(11, 0), kTheirs);  // a peer already in the next slot
  send_data(m, 3, collective_tag(12, 0), kOurs);
  EXPECT_FALSE(now.request->done());
  send_data(m, 1, collective_tag(10, 0), kOurs);
  EXPECT_EQ(now.request->status(), HM_SUCCESS);

  Receive eleven(m, 1, 11, 0);  // from another peer than the one that showed the other call
  EXPECT_TRUE(eleven.finished_at_post);
  EXPECT_EQ(eleven.request->status(), HM_ERR_MISMATCH);

  Receive twelve(m, 3, 12, 0);  // its message is here and agrees
  EXPECT_TRUE(twelve.finished_at_post);
  EXPECT_EQ(twelve.request->status(), HM_SUCCESS);
}

TEST(MatcherSlots, SlotsWrapAround) {
  Matcher m = make_matcher();
  const std::uint64_t last = (1ull << 24) - 1;
  Receive r(m, 1, last, 0);
  // The next slot after the last sequence number is 0: ahead, not past.
  ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kProbe, last + 1, 0), kTheirs));
  EXPECT_FALSE(r.request->done());
  Receive next(m, 1, last + 1, 0);
  EXPECT_TRUE(next.finished_at_post);
  EXPECT_EQ(next.request->status(), HM_ERR_MISMATCH);
}

TEST(MatcherSlots, EvidenceAheadIsBounded) {
  // A hostile peer cannot make the matcher keep unbounded state: 64 slots ahead are kept, the
  // rest dropped.
  Matcher m = make_matcher();
  Receive now(m, 1, 0, 0);
  for (std::uint64_t slot = 1; slot <= 1000; ++slot) {
    ASSERT_TRUE(send_control(m, 2, control_tag(ControlType::kProbe, slot, 0), kTheirs));
  }
  Receive kept(m, 1, 64, 0);
  EXPECT_TRUE(kept.finished_at_post);
  Receive dropped(m, 1, 65, 0);
  EXPECT_FALSE(dropped.finished_at_post);
}

// Unexpected pieces arrive through land()/landed() as tcp reads them: `fill` into the piece.
Matcher::Landing land_unexpected(Matcher& m, std::uint64_t tag, std::size_t length,
                                 std::byte fill) {
  const FragmentHeader h{tag, kOurs, length, 0, length};
  auto landing = m.land(0, h);
  EXPECT_TRUE(landing.has_value());
  EXPECT_NE(landing->piece, nullptr);  // no receive posted: kept as unexpected data
  std::fill_n(landing->target, length, fill);
  m.landed(0, h, *landing);
  return *landing;
}

TEST(MatcherUnexpected, APieceBufferIsReusedOnceItsBytesWentToTheirReceive) {
  auto m = make_matcher();
  constexpr std::size_t kBytes = 300000;  // above malloc's mmap threshold
  const std::byte* first = land_unexpected(m, collective_tag(1, 0), kBytes, std::byte{0xaa}).target;
  std::vector<std::byte> out(kBytes);
  auto request = std::make_shared<Completion>();
  ASSERT_TRUE(m.post(0, collective_tag(1, 0), kOurs, out, request));
  EXPECT_EQ(request->status(), HM_SUCCESS);
  EXPECT_EQ(out, std::vector<std::byte>(kBytes, std::byte{0xaa}));

  // The next piece of a similar size lands in the same memory, and only its own bytes come out.
  const std::byte* second =
      land_unexpected(m, collective_tag(1, 1), kBytes - 1000, std::byte{0xbb}).target;
  EXPECT_EQ(second, first);
  std::vector<std::byte> out2(kBytes - 1000);
  ASSERT_TRUE(m.post(0, collective_tag(1, 1), kOurs, out2, std::make_shared<Completion>()));
  EXPECT_EQ(out2, std::vector<std::byte>(kBytes - 1000, std::byte{0xbb}));
  EXPECT_EQ(m.unexpected_bytes(), 0u);
}

TEST(MatcherUnexpected, APieceSomeoneStillHoldsOrAFarSmallerOneIsNotReused) {
  auto m = make_matcher();
  constexpr std::size_t kBytes = 1 << 20;
  // The transport keeps its landing (say, a read still in flight): not reusable.
  const auto held = land_unexpected(m, collective_tag(1, 0), kBytes, std::byte{1});
  std::vector<std::byte> out(kBytes);
  ASSERT_TRUE(m.post(0, collective_tag(1, 0), kOurs, out, std::make_shared<Completion>()));
  auto next = land_unexpected(m, collective_tag(1, 1), kBytes, std::byte{2});
  EXPECT_NE(next.target, held.target);
  EXPECT_EQ(held.piece->front(), std::byte{1});  // untouched
  EXPECT_EQ(next.piece->front(), std::byte{2});

  // A 1 MiB spare does not go to an 8-byte piece (it would sit there while large ones allocate).
  const std::byte* spare = next.target;
  std::vector<std::byte> out2(kBytes);
  next = {};  // the transport lets go of it
  ASSERT_TRUE(m.post(0, collective_tag(1, 1), kOurs, out2, std::make_shared<Completion>()));
  EXPECT_EQ(out2, std::vector<std::byte>(kBytes, std::byte{2}));
  EXPECT_NE(land_unexpected(m, collective_tag(1, 2), 8, std::byte{3}).target, spare);
  EXPECT_EQ(land_unexpected(m, collective_tag(1, 3), kBytes / 2, std::byte{4}).target, spare);
}

}  // namespace
}  // namespace holmes
