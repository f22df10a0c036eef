// Credit-based flow control (credit_window.hpp): the reserves per message kind, the threshold
// for credit-only messages, refusal of credits a peer cannot owe, and a randomized simulation of
// two ends that checks a sender never overruns the receive slots posted for it and that traffic
// always finishes (no deadlock) without credit messages answering each other forever.
#include "transports/verbs/credit_window.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "core/status.hpp"

namespace holmes::verbs {
namespace {

TEST(VerbsCreditWindow, ReservesPerKind) {
  CreditWindow w(8, 8);
  EXPECT_EQ(w.credits(), 8u);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(w.can_send(MessageKind::kData)) << i;
    w.on_send();
  }
  EXPECT_EQ(w.credits(), 2u);
  EXPECT_FALSE(w.can_send(MessageKind::kData));  // the last two are for credits and goodbye
  EXPECT_TRUE(w.can_send(MessageKind::kCredit));
  w.on_send();
  EXPECT_FALSE(w.can_send(MessageKind::kCredit));
  EXPECT_TRUE(w.can_send(MessageKind::kGoodbye));
  w.on_send();
  EXPECT_EQ(w.credits(), 0u);
  EXPECT_FALSE(w.can_send(MessageKind::kGoodbye));
  EXPECT_THROW(w.on_send(), Error);  // never without a credit
}

TEST(VerbsCreditWindow, GrantsCannotExceedWhatWasUsed) {
  CreditWindow w(8, 8);
  for (int i = 0; i < 5; ++i) w.on_send();
  EXPECT_FALSE(w.on_grant(6));  // a broken or hostile peer
  EXPECT_EQ(w.credits(), 3u);
  EXPECT_TRUE(w.on_grant(2));
  EXPECT_EQ(w.credits(), 5u);
  EXPECT_TRUE(w.on_grant(3));
  EXPECT_EQ(w.credits(), 8u);
  EXPECT_FALSE(w.on_grant(1));
  EXPECT_TRUE(w.on_grant(0));
}

TEST(VerbsCreditWindow, CreditMessagesAtHalfTheSlots) {
  CreditWindow w(32, 8);
  EXPECT_EQ(w.threshold(), 4u);
  for (int i = 0; i < 3; ++i) w.on_reposted();
  EXPECT_FALSE(w.credit_update_due());
  w.on_reposted();
  EXPECT_TRUE(w.credit_update_due());
  EXPECT_EQ(w.take_owed(), 4u);
  EXPECT_EQ(w.owed(), 0u);
  EXPECT_FALSE(w.credit_update_due());
  EXPECT_EQ(CreditWindow(8, 32).threshold(), 16u);
  EXPECT_EQ(CreditWindow(8, 4).threshold(), 2u);
  EXPECT_EQ(CreditWindow(8, 5).threshold(), 2u);
  EXPECT_THROW(CreditWindow(3, 8), Error);
  EXPECT_THROW(CreditWindow(8, 3), Error);
}

// Two ends of a queue pair, with messages in flight both ways and receive slots that the
// receiver reposts some time after a message used them.
struct End {
  End(std::uint32_t own_slots, std::uint32_t peer_slots, int data)
      : window(peer_slots, own_slots), posted(own_slots), data_left(data) {}
  CreditWindow window;
  std::uint32_t posted;         // our receive slots the hardware may fill
  std::uint32_t to_repost = 0;  // used, not yet reposted
  int data_left;
  int data_received = 0;
  int credit_messages_sent = 0;
};

struct Message {
  MessageKind kind;
  std::uint32_t credits;
};

// What the transport does after every event: data while the reserves allow, then a credit
// message if enough is owed.
void act(End& e, std::deque<Message>& wire) {
  while (e.data_left > 0 && e.window.can_send(MessageKind::kData)) {
    e.window.on_send();
    wire.push_back({MessageKind::kData, e.window.take_owed()});
    --e.data_left;
  }
  if (e.window.credit_update_due() && e.window.can_send(MessageKind::kCredit)) {
    e.window.on_send();
    wire.push_back({MessageKind::kCredit, e.window.take_owed()});
    ++e.credit_messages_sent;
  }
}

void simulate(std::uint32_t a_slots, std::uint32_t b_slots, int a_data, int b_data, unsigned seed) {
  std::mt19937 random(seed);
  End a(a_slots, b_slots, a_data);
  End b(b_slots, a_slots, b_data);
  std::deque<Message> a_to_b, b_to_a;
  act(a, a_to_b);
  act(b, b_to_a);
  for (int step = 0;; ++step) {
    ASSERT_LT(step, 10'000'000) << "no end in sight";
    // Everything that can happen next, chosen at random.
    enum Event { kDeliverToB, kDeliverToA, kRepostB, kRepostA };
    std::vector<Event> possible;
    if (!a_to_b.empty()) possible.push_back(kDeliverToB);
    if (!b_to_a.empty()) possible.push_back(kDeliverToA);
    if (b.to_repost > 0) possible.push_back(kRepostB);
    if (a.to_repost > 0) possible.push_back(kRepostA);
    if (possible.empty()) break;
    const Event event = possible[random() % possible.size()];
    const auto deliver = [](End& to, std::deque<Message>& wire) {
      ASSERT_GT(to.posted, 0u) << "a message arrived with no receive posted: overrun";
      const Message m = wire.front();
      wire.pop_front();
      --to.posted;
      ++to.to_repost;
      ASSERT_TRUE(to.window.on_grant(m.credits));
      if (m.kind == MessageKind::kData) ++to.data_received;
    };
    const auto repost = [](End& e) {
      --e.to_repost;
      ++e.posted;
      e.window.on_reposted();
    };
    switch (event) {
      case kDeliverToB:
        deliver(b, a_to_b);
        break;
      case kDeliverToA:
        deliver(a, b_to_a);
        break;
      case kRepostB:
        repost(b);
        break;
      case kRepostA:
        repost(a);
        break;
    }
    ASSERT_GE(a.window.credits(), 1u);  // a goodbye can always be sent
    ASSERT_GE(b.window.credits(), 1u);
    act(a, a_to_b);
    act(b, b_to_a);
  }
  // Quiet: everything was sent and received, nothing deadlocked.
  EXPECT_EQ(a.data_left, 0);
  EXPECT_EQ(b.data_left, 0);
  EXPECT_EQ(b.data_received, a_data);
  EXPECT_EQ(a.data_received, b_data);
  EXPECT_TRUE(a.window.can_send(MessageKind::kGoodbye));
  EXPECT_TRUE(b.window.can_send(MessageKind::kGoodbye));
  // Credit messages only answer thresholds: at most one per `threshold` messages received.
  const int a_received = b_data + b.credit_messages_sent;
  const int b_received = a_data + a.credit_messages_sent;
  EXPECT_LE(a.credit_messages_sent, a_received / static_cast<int>(a.window.threshold()) + 1);
  EXPECT_LE(b.credit_messages_sent, b_received / static_cast<int>(b.window.threshold()) + 1);
}

TEST(VerbsCreditWindow, SimulatedTrafficNeverOverrunsAndAlwaysFinishes) {
  // The transport's shapes: data one way with few control slots back, and symmetric traffic.
  for (unsigned seed = 1; seed <= 30; ++seed) {
    simulate(8, 32, 5000, 0, seed);  // sender with 8 control slots, receiver with 32
    simulate(32, 8, 0, 5000, seed);
    simulate(4, 4, 3000, 3000, seed);  // the smallest windows, both ways
    simulate(5, 17, 2000, 777, seed);
    simulate(64, 4, 1000, 1000, seed);
  }
}

TEST(VerbsCreditWindow, IdleEndsExchangeNoCreditMessages) {
  for (unsigned seed = 1; seed <= 5; ++seed) simulate(8, 8, 0, 0, seed);
  // One data message each way cannot start a credit exchange.
  End a(8, 8, 1), b(8, 8, 1);
  std::deque<Message> ab, ba;
  act(a, ab);
  act(b, ba);
  EXPECT_EQ(ab.size(), 1u);
  EXPECT_EQ(ba.size(), 1u);
  EXPECT_EQ(a.credit_messages_sent + b.credit_messages_sent, 0);
}

}  // namespace
}  // namespace holmes::verbs
