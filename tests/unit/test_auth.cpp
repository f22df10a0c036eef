// Tests of src/bootstrap/auth.hpp: the job-token challenge-response. The MAC must depend on every
// input it is meant to bind (token, role, channel, both nonces, context), otherwise a proof could
// be replayed across roles, channels, connections or communicators; and the wire messages must
// reject anything that is not a challenge of this version for the expected channel.
#include "bootstrap/auth.hpp"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace holmes::auth {
namespace {

Nonce nonce_filled(std::uint8_t start) {
  Nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::uint8_t>(start + i);
  return n;
}

// HMAC-SHA256 over the message layout documented in auth.hpp, computed directly with OpenSSL:
// role byte | channel (u16 little-endian) | server nonce | client nonce | context.
Mac reference_mac(const std::string& token, std::uint8_t role, std::uint16_t channel,
                  const Nonce& server_nonce, const Nonce& client_nonce,
                  const std::string& context) {
  std::vector<std::uint8_t> message;
  message.push_back(role);
  message.push_back(static_cast<std::uint8_t>(channel & 0xff));
  message.push_back(static_cast<std::uint8_t>(channel >> 8));
  message.insert(message.end(), server_nonce.begin(), server_nonce.end());
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  message.insert(message.end(), context.begin(), context.end());
  Mac mac{};
  unsigned int length = 0;
  const unsigned char empty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&empty) : token.data();
  HMAC(EVP_sha256(), key, static_cast<int>(token.size()), message.data(), message.size(),
       mac.data(), &length);
  EXPECT_EQ(length, kMacBytes);
  return mac;
}

class AuthMac : public ::testing::Test {
 protected:
  const Nonce server_nonce_ = nonce_filled(0x10);
  const Nonce client_nonce_ = nonce_filled(0x80);

  Mac base() const {
    return compute_mac("token", Role::kClient, Channel::kStore, server_nonce_, client_nonce_,
                       "store");
  }
};

TEST_F(AuthMac, IsHmacSha256OfTheDocumentedMessage) {
  EXPECT_EQ(base(), reference_mac("token", 'c', 1, server_nonce_, client_nonce_, "store"));
  EXPECT_EQ(
      compute_mac("t2", Role::kServer, Channel::kData, client_nonce_, server_nonce_, "comm 7"),
      reference_mac("t2", 's', 2, client_nonce_, server_nonce_, "comm 7"));
  // An empty token is still a key (jobs without HOLMES_TOKEN run the same protocol).
  EXPECT_EQ(compute_mac("", Role::kClient, Channel::kStore, server_nonce_, client_nonce_, ""),
            reference_mac("", 'c', 1, server_nonce_, client_nonce_, ""));
}

TEST_F(AuthMac, IsDeterministic) { EXPECT_EQ(base(), base()); }

TEST_F(AuthMac, DependsOnTheToken) {
  EXPECT_NE(base(), compute_mac("tokem", Role::kClient, Channel::kStore, server_nonce_,
                                client_nonce_, "store"));
  EXPECT_NE(base(),
            compute_mac("", Role::kClient, Channel::kStore, server_nonce_, client_nonce_, "store"));
  EXPECT_NE(base(), compute_mac("token-longer", Role::kClient, Channel::kStore, server_nonce_,
                                client_nonce_, "store"));
}

TEST_F(AuthMac, DependsOnTheRole) {
  // Otherwise a server could answer the client's own proof back to it.
  EXPECT_NE(base(), compute_mac("token", Role::kServer, Channel::kStore, server_nonce_,
                                client_nonce_, "store"));
}

TEST_F(AuthMac, DependsOnTheChannel) {
  EXPECT_NE(base(), compute_mac("token", Role::kClient, Channel::kData, server_nonce_,
                                client_nonce_, "store"));
}

TEST_F(AuthMac, DependsOnEachNonceAndTheirOrder) {
  for (std::size_t i : {std::size_t{0}, kNonceBytes / 2, kNonceBytes - 1}) {
    Nonce changed = server_nonce_;
    changed[i] ^= 0x01;
    EXPECT_NE(base(),
              compute_mac("token", Role::kClient, Channel::kStore, changed, client_nonce_, "store"))
        << "server nonce byte " << i;
    changed = client_nonce_;
    changed[i] ^= 0x01;
    EXPECT_NE(base(),
              compute_mac("token", Role::kClient, Channel::kStore, server_nonce_, changed, "store"))
        << "client nonce byte " << i;
  }
  EXPECT_NE(base(), compute_mac("token", Role::kClient, Channel::kStore, client_nonce_,
                                server_nonce_, "store"));
}

TEST_F(AuthMac, DependsOnTheContext) {
  EXPECT_NE(base(), compute_mac("token", Role::kClient, Channel::kStore, server_nonce_,
                                client_nonce_, "data"));
  EXPECT_NE(base(),
            compute_mac("token", Role::kClient, Channel::kStore, server_nonce_, client_nonce_, ""));
  EXPECT_NE(base(), compute_mac("token", Role::kClient, Channel::kStore, server_nonce_,
                                client_nonce_, "store2"));
}

