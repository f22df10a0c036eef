// The header every ucx active message carries (UCP delivers it next to the payload):
//   u64 cookie | u32 sender rank | u16 kind | u16 version | u64 tag | u32 signature | u32 zero |
//   u64 total
// little-endian, 40 bytes. One active message is one whole Holmes message (UCP moves large ones
// by rendezvous), so the payload length must equal `total`.
//
// The cookie is derived from the job token and the communicator's context: a message from
// another job or another communicator that reaches this worker is dropped, never matched.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace holmes::ucx {

constexpr std::size_t kAmHeaderBytes = 40;
constexpr std::uint16_t kAmVersion = 1;
// Largest rank a header may name (the communicator's size is checked as well once known).
constexpr std::uint32_t kMaxRank = 1u << 24;

enum class AmKind : std::uint16_t {
  kData = 1,     // a tagged message
  kGoodbye = 2,  // the sender closes: it will send nothing more
};

struct AmHeader {
  std::uint64_t cookie = 0;
  std::uint32_t sender = 0;
  AmKind kind = AmKind::kData;
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::uint64_t total = 0;

  std::array<std::uint8_t, kAmHeaderBytes> encode() const;
  // nullopt unless the bytes are a header of this version with a known kind and a sane rank.
  static std::optional<AmHeader> decode(std::span<const std::uint8_t> bytes);
};

// The cookie of a communicator: the first 8 bytes of its job token proof (common/job_token.hpp)
// with no nonces, bound to "ucx|" context.
std::uint64_t am_cookie(std::string_view token, std::string_view context);

}  // namespace holmes::ucx
