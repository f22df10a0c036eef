// The tcp transport's NIC list (HOLMES_TCP_NICS) resolved against a host's interfaces, the card
// a multi-NIC endpoint publishes, and the lanes a sender opens to a peer from it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/net_interfaces.hpp"
#include "core/status.hpp"
#include "transports/tcp/lanes.hpp"
#include "transports/tcp/nics.hpp"

namespace holmes::tcp {
namespace {

// A host with loopback, two rails and a NIC that is down.
std::vector<InterfaceAddress> host_interfaces() {
  return {
      {"lo", false, "127.0.0.1", 8, true, true},     {"eth0", false, "10.1.0.5", 24, true, false},
      {"eth0", true, "fd00::5", 64, true, false},    {"eth1", false, "10.2.0.5", 24, true, false},
      {"eth2", false, "10.3.0.5", 24, false, false}, {"ib0", true, "fd01::5", 64, true, false},
  };
}

// eth0 reports 25 Gbit/s; the others nothing (as veths do).
std::optional<double> speed(std::string_view name) {
  if (name == "eth0") return 25.0;
  return std::nullopt;
}

std::vector<TcpNic> resolve(const std::string& text) {
  return resolve_tcp_nics(text, "HOLMES_TCP_NICS", host_interfaces(), speed);
}

// The message of the error `text` raises, or "" when it resolves.
std::string error_of(const std::string& text) {
  try {
    resolve(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TcpNics, NamesAndAddressesResolveWithTheirRates) {
  const auto nics = resolve("eth0, 10.2.0.5@10");
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_EQ(nics[0].name, "eth0");
  EXPECT_EQ(nics[0].ip, "10.1.0.5");  // its IPv4 address, not the IPv6 one listed with it
  EXPECT_EQ(nics[0].prefix, 24);
  EXPECT_EQ(nics[0].gbit, 25);  // from the interface's speed
  EXPECT_EQ(nics[1].name, "eth1");
  EXPECT_EQ(nics[1].ip, "10.2.0.5");
  EXPECT_EQ(nics[1].gbit, 10);                  // given
  EXPECT_EQ(resolve("eth0@2.5")[0].gbit, 2.5);  // a given rate wins over the reported one
  EXPECT_EQ(resolve("eth1")[0].gbit, 0);        // unknown
}

TEST(TcpNics, LoopbackAnswersForItsWholeNetwork) {
  const auto nics = resolve("127.0.0.1,127.0.0.2@1");
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_EQ(nics[1].name, "lo");
  EXPECT_EQ(nics[1].ip, "127.0.0.2");
  EXPECT_EQ(nics[1].prefix, 8);
}

TEST(TcpNics, AutoTakesEveryInterfaceThatIsUpWithIpv4ButLoopback) {
  const auto nics = resolve("auto");
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_EQ(nics[0].name, "eth0");
  EXPECT_EQ(nics[1].name, "eth1");
}

TEST(TcpNics, OffOrEmptyMeansNoList) {
  EXPECT_TRUE(resolve("").empty());
  EXPECT_TRUE(resolve("off").empty());
  EXPECT_TRUE(resolve("  ").empty());
}

TEST(TcpNics, BadInputIsRefusedNamingTheSettingAndTheEntry) {
  auto e = error_of("eth7");
  EXPECT_TRUE(contains(e, "HOLMES_TCP_NICS")) << e;
  EXPECT_TRUE(contains(e, "no network interface 'eth7'")) << e;
  EXPECT_TRUE(contains(e, "eth0, eth1, eth2, ib0, lo")) << e;  // what there is
  e = error_of("10.9.9.9");
  EXPECT_TRUE(contains(e, "'10.9.9.9' is not an address of this host")) << e;
  e = error_of("eth2");
  EXPECT_TRUE(contains(e, "interface 'eth2' (10.3.0.5) is down")) << e;
  e = error_of("ib0");
  EXPECT_TRUE(contains(e, "interface 'ib0' has no IPv4 address")) << e;
  e = error_of("eth0@fast");
  EXPECT_TRUE(contains(e, "'eth0@fast' has rate 'fast'")) << e;
  e = error_of("eth0@-1");
  EXPECT_TRUE(contains(e, "has rate '-1'")) << e;
  e = error_of("eth0@0");
  EXPECT_TRUE(contains(e, "has rate '0'")) << e;
  e = error_of("eth0,,eth1");
  EXPECT_TRUE(contains(e, "has an empty entry")) << e;
  e = error_of("eth0,10.1.0.5");
  EXPECT_TRUE(contains(e, "NIC eth0 (10.1.0.5) is given twice")) << e;
  e = error_of(
      "127.0.0.1,127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,"
      "127.0.0.8,127.0.0.9");
  EXPECT_TRUE(contains(e, "9 NICs, at most 8")) << e;
  const std::vector<InterfaceAddress> only_loopback = {{"lo", false, "127.0.0.1", 8, true, true}};
  try {
    resolve_tcp_nics("auto", "HOLMES_TCP_NICS", only_loopback, speed);
    ADD_FAILURE() << "auto without a NIC resolved";
  } catch (const Error& err) {
    EXPECT_TRUE(contains(err.what(), "HOLMES_TCP_NICS=auto")) << err.what();
  }
}

TEST(TcpCard, EncodesAndDecodesEveryNic) {
  TcpCard card;
  card.primary = {"10.1.0.5", 41000, 0, 0};
  card.nics = {{"10.1.0.5", 41000, 24, 25}, {"fd00::5", 41001, 64, 0}};
  const std::string text = card.encode();
  EXPECT_EQ(text, "10.1.0.5:41000;10.1.0.5:41000/24@25;[fd00::5]:41001/64@0");
  EXPECT_EQ(primary_of(text), "10.1.0.5:41000");
  const TcpCard back = TcpCard::decode(text, "address of rank 1");
  EXPECT_EQ(back.primary.host_port(), "10.1.0.5:41000");
  ASSERT_EQ(back.nics.size(), 2u);
  EXPECT_EQ(back.nics[1].ip, "fd00::5");
  EXPECT_EQ(back.nics[1].port, 41001);
  EXPECT_EQ(back.nics[1].prefix, 64);
  EXPECT_EQ(back.nics[0].gbit, 25);
  // A peer with one address publishes it alone.
  const TcpCard plain = TcpCard::decode("127.0.0.1:5000", "address of rank 2");
  EXPECT_TRUE(plain.nics.empty());
  EXPECT_EQ(primary_of("127.0.0.1:5000"), "127.0.0.1:5000");
}

TEST(TcpCard, MalformedCardsAreRefusedNamingThePeer) {
  for (const std::string bad :
       {"nohost", "10.1.0.5:41000;10.2.0.5:41001", "10.1.0.5:41000;10.2.0.5:41001/24@x",
        "name:41000", "10.1.0.5:41000;10.2.0.5:41001/999@1"}) {
    try {
      TcpCard::decode(bad, "address of rank 3");
      ADD_FAILURE() << "decoded " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
      EXPECT_TRUE(contains(e.what(), "address of rank 3")) << e.what();
    }
  }
}

TcpNic nic(const std::string& name, const std::string& ip, int prefix, double gbit) {
  return {name, ip, prefix, gbit};
}

TEST(TcpLanes, EachNicPairsWithThePeersNicOnItsRail) {
  const std::vector<TcpNic> mine = {nic("rail0", "10.1.0.5", 24, 1),
                                    nic("rail1", "10.2.0.5", 24, 1)};
  TcpCard peer;
  peer.primary = {"10.1.0.6", 5000, 0, 0};
  // Listed in the other order: pairing goes by network, not by position.
  peer.nics = {{"10.2.0.6", 5001, 24, 1}, {"10.1.0.6", 5000, 24, 1}};
  const auto lanes = plan_lanes(mine, peer);
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[0].nic, 0);
  EXPECT_EQ(lanes[0].local_ip, "10.1.0.5");
  EXPECT_EQ(lanes[0].remote.host_port(), "10.1.0.6:5000");
  EXPECT_EQ(lanes[1].nic, 1);
  EXPECT_EQ(lanes[1].remote.host_port(), "10.2.0.6:5001");
  EXPECT_EQ(lanes[0].weight, 1);
  EXPECT_EQ(describe(lanes[1], mine), "rail1 -> 10.2.0.6:5001 (weight 1)");
}

TEST(TcpLanes, WeightsAreTheSlowerEndsRateAndUnknownRatesTakeTheMean) {
  const std::vector<TcpNic> mine = {nic("a", "10.1.0.5", 24, 10), nic("b", "10.2.0.5", 24, 0),
                                    nic("c", "10.3.0.5", 24, 0)};
  TcpCard peer;
  peer.primary = {"10.1.0.6", 5000, 0, 0};
  peer.nics = {{"10.1.0.6", 5000, 24, 4}, {"10.2.0.6", 5001, 24, 2}, {"10.3.0.6", 5002, 24, 0}};
  const auto lanes = plan_lanes(mine, peer);
  ASSERT_EQ(lanes.size(), 3u);
  EXPECT_EQ(lanes[0].weight, 4);  // min(10, 4)
  EXPECT_EQ(lanes[1].weight, 2);  // the peer's, ours unknown
  EXPECT_EQ(lanes[2].weight, 3);  // neither known: the mean of the others
}

TEST(TcpLanes, AHostWithOneNicIsReachedOverItsRailOnly) {
  const std::vector<TcpNic> mine = {nic("rail0", "10.1.0.5", 24, 1),
                                    nic("rail1", "10.2.0.5", 24, 1)};
  TcpCard one;  // a peer without a NIC list: its listen address on rail 0
  one.primary = {"10.1.0.7", 6000, 0, 0};
  const auto lanes = plan_lanes(mine, one);
  ASSERT_EQ(lanes.size(), 1u);
  EXPECT_EQ(lanes[0].nic, 0);
  EXPECT_EQ(lanes[0].remote.host_port(), "10.1.0.7:6000");
  // And it sends to us over its one address, unbound.
  TcpCard two;
  two.primary = {"10.1.0.5", 5000, 0, 0};
  two.nics = {{"10.1.0.5", 5000, 24, 1}, {"10.2.0.5", 5001, 24, 1}};
  const auto back = plan_lanes({}, two);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].nic, -1);
  EXPECT_EQ(back[0].remote.host_port(), "10.1.0.5:5000");
}

TEST(TcpLanes, NoSharedNetworkMeansOneUnboundLaneToTheListenAddress) {
  const std::vector<TcpNic> mine = {nic("rail0", "10.1.0.5", 24, 1),
                                    nic("rail1", "10.2.0.5", 24, 1)};
  TcpCard routed;
  routed.primary = {"192.168.7.1", 7000, 0, 0};
  routed.nics = {{"192.168.7.1", 7000, 24, 1}, {"192.168.8.1", 7001, 24, 1}};
  const auto lanes = plan_lanes(mine, routed);
  ASSERT_EQ(lanes.size(), 1u);
  EXPECT_EQ(lanes[0].nic, -1);
  EXPECT_TRUE(lanes[0].local_ip.empty());
  EXPECT_EQ(lanes[0].remote.host_port(), "192.168.7.1:7000");
}

TEST(TcpLanes, NicsOnOneNetworkSpreadOverThePeersNics) {
  // Loopback aliases: every address in 127.0.0.0/8.
  const std::vector<TcpNic> mine = {nic("lo", "127.0.0.1", 8, 0), nic("lo", "127.0.0.2", 8, 0)};
  TcpCard peer;
  peer.primary = {"127.0.0.1", 5000, 0, 0};
  peer.nics = {{"127.0.0.1", 5000, 8, 0}, {"127.0.0.2", 5001, 8, 0}};
  const auto lanes = plan_lanes(mine, peer);
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[0].remote.port, 5000);
  EXPECT_EQ(lanes[1].remote.port, 5001);
  EXPECT_EQ(lanes[0].weight, 1);  // no rate known anywhere
}

