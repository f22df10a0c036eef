// Job-token authentication shared by the store and the data plane.
//
// Challenge-response, mutual, with HMAC-SHA256 keyed by the token; the token itself never
// crosses the wire:
//   server -> client  Challenge  {magic, version, channel, server nonce}
//   client -> server  Proof      {client nonce, HMAC(token, "client" | channel | nonces | context)}
//   server -> client  Verdict    {accepted?, HMAC(token, "server" | channel | nonces | context)}
// The client checks the server's MAC too, so a rank never talks to a store or peer of another
// job. `context` binds the proof to what the connection is for (e.g. the communicator).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace holmes::auth {

constexpr std::size_t kNonceBytes = 32;
constexpr std::size_t kMacBytes = 32;
using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

// What the connection is for; part of every MAC so a proof for one cannot be replayed on the
// other.
enum class Channel : std::uint16_t { kStore = 1, kData = 2 };

constexpr std::uint32_t kChallengeMagic = 0x484d4155;  // "HMAU"
constexpr std::uint16_t kVersion = 1;

struct Challenge {
  Channel channel = Channel::kStore;
  Nonce server_nonce{};
  static constexpr std::size_t kWireBytes = 4 + 2 + 2 + kNonceBytes;
  std::array<std::uint8_t, kWireBytes> encode() const;
  // False when the bytes are not a challenge of this version for `expected` channel.
  static bool decode(std::span<const std::uint8_t, kWireBytes> bytes, Channel expected,
                     Challenge& out);
};

struct Proof {
  Nonce client_nonce{};
  Mac mac{};
  static constexpr std::size_t kWireBytes = kNonceBytes + kMacBytes;
  std::array<std::uint8_t, kWireBytes> encode() const;
  static Proof decode(std::span<const std::uint8_t, kWireBytes> bytes);
};

struct Verdict {
  bool accepted = false;
  Mac mac{};  // the server's proof; zero when refused
  static constexpr std::size_t kWireBytes = 1 + kMacBytes;
  std::array<std::uint8_t, kWireBytes> encode() const;
  static Verdict decode(std::span<const std::uint8_t, kWireBytes> bytes);
};

Nonce random_nonce();

// Initialises OpenSSL now (idempotent). OpenSSL registers its exit-time cleanup when it is first
// initialised, and exit handlers run in reverse order of registration: an object that lives
// until exit and owns threads that use OpenSSL calls this while it is being constructed, so that
// OpenSSL is cleaned up only after that object's destructor has stopped those threads.
void init_crypto();

enum class Role : std::uint8_t { kClient = 'c', kServer = 's' };

// HMAC-SHA256(token, role | channel | server nonce | client nonce | context).
Mac compute_mac(std::string_view token, Role role, Channel channel, const Nonce& server_nonce,
                const Nonce& client_nonce, std::string_view context);

// Constant-time comparison.
bool macs_equal(const Mac& a, const Mac& b);

}  // namespace holmes::auth
