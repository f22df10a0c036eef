// What one RDMA send carries: a fixed 48-byte header, then for data messages a piece of a
// tagged message. Every send lands in one pre-posted receive slot of the peer.
//   u32 magic "HMV1" | u8 kind | u8 flags (0) | u16 reserved (0) | u32 credits | u32 signature |
//   u64 tag | u64 total | u64 offset | u32 length | u32 reserved (0)
// `credits` returns receive slots the sender has reposted since its last message (flow control,
// credit_window.hpp); every kind of message may carry them. Credit and goodbye messages carry
// no payload and zero tag, signature, total, offset and length. decode() checks every field
// against the bytes actually received before anything is used.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace holmes::verbs {

enum class MessageKind : std::uint8_t {
  kData = 1,     // a piece of a tagged message
  kCredit = 2,   // only returns receive slots
  kGoodbye = 3,  // the sender closes this queue pair: nothing more comes, nothing more is read
};

constexpr std::uint32_t kWireMagic = 0x3156'4d48;  // "HMV1"
constexpr std::size_t kWireHeaderBytes = 48;
// Receive slots that only ever get credit and goodbye messages hold a header, rounded up.
constexpr std::size_t kControlSlotBytes = 64;
constexpr std::uint64_t kMaxMessageBytes = 1ull << 40;  // 1 TiB
// No queue pair has more receive slots than this, so no message returns more credits.
constexpr std::uint32_t kMaxSlots = 4096;

struct WireHeader {
  MessageKind kind = MessageKind::kData;
  std::uint32_t credits = 0;
  std::uint32_t signature = 0;
  std::uint64_t tag = 0;
  std::uint64_t total = 0;   // bytes of the whole message
  std::uint64_t offset = 0;  // where this piece goes in it
  std::uint32_t length = 0;  // payload bytes after the header

  std::array<std::uint8_t, kWireHeaderBytes> encode() const;
  // `message` is everything one receive completion delivered (header and payload). nullopt with
  // `why` set when a field is out of bounds or disagrees with the size received.
  static std::optional<WireHeader> decode(std::span<const std::uint8_t> message, std::string* why);
};

}  // namespace holmes::verbs
