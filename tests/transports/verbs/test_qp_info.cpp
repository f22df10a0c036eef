// The queue pair description exchanged in the handshake (qp_info.hpp) and the handshake's
// framing (handshake.hpp): round trips, and refusal of malformed or hostile bytes with a message
// naming the bad field, so nothing a peer sends reaches ibverbs unchecked.
#include "transports/verbs/qp_info.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/status.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {
namespace {

QpInfo infiniband() {
  QpInfo info;
  info.link_layer = LinkLayer::kInfiniBand;
  info.gid_type = GidType::kIbOrRoceV1;
  info.mtu = 5;
  info.lid = 0x1a;
  info.gid = *parse_gid("fe80:0000:0000:0000:0002:c903:0031:7b11");
  info.qpn = 0x1234;
  info.psn = 0xabcdef;
  info.recv_slots = 32;
  info.recv_slot_bytes = 65536;
  info.device = "mlx5_0:1";
  return info;
}

QpInfo roce() {
  QpInfo info = infiniband();
  info.link_layer = LinkLayer::kEthernet;
  info.gid_type = GidType::kRoceV2;
  info.mtu = 3;
  info.lid = 0;
  info.gid = *parse_gid("0000:0000:0000:0000:0000:ffff:0a01:0203");
  info.device = "mlx5_2:1";
  return info;
}

std::string refusal(const std::vector<std::uint8_t>& bytes) {
  try {
    QpInfo::decode(bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_TRANSPORT);
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

std::string refusal(const QpInfo& info) { return refusal(info.encode()); }

const std::string kPrefix = "malformed queue pair description: ";

TEST(VerbsQpInfo, RoundTrip) {
  for (const QpInfo& info : {infiniband(), roce()}) {
    const auto bytes = info.encode();
    EXPECT_LE(bytes.size(), kMaxQpInfoBytes);
    EXPECT_EQ(QpInfo::decode(bytes), info);
  }
  QpInfo longest = roce();
  longest.device = std::string(kMaxDeviceNameBytes, 'd');
  longest.qpn = 0xffffff;
  longest.psn = 0xffffff;
  longest.recv_slots = kMaxSlots;
  longest.recv_slot_bytes = kMaxSlotBytes;
  EXPECT_EQ(longest.encode().size(), kMaxQpInfoBytes - 16);
  EXPECT_EQ(QpInfo::decode(longest.encode()), longest);
}

TEST(VerbsQpInfo, RefusesFieldsOutOfRange) {
  auto info = infiniband();
  info.mtu = 0;
  EXPECT_EQ(refusal(info), kPrefix + "MTU code 0 (valid: 1..5)");
  info = infiniband();
  info.mtu = 6;
  EXPECT_EQ(refusal(info), kPrefix + "MTU code 6 (valid: 1..5)");
  info = infiniband();
  info.qpn = 0x1000000;
  EXPECT_EQ(refusal(info), kPrefix + "queue pair number 16777216");
  info.qpn = 1;  // QP1 is the management queue pair
  EXPECT_EQ(refusal(info), kPrefix + "queue pair number 1");
  info = infiniband();
  info.psn = 0x1000000;
  EXPECT_EQ(refusal(info), kPrefix + "packet sequence number 16777216");
  info = infiniband();
  info.recv_slots = 3;
  EXPECT_EQ(refusal(info), kPrefix + "3 receive slots (valid: 4..4096)");
  info.recv_slots = kMaxSlots + 1;
  EXPECT_EQ(refusal(info), kPrefix + "4097 receive slots (valid: 4..4096)");
  info = infiniband();
  info.recv_slot_bytes = 63;
  EXPECT_EQ(refusal(info), kPrefix + "63-byte receive slots (valid: 64..16777216)");
  info.recv_slot_bytes = kMaxSlotBytes + 1;
  EXPECT_EQ(refusal(info), kPrefix + "16777217-byte receive slots (valid: 64..16777216)");
  info = infiniband();
  info.lid = 0;
  EXPECT_EQ(refusal(info), kPrefix + "LID 0x0 is not a unicast LID");
  info.lid = 0xc000;  // multicast
  EXPECT_EQ(refusal(info), kPrefix + "LID 0xc000 is not a unicast LID");
  info = roce();
  info.gid = {};
  EXPECT_EQ(refusal(info), kPrefix + "zero GID on RoCE");
  info = roce();
  info.device = "";
  EXPECT_EQ(refusal(info), kPrefix + "empty device name");
  info.device = "mlx5\n0";
  EXPECT_EQ(refusal(info), kPrefix + "unprintable device name");
  info.device = std::string(kMaxDeviceNameBytes + 1, 'd');
  EXPECT_EQ(refusal(info), kPrefix + "truncated, or a device name longer than 64 bytes");
}

TEST(VerbsQpInfo, RefusesMalformedBytes) {
  auto bytes = infiniband().encode();
  auto bad = bytes;
  bad[0] ^= 1;
  EXPECT_EQ(refusal(bad), kPrefix + "not a Holmes verbs queue pair description");
  bad = bytes;
  bad[4] = 2;  // version
  EXPECT_EQ(refusal(bad), kPrefix + "version 2 (this build speaks 1)");
  bad = bytes;
  bad[6] = 3;  // link layer
  EXPECT_EQ(refusal(bad), kPrefix + "link layer 3");
  bad = bytes;
  bad[7] = 7;  // GID type
  EXPECT_EQ(refusal(bad), kPrefix + "GID type 7");
  bad = bytes;
  bad[9] = 1;  // reserved
  EXPECT_EQ(refusal(bad), kPrefix + "reserved byte set");
  bad = bytes;
  bad.push_back(0);
  EXPECT_EQ(refusal(bad), kPrefix + "trailing bytes");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_THROW(QpInfo::decode(truncated), Error) << n;
  }
  EXPECT_EQ(refusal(std::vector<std::uint8_t>(kMaxQpInfoBytes + 1, 0)),
            kPrefix + "129 bytes is too long");
}

// Hostile bytes: random mutations of a valid description either decode to something within
// every bound or throw holmes::Error; nothing else happens.
TEST(VerbsQpInfo, RandomMutationsAreRefusedOrInBounds) {
  std::mt19937 random(7);
  const auto valid = roce().encode();
  for (int i = 0; i < 20000; ++i) {
    auto bytes = valid;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[random() % bytes.size()] = static_cast<std::uint8_t>(random());
    }
    if (random() % 8 == 0) bytes.resize(random() % (bytes.size() + 8), 0x41);
    try {
      const auto info = QpInfo::decode(bytes);
      EXPECT_GE(info.mtu, 1);
      EXPECT_LE(info.mtu, 5);
      EXPECT_LE(info.qpn, 0xffffffu);
      EXPECT_LE(info.psn, 0xffffffu);
      EXPECT_GE(info.recv_slots, 4u);
      EXPECT_LE(info.recv_slots, kMaxSlots);
      EXPECT_GE(info.recv_slot_bytes, kMinSlotBytes);
      EXPECT_LE(info.recv_slot_bytes, kMaxSlotBytes);
      EXPECT_LE(info.device.size(), kMaxDeviceNameBytes);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_TRANSPORT);
    }
  }
}

