// The layout of a message tag, in one place: the collectives write tags with it, the transports'
// matcher reads them back with it.
//
//   2 bits kind | 62 bits that the kind lays out
//   kind 10 (collective):     24 bits operation sequence | 38 bits step
//   kind 01 (point to point): 30 bits of the caller's tag | 32 bits sequence per peer and tag
//   kind 11 (control):        24 bits operation sequence | 2 bits type | 4 bits zero |
//                             32 bits root + 1 (0: the call has no root)
//   kind 00: plain tags (transport tests), never checked per operation.
// A collective's operation sequence, modulo 2^24, is its slot: every message of one operation
// carries the same slot, and control messages name the slot they are about (matcher.hpp).
// No tag of these kinds has all bits set: tcp reserves that one for its failure notice.
#pragma once

#include <cstdint>
#include <optional>

namespace holmes {

enum class TagKind : std::uint8_t { kPlain = 0, kPointToPoint = 1, kCollective = 2, kControl = 3 };

constexpr int kTagKindShift = 62;
constexpr std::uint64_t kTagCollective = std::uint64_t{2} << kTagKindShift;
constexpr std::uint64_t kTagPointToPoint = std::uint64_t{1} << kTagKindShift;
constexpr int kTagStepBits = 38;
constexpr std::uint32_t kTagSlotMask = (1u << 24) - 1;

constexpr TagKind tag_kind(std::uint64_t tag) { return static_cast<TagKind>(tag >> kTagKindShift); }

// Step `step` (38 bits) of collective operation `sequence`.
std::uint64_t collective_tag(std::uint64_t sequence, std::uint64_t step);
// The `sequence`-th point-to-point message with the caller's tag `user_tag` (0 .. kMaxUserTag)
// between two ranks, in one direction.
constexpr std::uint32_t kMaxUserTag = (1u << 30) - 1;
std::uint64_t p2p_tag(std::uint32_t user_tag, std::uint64_t sequence);
// The caller's tag and the sequence number (modulo 2^32) of a point-to-point tag; nullopt for
// the other kinds.
struct PointToPointTag {
  std::uint32_t user_tag = 0;
  std::uint32_t sequence = 0;
};
std::optional<PointToPointTag> decode_p2p_tag(std::uint64_t tag);

// The slot of a collective tag; nullopt for the other kinds (point-to-point and plain tags are
// not checked per operation; a control tag's slot comes with decode_control_tag).
std::optional<std::uint32_t> collective_slot(std::uint64_t tag);

// Whether `slot` comes after `current` (sequence numbers wrap at 2^24; a rank is never half that
// many operations away from another).
bool slot_ahead(std::uint32_t slot, std::uint32_t current);

// Control messages (matcher.hpp): a probe or a verdict about one slot.
enum class ControlType : std::uint8_t { kProbe = 1, kVerdict = 2 };
struct ControlMessage {
  ControlType type = ControlType::kProbe;
  std::uint32_t slot = 0;  // the operation's sequence number, modulo 2^24
  int root = -1;           // -1: not a rooted call
};
std::uint64_t control_tag(ControlType type, std::uint64_t sequence, int root);
// nullopt for tags that are not control tags; throws nothing. `valid` is false for a control tag
// that no rank of this version sends (unknown type, reserved bits, root out of range).
struct DecodedControl {
  bool valid = false;
  ControlMessage message;
};
std::optional<DecodedControl> decode_control_tag(std::uint64_t tag);

}  // namespace holmes