TEST(AuthMacsEqual, ComparesEveryByte) {
  Mac a{};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 7);
  EXPECT_TRUE(macs_equal(a, a));
  for (std::size_t i : {std::size_t{0}, std::size_t{15}, kMacBytes - 1}) {
    Mac b = a;
    b[i] ^= 0x80;
    EXPECT_FALSE(macs_equal(a, b)) << "byte " << i;
  }
}

TEST(AuthChallenge, RoundTripAndLayout) {
  Challenge c;
  c.channel = Channel::kData;
  c.server_nonce = nonce_filled(1);
  const auto bytes = c.encode();
  // Magic 0x484d4155 little-endian, version 1, channel 2, then the nonce.
  EXPECT_EQ(bytes[0], 0x55);
  EXPECT_EQ(bytes[1], 0x41);
  EXPECT_EQ(bytes[2], 0x4d);
  EXPECT_EQ(bytes[3], 0x48);
  EXPECT_EQ(bytes[4], 1);
  EXPECT_EQ(bytes[5], 0);
  EXPECT_EQ(bytes[6], 2);
  EXPECT_EQ(bytes[7], 0);
  EXPECT_TRUE(std::equal(c.server_nonce.begin(), c.server_nonce.end(), bytes.begin() + 8));

  Challenge out;
  ASSERT_TRUE(Challenge::decode(bytes, Channel::kData, out));
  EXPECT_EQ(out.channel, Channel::kData);
  EXPECT_EQ(out.server_nonce, c.server_nonce);
}

TEST(AuthChallenge, DecodeRejectsWrongMagic) {
  Challenge c;
  const auto good = c.encode();
  for (std::size_t i = 0; i < 4; ++i) {
    auto bytes = good;
    bytes[i] ^= 0xff;
    Challenge out;
    EXPECT_FALSE(Challenge::decode(bytes, Channel::kStore, out)) << "magic byte " << i;
  }
}

TEST(AuthChallenge, DecodeRejectsWrongVersion) {
  Challenge c;
  for (std::uint16_t version : {0, 2, 0x100, 0xffff}) {
    auto bytes = c.encode();
    bytes[4] = static_cast<std::uint8_t>(version);
    bytes[5] = static_cast<std::uint8_t>(version >> 8);
    Challenge out;
    EXPECT_FALSE(Challenge::decode(bytes, Channel::kStore, out)) << "version " << version;
  }
}

TEST(AuthChallenge, DecodeRejectsTheOtherChannel) {
  Challenge store;
  store.channel = Channel::kStore;
  Challenge data;
  data.channel = Channel::kData;
  Challenge out;
  EXPECT_FALSE(Challenge::decode(store.encode(), Channel::kData, out));
  EXPECT_FALSE(Challenge::decode(data.encode(), Channel::kStore, out));
  auto unknown = store.encode();
  unknown[6] = 3;
  EXPECT_FALSE(Challenge::decode(unknown, Channel::kStore, out));
  unknown[6] = 1;
  unknown[7] = 1;  // 0x0101: the high byte of the channel counts too
  EXPECT_FALSE(Challenge::decode(unknown, Channel::kStore, out));
}

TEST(AuthProof, RoundTrip) {
  Proof p;
  p.client_nonce = nonce_filled(3);
  for (std::size_t i = 0; i < p.mac.size(); ++i) p.mac[i] = static_cast<std::uint8_t>(0xff - i);
  const auto bytes = p.encode();
  EXPECT_TRUE(std::equal(p.client_nonce.begin(), p.client_nonce.end(), bytes.begin()));
  EXPECT_TRUE(std::equal(p.mac.begin(), p.mac.end(), bytes.begin() + kNonceBytes));
  const Proof out = Proof::decode(bytes);
  EXPECT_EQ(out.client_nonce, p.client_nonce);
  EXPECT_EQ(out.mac, p.mac);
}

TEST(AuthVerdict, RoundTripAndOnlyOneMeansAccepted) {
  Verdict v;
  v.accepted = true;
  v.mac[0] = 9;
  v.mac[kMacBytes - 1] = 7;
  auto bytes = v.encode();
  EXPECT_EQ(bytes[0], 1);
  Verdict out = Verdict::decode(bytes);
  EXPECT_TRUE(out.accepted);
  EXPECT_EQ(out.mac, v.mac);

  Verdict refused;
  EXPECT_EQ(refused.encode()[0], 0);
  EXPECT_FALSE(Verdict::decode(refused.encode()).accepted);
  // A corrupted flag byte is not an acceptance.
  for (std::uint8_t flag : {2, 0x81, 0xff}) {
    bytes[0] = flag;
    EXPECT_FALSE(Verdict::decode(bytes).accepted) << static_cast<int>(flag);
  }
}

TEST(AuthNonce, RandomNoncesDiffer) {
  std::set<Nonce> seen;
  const Nonce zero{};
  for (int i = 0; i < 1000; ++i) {
    const Nonce n = random_nonce();
    EXPECT_NE(n, zero);
    EXPECT_TRUE(seen.insert(n).second) << "nonce repeated after " << i << " draws";
  }
}

}  // namespace
}  // namespace holmes::auth