TEST(VerbsQpInfo, Compatibility) {
  EXPECT_EQ(incompatibility(infiniband(), infiniband()), "");
  EXPECT_EQ(incompatibility(roce(), roce()), "");
  EXPECT_EQ(incompatibility(infiniband(), roce()),
            "mlx5_0:1 is InfiniBand but mlx5_2:1 is Ethernet");
  auto v1 = roce();
  v1.gid_type = GidType::kIbOrRoceV1;
  v1.device = "mlx4_0:1";
  EXPECT_EQ(incompatibility(roce(), v1),
            "mlx5_2:1 uses GID type RoCE v2 but mlx4_0:1 uses IB/RoCE v1 (set "
            "HOLMES_IB_GID_INDEX to GIDs of the same type)");
  auto unknown = roce();
  unknown.gid_type = GidType::kUnknown;  // a kernel without GID types: cannot tell, allowed
  EXPECT_EQ(incompatibility(roce(), unknown), "");
}

// ---- handshake framing -----------------------------------------------------------------------

TEST(VerbsHandshake, HelloRoundTrip) {
  auth::Proof proof;
  proof.client_nonce.fill(3);
  proof.mac.fill(9);
  const auto info = roce().encode();
  const auto hello = encode_hello(proof, 17, info);
  ASSERT_EQ(hello.size(), kHelloPrefixBytes + info.size());
  const auto prefix = decode_hello_prefix(
      std::span<const std::uint8_t, kHelloPrefixBytes>(hello.data(), kHelloPrefixBytes));
  EXPECT_EQ(prefix.rank, 17u);
  EXPECT_EQ(prefix.info_bytes, info.size());
  EXPECT_EQ(prefix.proof.client_nonce, proof.client_nonce);
  EXPECT_EQ(prefix.proof.mac, proof.mac);
  const std::vector<std::uint8_t> rest(hello.begin() + kHelloPrefixBytes, hello.end());
  EXPECT_EQ(QpInfo::decode(rest), roce());
}

