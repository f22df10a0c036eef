// The TCP handshake that sets up one queue pair. The rank that will send data dials the peer's
// handshake listener (the transport's listen_address) and both prove the job token
// (bootstrap/auth.hpp, bound to the communicator and both ranks) before anything is trusted:
//   server -> client  Challenge
//   client -> server  Hello  = Proof | u32 magic "HMVH" | u32 rank | u32 n | n bytes QpInfo
//   server -> client  Verdict; when accepted:  u32 status | u32 n | n bytes
//                     (status 0: the server's QpInfo; otherwise why it cannot set up its end)
// Then the socket closes: everything after travels over the queue pair.
#pragma once

#include <holmes/holmes.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"

namespace holmes::verbs {

constexpr std::uint32_t kHelloMagic = 0x4856'4d48;  // "HMVH"
constexpr std::size_t kHelloPrefixBytes = auth::Proof::kWireBytes + 12;
constexpr std::size_t kReplyPrefixBytes = 8;  // after the verdict
constexpr std::size_t kMaxReplyTextBytes = 1024;

struct HelloPrefix {
  auth::Proof proof;
  std::uint32_t rank = 0;
  std::uint32_t info_bytes = 0;
};

std::vector<std::uint8_t> encode_hello(const auth::Proof& proof, std::uint32_t rank,
                                       std::span<const std::uint8_t> info);
// Throws HM_ERR_TRANSPORT when the magic is wrong or the announced QpInfo length is impossible.
HelloPrefix decode_hello_prefix(std::span<const std::uint8_t, kHelloPrefixBytes> bytes);

struct ReplyPrefix {
  hm_status_t status = HM_SUCCESS;
  std::uint32_t length = 0;
};

// An accepted verdict followed by the status and its payload (QpInfo bytes or a reason).
std::vector<std::uint8_t> encode_reply(const auth::Verdict& verdict, hm_status_t status,
                                       std::span<const std::uint8_t> payload);
// Throws HM_ERR_TRANSPORT for an unknown status or a length beyond what that status allows.
ReplyPrefix decode_reply_prefix(std::span<const std::uint8_t, kReplyPrefixBytes> bytes);

// What the proofs of one queue pair are bound to: this transport, the communicator, and the
// direction (the dialing rank sends data to the listening one).
std::string handshake_context(const std::string& communicator, int client_rank, int server_rank);

}  // namespace holmes::verbs
