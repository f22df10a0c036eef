#include "transports/tcp/frame.hpp"

#include "core/bytes.hpp"

namespace holmes::tcp {

std::array<std::uint8_t, kFrameHeaderBytes> FrameHeader::encode() const {
  std::array<std::uint8_t, kFrameHeaderBytes> out{};
  store_le<std::uint32_t>(out.data(), kFrameMagic);
  store_le<std::uint32_t>(out.data() + 4, signature);
  store_le<std::uint64_t>(out.data() + 8, tag);
  store_le<std::uint64_t>(out.data() + 16, total);
  store_le<std::uint64_t>(out.data() + 24, offset);
  store_le<std::uint32_t>(out.data() + 32, length);
  store_le<std::uint32_t>(out.data() + 36, flags);
  return out;
}

std::optional<FrameHeader> FrameHeader::decode(
    std::span<const std::uint8_t, kFrameHeaderBytes> bytes) {
  if (load_le<std::uint32_t>(bytes.data()) != kFrameMagic) return std::nullopt;
  FrameHeader h;
  h.signature = load_le<std::uint32_t>(bytes.data() + 4);
  h.tag = load_le<std::uint64_t>(bytes.data() + 8);
  h.total = load_le<std::uint64_t>(bytes.data() + 16);
  h.offset = load_le<std::uint64_t>(bytes.data() + 24);
  h.length = load_le<std::uint32_t>(bytes.data() + 32);
  h.flags = load_le<std::uint32_t>(bytes.data() + 36);
  if (h.total > kMaxMessageBytes || h.length > kMaxFragmentBytes) return std::nullopt;
  if (h.offset > h.total || h.length > h.total - h.offset) return std::nullopt;
  if ((h.flags & ~kFlagChecksum) != 0) return std::nullopt;  // unknown flags
  return h;
}

}  // namespace holmes::tcp