TEST(VerbsHandshake, HelloPrefixRefusals) {
  auth::Proof proof;
  auto hello = encode_hello(proof, 1, roce().encode());
  auto decode = [](const std::vector<std::uint8_t>& bytes) {
    return decode_hello_prefix(
        std::span<const std::uint8_t, kHelloPrefixBytes>(bytes.data(), kHelloPrefixBytes));
  };
  auto bad = hello;
  bad[auth::Proof::kWireBytes] ^= 0xff;
  EXPECT_THROW(decode(bad), Error);
  for (std::uint32_t length : {0u, static_cast<std::uint32_t>(kMaxQpInfoBytes + 1), 0xffffffffu}) {
    bad = hello;
    for (int i = 0; i < 4; ++i) {
      bad[auth::Proof::kWireBytes + 8 + static_cast<std::size_t>(i)] =
          static_cast<std::uint8_t>(length >> (8 * i));
    }
    try {
      decode(bad);
      ADD_FAILURE() << length;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_TRANSPORT);
      EXPECT_NE(std::string(e.what()).find("queue pair description (at most 128)"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(VerbsHandshake, ReplyPrefix) {
  auth::Verdict verdict;
  verdict.accepted = true;
  const auto info = infiniband().encode();
  const auto reply = encode_reply(verdict, HM_SUCCESS, info);
  ASSERT_EQ(reply.size(), auth::Verdict::kWireBytes + kReplyPrefixBytes + info.size());
  auto prefix_of = [](const std::vector<std::uint8_t>& bytes) {
    return decode_reply_prefix(std::span<const std::uint8_t, kReplyPrefixBytes>(
        bytes.data() + auth::Verdict::kWireBytes, kReplyPrefixBytes));
  };
  const auto ok = prefix_of(reply);
  EXPECT_EQ(ok.status, HM_SUCCESS);
  EXPECT_EQ(ok.length, info.size());
  const std::string why = "cannot register memory";
  const auto refused = prefix_of(encode_reply(verdict, HM_ERR_OUT_OF_MEMORY,
                                              std::vector<std::uint8_t>(why.begin(), why.end())));
  EXPECT_EQ(refused.status, HM_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(refused.length, why.size());
  // A status that does not exist, an empty success, and lengths beyond the limits.
  EXPECT_THROW(prefix_of(encode_reply(verdict, static_cast<hm_status_t>(99), {})), Error);
  EXPECT_THROW(prefix_of(encode_reply(verdict, HM_SUCCESS, {})), Error);
  EXPECT_THROW(
      prefix_of(encode_reply(verdict, HM_SUCCESS, std::vector<std::uint8_t>(kMaxQpInfoBytes + 1))),
      Error);
  EXPECT_THROW(prefix_of(encode_reply(verdict, HM_ERR_TRANSPORT,
                                      std::vector<std::uint8_t>(kMaxReplyTextBytes + 1))),
               Error);
}

TEST(VerbsHandshake, ContextNamesTransportCommunicatorAndDirection) {
  EXPECT_EQ(handshake_context("world-3", 2, 5), "verbs|world-3|2->5");
  EXPECT_NE(handshake_context("c", 1, 2), handshake_context("c", 2, 1));
}

}  // namespace
}  // namespace holmes::verbs
