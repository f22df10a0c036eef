#include "bootstrap/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <vector>

#include "core/bytes.hpp"
#include "core/status.hpp"

namespace holmes::auth {

std::array<std::uint8_t, Challenge::kWireBytes> Challenge::encode() const {
  std::array<std::uint8_t, kWireBytes> out{};
  store_le<std::uint32_t>(out.data(), kChallengeMagic);
  store_le<std::uint16_t>(out.data() + 4, kVersion);
  store_le<std::uint16_t>(out.data() + 6, static_cast<std::uint16_t>(channel));
  std::copy(server_nonce.begin(), server_nonce.end(), out.begin() + 8);
  return out;
}

bool Challenge::decode(std::span<const std::uint8_t, kWireBytes> bytes, Channel expected,
                       Challenge& out) {
  if (load_le<std::uint32_t>(bytes.data()) != kChallengeMagic) return false;
  if (load_le<std::uint16_t>(bytes.data() + 4) != kVersion) return false;
  if (load_le<std::uint16_t>(bytes.data() + 6) != static_cast<std::uint16_t>(expected))
    return false;
  out.channel = expected;
  std::copy(bytes.begin() + 8, bytes.end(), out.server_nonce.begin());
  return true;
}

std::array<std::uint8_t, Proof::kWireBytes> Proof::encode() const {
  std::array<std::uint8_t, kWireBytes> out{};
  std::copy(client_nonce.begin(), client_nonce.end(), out.begin());
  std::copy(mac.begin(), mac.end(), out.begin() + kNonceBytes);
  return out;
}

Proof Proof::decode(std::span<const std::uint8_t, kWireBytes> bytes) {
  Proof p;
  std::copy(bytes.begin(), bytes.begin() + kNonceBytes, p.client_nonce.begin());
  std::copy(bytes.begin() + kNonceBytes, bytes.end(), p.mac.begin());
  return p;
}

std::array<std::uint8_t, Verdict::kWireBytes> Verdict::encode() const {
  std::array<std::uint8_t, kWireBytes> out{};
  out[0] = accepted ? 1 : 0;
  std::copy(mac.begin(), mac.end(), out.begin() + 1);
  return out;
}

Verdict Verdict::decode(std::span<const std::uint8_t, kWireBytes> bytes) {
  Verdict v;
  v.accepted = bytes[0] == 1;
  std::copy(bytes.begin() + 1, bytes.end(), v.mac.begin());
  return v;
}

void init_crypto() {
  // Some option must be given: OPENSSL_init_crypto(0, ...) returns at once and initialises
  // nothing. Loading the configuration is what OpenSSL's first RAND_bytes would do anyway.
  if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr) != 1) {
    fail(HM_ERR_INTERNAL, "OpenSSL failed to initialise");
  }
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    fail(HM_ERR_INTERNAL, "OpenSSL RAND_bytes failed to produce a nonce");
  }
  return n;
}

Mac compute_mac(std::string_view token, Role role, Channel channel, const Nonce& server_nonce,
                const Nonce& client_nonce, std::string_view context) {
  std::vector<std::uint8_t> message;
  message.reserve(1 + 2 + 2 * kNonceBytes + context.size());
  message.push_back(static_cast<std::uint8_t>(role));
  message.push_back(static_cast<std::uint8_t>(static_cast<std::uint16_t>(channel)));
  message.push_back(static_cast<std::uint8_t>(static_cast<std::uint16_t>(channel) >> 8));
  message.insert(message.end(), server_nonce.begin(), server_nonce.end());
  message.insert(message.end(), client_nonce.begin(), client_nonce.end());
  message.insert(message.end(), context.begin(), context.end());
  Mac mac{};
  unsigned int length = 0;
  // An empty token is a valid (if weak) key: jobs without HOLMES_TOKEN still run the protocol.
  static const unsigned char kEmptyKey = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmptyKey) : token.data();
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), message.data(), message.size(),
           mac.data(), &length) == nullptr ||
      length != kMacBytes) {
    fail(HM_ERR_INTERNAL, "OpenSSL HMAC-SHA256 failed");
  }
  return mac;
}

bool macs_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace holmes::auth
