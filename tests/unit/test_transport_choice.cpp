// choose_route: the per-pair transport rules, and that both ends of a link reach the same answer.
#include <gtest/gtest.h>

#include "communicator/peer_card.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

PeerCard card(std::string host, std::string island, std::string fabric,
              std::vector<TransportKind> available,
              std::optional<TransportKind> forced = std::nullopt) {
  PeerCard c;
  c.locality = {std::move(host), std::move(island), std::move(fabric)};
  c.available = std::move(available);
  c.forced = forced;
  c.addresses.resize(std::size(kAllTransportKinds));
  return c;
}

const std::vector<TransportKind> kEverything = {TransportKind::kTcp, TransportKind::kShm,
                                                TransportKind::kUcx, TransportKind::kVerbs};
const std::vector<TransportKind> kTcpOnly = {TransportKind::kTcp};

// The route and the route computed from the other end must agree.
Route both_ways(const PeerCard& a, const PeerCard& b) {
  const Route ab = choose_route(a, b, 1);
  const Route ba = choose_route(b, a, 0);
  EXPECT_EQ(ab.kind, ba.kind) << ab.reason << " / " << ba.reason;
  return ab;
}

TEST(TransportChoice, SameHostUsesShm) {
  const auto r = both_ways(card("h", "i", "ib", kEverything), card("h", "i", "ib", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kShm);
  EXPECT_EQ(r.reason, "same host");
}

TEST(TransportChoice, SameHostWithoutShmFallsBackToUcxThenTcp) {
  const std::vector<TransportKind> no_shm = {TransportKind::kTcp, TransportKind::kUcx};
  EXPECT_EQ(both_ways(card("h", "i", "ib", no_shm), card("h", "i", "ib", kEverything)).kind,
            TransportKind::kUcx);
  EXPECT_EQ(both_ways(card("h", "i", "ib", kTcpOnly), card("h", "i", "ib", kEverything)).kind,
            TransportKind::kTcp);
}

TEST(TransportChoice, SameRdmaIslandUsesUcxThenVerbs) {
  EXPECT_EQ(
      both_ways(card("a", "i", "roce", kEverything), card("b", "i", "roce", kEverything)).kind,
      TransportKind::kUcx);
  const std::vector<TransportKind> verbs = {TransportKind::kTcp, TransportKind::kVerbs};
  const auto r = both_ways(card("a", "i", "ib", verbs), card("b", "i", "ib", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kVerbs);
  EXPECT_NE(r.reason.find("same island i"), std::string::npos) << r.reason;
}

TEST(TransportChoice, RdmaIslandWithoutRdmaTransportUsesTcpAndSaysSo) {
  const auto r = both_ways(card("a", "i", "ib", kTcpOnly), card("b", "i", "ib", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kTcp);
  EXPECT_NE(r.reason.find("no RDMA transport"), std::string::npos) << r.reason;
}

TEST(TransportChoice, OtherIslandsAndEthernetUseTcp) {
  auto r =
      both_ways(card("a", "ib-1", "ib", kEverything), card("b", "roce-1", "roce", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kTcp);
  EXPECT_NE(r.reason.find("other island"), std::string::npos) << r.reason;
  // Same island name but different fabrics are not one island: IB and RoCE cannot talk RDMA.
  r = both_ways(card("a", "x", "ib", kEverything), card("b", "x", "roce", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kTcp);
  r = both_ways(card("a", "lan", "ethernet", kEverything),
                card("b", "lan", "ethernet", kEverything));
  EXPECT_EQ(r.kind, TransportKind::kTcp);
}

TEST(TransportChoice, ForcedTransportApplies) {
  const auto r = both_ways(card("a", "x", "ib", kEverything, TransportKind::kTcp),
                           card("a", "x", "ib", kEverything, TransportKind::kTcp));
  EXPECT_EQ(r.kind, TransportKind::kTcp);
  EXPECT_EQ(r.reason, "forced by HOLMES_TRANSPORT=tcp");
}

TEST(TransportChoice, DisagreementIsAMismatchOnBothSides) {
  const auto a = card("h", "i", "ib", kEverything, TransportKind::kUcx);
  const auto b = card("h", "i", "ib", kEverything);
  for (const auto* pair : {&a, &b}) {
    const auto& me = *pair;
    const auto& other = pair == &a ? b : a;
    try {
      choose_route(me, other, 7);
      ADD_FAILURE() << "no mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_MISMATCH);
      EXPECT_NE(std::string(e.what()).find("rank 7"), std::string::npos) << e.what();
    }
  }
}

TEST(TransportChoice, ForcedButUnavailableOrUnreachable) {
  const std::vector<TransportKind> no_verbs = {TransportKind::kTcp, TransportKind::kShm};
  try {
    choose_route(card("h", "i", "ib", no_verbs, TransportKind::kVerbs),
                 card("h", "i", "ib", kEverything, TransportKind::kVerbs), 3);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("this rank cannot run it"), std::string::npos);
  }
  try {
    choose_route(card("h1", "i", "ib", kEverything, TransportKind::kShm),
                 card("h2", "i", "ib", kEverything, TransportKind::kShm), 3);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("another host"), std::string::npos);
  }
}

TEST(PeerCard, RoundTripAndMalformed) {
  auto c = card("host-1", "isl", "roce", {TransportKind::kTcp, TransportKind::kUcx},
                TransportKind::kUcx);
  c.addresses[static_cast<std::size_t>(TransportKind::kTcp)] = "10.0.0.1:4000";
  c.addresses[static_cast<std::size_t>(TransportKind::kUcx)] = "abcdef";
  c.locality.machine = "node7/0123abcd";
  c.locality.cpus = {0, 1, 5};
  const auto back = PeerCard::decode(c.encode(), 0);
  EXPECT_EQ(back.locality.machine, "node7/0123abcd");
  EXPECT_EQ(back.locality.cpus, c.locality.cpus);
  EXPECT_EQ(back.locality.host, "host-1");
  EXPECT_EQ(back.locality.island, "isl");
  EXPECT_EQ(back.locality.fabric, "roce");
  EXPECT_EQ(back.available, c.available);
  EXPECT_EQ(back.forced, c.forced);
  EXPECT_EQ(back.address(TransportKind::kTcp), "10.0.0.1:4000");
  EXPECT_EQ(back.address(TransportKind::kUcx), "abcdef");
  EXPECT_EQ(back.address(TransportKind::kShm), "");
  // A hostile CPU number is refused like any other malformed field.
  std::string hostile = c.encode();
  hostile.replace(hostile.find("[0,1,5]"), 7, "[0,-4]");
  for (const std::string& bad :
       {std::string(), std::string("{"), std::string("[]"), std::string("{\"host\": 3}"),
        std::string("not json at all"), hostile}) {
    try {
      PeerCard::decode(bad, 5);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_TRANSPORT);
      EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace holmes::detail