TEST(NetInterfaces, SubnetsCompareTheirPrefixOnly) {
  EXPECT_TRUE(same_subnet("10.1.0.5", "10.1.0.200", 24));
  EXPECT_FALSE(same_subnet("10.1.0.5", "10.1.1.5", 24));
  EXPECT_TRUE(same_subnet("10.1.0.5", "10.1.1.5", 16));
  EXPECT_TRUE(same_subnet("10.1.0.5", "10.1.1.5", 23));
  EXPECT_FALSE(same_subnet("10.1.0.5", "10.1.2.5", 23));
  EXPECT_TRUE(same_subnet("fd00::5", "fd00::6", 64));
  EXPECT_FALSE(same_subnet("fd00::5", "10.1.0.5", 0));  // families differ
  EXPECT_FALSE(same_subnet("eth0", "eth0", 0));         // not addresses
  EXPECT_EQ(ipv4_network("10.1.0.5", 24), "10.1.0.0/24");
  EXPECT_EQ(ipv4_network("10.1.3.5", 22), "10.1.0.0/22");
  EXPECT_EQ(ipv4_network("fd00::5", 64), "");
}

TEST(NetInterfaces, ThisHostHasLoopback) {
  std::string error;
  const auto all = interface_addresses(&error);
  ASSERT_TRUE(error.empty()) << error;
  bool loopback = false;
  for (const auto& a : all) loopback |= a.loopback && a.address == "127.0.0.1" && a.prefix == 8;
  EXPECT_TRUE(loopback);
}

}  // namespace
}  // namespace holmes::tcp
