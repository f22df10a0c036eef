// The tcp transport's frame header. Every message travels as one or more fragments, each a
// fixed 40-byte header followed by `length` payload bytes:
//   u32 magic "HMF1" | u32 signature | u64 tag | u64 total | u64 offset | u32 length | u32 flags
// Fragments of one message may travel on different sockets of the same peer and arrive in any
// order; (tag, offset) place them. decode() bounds-checks every field before anything is used.
// Flag kFlagChecksum (HOLMES_CHECKSUM=1 on the sender): the payload is followed by its CRC32C,
// 4 bytes little-endian, which the receiver checks before the fragment counts as received.
// Tag kNoticeTag is the transport's own: a rank whose communicator failed sends it once to each
// peer before it closes, with `signature` = its hm_status_t and the reason (UTF-8, at most
// kMaxNoticeBytes) as payload, so that ranks blocked on it report the cause (a dead link two
// hops away) instead of "connection closed".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace holmes::tcp {

constexpr std::uint32_t kFrameMagic = 0x31464d48;  // "HMF1"
constexpr std::size_t kFrameHeaderBytes = 40;
constexpr std::size_t kMaxFragmentBytes = 4u << 20;     // a fragment never exceeds 4 MiB
constexpr std::uint64_t kMaxMessageBytes = 1ull << 40;  // 1 TiB
constexpr std::uint32_t kFlagChecksum = 1;
constexpr std::size_t kChecksumBytes = 4;
// Collective and point-to-point tags never have all bits set (common/tag_codec.hpp).
constexpr std::uint64_t kNoticeTag = ~std::uint64_t{0};
constexpr std::uint32_t kMaxNoticeBytes = 4096;

struct FrameHeader {
  std::uint32_t signature = 0;
  std::uint64_t tag = 0;
  std::uint64_t total = 0;   // bytes in the whole message
  std::uint64_t offset = 0;  // where this fragment's payload goes
  std::uint32_t length = 0;  // payload bytes following this header
  std::uint32_t flags = 0;

  std::array<std::uint8_t, kFrameHeaderBytes> encode() const;
  // nullopt when the magic is wrong or the fields are out of bounds.
  static std::optional<FrameHeader> decode(std::span<const std::uint8_t, kFrameHeaderBytes> bytes);
};

}  // namespace holmes::tcp
