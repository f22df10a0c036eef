#include "transports/common/tag_codec.hpp"

#include <climits>

namespace holmes {
namespace {

constexpr int kSlotShift = kTagStepBits;
constexpr std::uint64_t kStepMask = (std::uint64_t{1} << kTagStepBits) - 1;
constexpr std::uint64_t kPayloadMask = (std::uint64_t{1} << kTagKindShift) - 1;
constexpr std::uint64_t kTagControl = std::uint64_t{3} << kTagKindShift;
// Control tags: the 38 low bits hold 2 bits type | 4 reserved bits | 32 bits root + 1.
constexpr int kControlTypeShift = 36;
constexpr std::uint64_t kControlReservedMask = std::uint64_t{0xf} << 32;
constexpr std::uint64_t kControlRootMask = 0xffffffffull;

}  // namespace

std::uint64_t collective_tag(std::uint64_t sequence, std::uint64_t step) {
  return kTagCollective | ((sequence & kTagSlotMask) << kSlotShift) | (step & kStepMask);
}

std::uint64_t p2p_tag(std::uint32_t user_tag, std::uint64_t sequence) {
  return kTagPointToPoint | (std::uint64_t{user_tag & kMaxUserTag} << 32) |
         (sequence & 0xffffffffull);
}

std::optional<PointToPointTag> decode_p2p_tag(std::uint64_t tag) {
  if (tag_kind(tag) != TagKind::kPointToPoint) return std::nullopt;
  return PointToPointTag{static_cast<std::uint32_t>(tag >> 32) & kMaxUserTag,
                         static_cast<std::uint32_t>(tag)};
}

namespace {
std::uint32_t slot_bits(std::uint64_t tag) {
  return static_cast<std::uint32_t>(tag >> kSlotShift) & kTagSlotMask;
}
}  // namespace

std::optional<std::uint32_t> collective_slot(std::uint64_t tag) {
  if (tag_kind(tag) != TagKind::kCollective) return std::nullopt;
  return slot_bits(tag);
}

bool slot_ahead(std::uint32_t slot, std::uint32_t current) {
  const std::uint32_t distance = (slot - current) & kTagSlotMask;
  return distance != 0 && distance < (kTagSlotMask + 1) / 2;
}

std::uint64_t control_tag(ControlType type, std::uint64_t sequence, int root) {
  const std::uint64_t root_field = root < 0 ? 0 : static_cast<std::uint64_t>(root) + 1;
  return kTagControl | ((sequence & kTagSlotMask) << kSlotShift) |
         (static_cast<std::uint64_t>(type) << kControlTypeShift) | root_field;
}

std::optional<DecodedControl> decode_control_tag(std::uint64_t tag) {
  if (tag_kind(tag) != TagKind::kControl) return std::nullopt;
  DecodedControl decoded;
  const auto type = (tag >> kControlTypeShift) & 3;
  const auto root_field = tag & kControlRootMask;
  if ((type != static_cast<std::uint64_t>(ControlType::kProbe) &&
       type != static_cast<std::uint64_t>(ControlType::kVerdict)) ||
      (tag & kControlReservedMask) != 0 || root_field > static_cast<std::uint64_t>(INT_MAX) + 1) {
    return decoded;  // not valid
  }
  decoded.valid = true;
  decoded.message.type = static_cast<ControlType>(type);
  decoded.message.slot = slot_bits(tag);
  decoded.message.root = root_field == 0 ? -1 : static_cast<int>(root_field - 1);
  return decoded;
}

}  // namespace holmes
