// Which point-to-point message each receive takes (transports/arrival_order.hpp): named receives
// take their peer's messages in order, any-source receives the earliest arrival that is its
// peer's next message, both kinds without ever taking one message twice; and the matcher reports
// exactly the point-to-point messages that arrive before their receive.
#include "transports/arrival_order.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "transports/common/tag_codec.hpp"
#include "transports/matcher.hpp"

namespace holmes {
namespace {

// The (peer, sequence) a matched ticket took, decoded from its tag.
std::pair<int, std::uint32_t> took(const ArrivalOrder::Ticket& t) {
  EXPECT_TRUE(t.matched.done());
  EXPECT_EQ(t.matched.status(), HM_SUCCESS) << t.matched.message();
  const auto p2p = decode_p2p_tag(t.tag);
  EXPECT_TRUE(p2p.has_value());
  EXPECT_EQ(p2p->user_tag, t.user_tag);
  return {t.peer, p2p->sequence};
}

TEST(ArrivalOrderTest, NamedReceivesNumberEachPeerAndTagApart) {
  ArrivalOrder order(4);
  EXPECT_EQ(order.claim(1, 0), 0u);
  EXPECT_EQ(order.claim(1, 0), 1u);
  EXPECT_EQ(order.claim(2, 0), 0u);
  EXPECT_EQ(order.claim(1, 9), 0u);
  EXPECT_EQ(order.claim(1, 0), 2u);
  EXPECT_EQ(order.claim(1, 9), 1u);
}

TEST(ArrivalOrderTest, AnySourceTakesTheEarliestArrival) {
  ArrivalOrder order(4);
  order.arrived(3, p2p_tag(0, 0));
  order.arrived(1, p2p_tag(0, 0));
  order.arrived(1, p2p_tag(0, 1));
  auto first = order.expect_any(0);
  auto second = order.expect_any(0);
  auto third = order.expect_any(0);
  EXPECT_EQ(took(*first), std::make_pair(3, 0u));
  EXPECT_EQ(took(*second), std::make_pair(1, 0u));
  EXPECT_EQ(took(*third), std::make_pair(1, 1u));
  // The peers' next messages are numbered on from what the any-source receives took.
  EXPECT_EQ(order.claim(1, 0), 2u);
  EXPECT_EQ(order.claim(3, 0), 1u);
}

TEST(ArrivalOrderTest, WaitingReceivesAreMatchedInTheOrderTheyWerePosted) {
  ArrivalOrder order(3);
  auto first = order.expect_any(5);
  auto second = order.expect_any(5);
  EXPECT_FALSE(first->matched.done());
  order.arrived(2, p2p_tag(5, 0));
  EXPECT_EQ(took(*first), std::make_pair(2, 0u));
  EXPECT_FALSE(second->matched.done());
  order.arrived(1, p2p_tag(5, 0));
  EXPECT_EQ(took(*second), std::make_pair(1, 0u));
}

TEST(ArrivalOrderTest, OnlyAPeersNextMessageCanBeTaken) {
  // Message 1 of rank 2 arrives before its message 0 (fragments on several sockets): it waits
  // until message 0 is taken, and message 0 of rank 1, arriving later, goes first.
  ArrivalOrder order(3);
  order.arrived(2, p2p_tag(0, 1));
  auto a = order.expect_any(0);
  EXPECT_FALSE(a->matched.done());
  order.arrived(1, p2p_tag(0, 0));
  EXPECT_EQ(took(*a), std::make_pair(1, 0u));
  auto b = order.expect_any(0);
  EXPECT_FALSE(b->matched.done());
  // A named receive takes rank 2's message 0: message 1, already here, goes to the waiting one.
  EXPECT_EQ(order.claim(2, 0), 0u);
  EXPECT_EQ(took(*b), std::make_pair(2, 1u));
}

TEST(ArrivalOrderTest, TagsAreMatchedApart) {
  ArrivalOrder order(2);
  order.arrived(1, p2p_tag(7, 0));
  auto untagged = order.expect_any(0);
  EXPECT_FALSE(untagged->matched.done());
  auto seven = order.expect_any(7);
  EXPECT_EQ(took(*seven), std::make_pair(1, 0u));
  order.arrived(1, p2p_tag(0, 0));
  EXPECT_EQ(took(*untagged), std::make_pair(1, 0u));
}

TEST(ArrivalOrderTest, AMessageIsNeverTakenTwice) {
  ArrivalOrder order(3);
  // A named receive took message 0 of rank 1 before its report came in (the receive was on its
  // way to the transport): the report changes nothing.
  EXPECT_EQ(order.claim(1, 0), 0u);
  order.arrived(1, p2p_tag(0, 0));
  auto a = order.expect_any(0);
  EXPECT_FALSE(a->matched.done());
  // Repeated reports of one message (shm reports every fragment it keeps) count once.
  order.arrived(2, p2p_tag(0, 0));
  order.arrived(2, p2p_tag(0, 0));
  EXPECT_EQ(took(*a), std::make_pair(2, 0u));
  auto b = order.expect_any(0);
  EXPECT_FALSE(b->matched.done());
  // Other kinds of tag are no point-to-point messages.
  order.arrived(1, collective_tag(0, 0));
  order.arrived(1, control_tag(ControlType::kProbe, 0, -1));
  EXPECT_FALSE(b->matched.done());
  EXPECT_TRUE(order.cancel(b));
}

TEST(ArrivalOrderTest, AWithdrawnTicketTakesNothing) {
  ArrivalOrder order(2);
  auto dropped = order.expect_any(0);
  EXPECT_TRUE(order.cancel(dropped));
  order.arrived(1, p2p_tag(0, 0));
  EXPECT_FALSE(dropped->matched.done());
  auto kept = order.expect_any(0);
  EXPECT_EQ(took(*kept), std::make_pair(1, 0u));
  // A ticket with a message cannot be withdrawn: its receive is owed.
  EXPECT_FALSE(order.cancel(kept));
}

TEST(ArrivalOrderTest, APeerFailureFailsWaitingReceivesButNotWhatArrived) {
  ArrivalOrder order(3);
  auto waiting = order.expect_any(0);
  order.arrived(2, p2p_tag(4, 0));
  order.peer_failed(1, HM_ERR_PEER_FAILED, "rank 1 closed its connections");
  ASSERT_TRUE(waiting->matched.done());
  EXPECT_EQ(waiting->matched.status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(waiting->matched.message().find("rank 1 closed its connections"), std::string::npos)
      << waiting->matched.message();
  // A message that is here still goes to a receive; one that would wait fails at once.
  auto here = order.expect_any(4);
  EXPECT_EQ(took(*here), std::make_pair(2, 0u));
  auto later = order.expect_any(4);
  ASSERT_TRUE(later->matched.done());
  EXPECT_EQ(later->matched.status(), HM_ERR_PEER_FAILED);
  order.close(HM_ERR_ABORTED, "destroyed");
}

TEST(ArrivalOrderTest, CloseFailsWaitingReceives) {
  ArrivalOrder order(2);
  auto waiting = order.expect_any(3);
  order.close(HM_ERR_ABORTED, "the communicator was destroyed");
  ASSERT_TRUE(waiting->matched.done());
  EXPECT_EQ(waiting->matched.status(), HM_ERR_ABORTED);
  EXPECT_EQ(waiting->matched.message(), "the communicator was destroyed");
}

// The matcher reports a point-to-point message once when it starts to arrive unposted, never
// one whose receive was posted first, and no collective or control message.
TEST(ArrivalOrderTest, TheMatcherReportsUnexpectedPointToPointMessages) {
  Matcher m([](int peer) { return "rank " + std::to_string(peer); });
  std::vector<std::pair<int, std::uint64_t>> reports;
  m.set_arrival_listener([&](int peer, std::uint64_t tag) { reports.emplace_back(peer, tag); });
  const std::vector<std::byte> payload(8, std::byte{7});
  auto fragment = [](std::uint64_t tag, std::uint64_t offset) {
    return FragmentHeader{tag, 0x33, 8, offset, 4};
  };
  // Two fragments of an unexpected message: one report.
  ASSERT_TRUE(m.deliver(1, fragment(p2p_tag(0, 0), 0), {payload.data(), 4}));
  ASSERT_TRUE(m.deliver(1, fragment(p2p_tag(0, 0), 4), {payload.data(), 4}));
  // A posted receive's message: none.
  std::vector<std::byte> buffer(8);
  auto request = std::make_shared<Completion>();
  EXPECT_FALSE(m.post(2, p2p_tag(0, 0), 0x33, buffer, request));
  ASSERT_TRUE(m.deliver(2, fragment(p2p_tag(0, 0), 0), {payload.data(), 4}));
  ASSERT_TRUE(m.deliver(2, fragment(p2p_tag(0, 0), 4), {payload.data(), 4}));
  EXPECT_TRUE(request->done());
  // A collective message: none.
  ASSERT_TRUE(m.deliver(1, fragment(collective_tag(3, 0), 0), {payload.data(), 4}));
  // shm keeps a message in its ring and notes each fragment: one report each.
  m.note_arrival(2, p2p_tag(6, 0), 0x33);
  m.note_arrival(2, collective_tag(4, 0), 0x33);
  const std::vector<std::pair<int, std::uint64_t>> expected = {{1, p2p_tag(0, 0)},
                                                               {2, p2p_tag(6, 0)}};
  EXPECT_EQ(reports, expected);
}

}  // namespace
}  // namespace holmes
