#include "transports/verbs/wire.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"

namespace holmes::verbs {

std::array<std::uint8_t, kWireHeaderBytes> WireHeader::encode() const {
  std::array<std::uint8_t, kWireHeaderBytes> out{};
  store_le<std::uint32_t>(out.data(), kWireMagic);
  out[4] = static_cast<std::uint8_t>(kind);
  out[5] = 0;  // flags
  store_le<std::uint16_t>(out.data() + 6, 0);
  store_le<std::uint32_t>(out.data() + 8, credits);
  store_le<std::uint32_t>(out.data() + 12, signature);
  store_le<std::uint64_t>(out.data() + 16, tag);
  store_le<std::uint64_t>(out.data() + 24, total);
  store_le<std::uint64_t>(out.data() + 32, offset);
  store_le<std::uint32_t>(out.data() + 40, length);
  store_le<std::uint32_t>(out.data() + 44, 0);
  return out;
}

std::optional<WireHeader> WireHeader::decode(std::span<const std::uint8_t> message,
                                             std::string* why) {
  const auto refuse = [why](std::string text) -> std::optional<WireHeader> {
    if (why != nullptr) *why = std::move(text);
    return std::nullopt;
  };
  if (message.size() < kWireHeaderBytes) {
    return refuse(fmt::format("a {}-byte message is shorter than the {}-byte header",
                              message.size(), kWireHeaderBytes));
  }
  const std::uint8_t* b = message.data();
  if (load_le<std::uint32_t>(b) != kWireMagic) {
    return refuse(fmt::format("bad magic {:08x}", load_le<std::uint32_t>(b)));
  }
  WireHeader h;
  const std::uint8_t kind = b[4];
  if (kind < 1 || kind > 3) return refuse(fmt::format("unknown message kind {}", kind));
  h.kind = static_cast<MessageKind>(kind);
  if (b[5] != 0 || load_le<std::uint16_t>(b + 6) != 0 || load_le<std::uint32_t>(b + 44) != 0) {
    return refuse("reserved header bits are set");
  }
  h.credits = load_le<std::uint32_t>(b + 8);
  h.signature = load_le<std::uint32_t>(b + 12);
  h.tag = load_le<std::uint64_t>(b + 16);
  h.total = load_le<std::uint64_t>(b + 24);
  h.offset = load_le<std::uint64_t>(b + 32);
  h.length = load_le<std::uint32_t>(b + 40);
  if (h.credits > kMaxSlots) return refuse(fmt::format("it returns {} credits", h.credits));
  if (h.length != message.size() - kWireHeaderBytes) {
    return refuse(fmt::format("its header says {} payload bytes but {} arrived", h.length,
                              message.size() - kWireHeaderBytes));
  }
  if (h.kind != MessageKind::kData) {
    if (h.tag != 0 || h.signature != 0 || h.total != 0 || h.offset != 0 || h.length != 0) {
      return refuse("a control message carries message fields");
    }
    return h;
  }
  if (h.total > kMaxMessageBytes) {
    return refuse(
        fmt::format("a {}-byte message exceeds the {}-byte limit", h.total, kMaxMessageBytes));
  }
  if (h.offset > h.total || h.length > h.total - h.offset) {
    return refuse(fmt::format("piece [{}, +{}) lies outside its {}-byte message", h.offset,
                              h.length, h.total));
  }
  if (h.length == 0 && h.total != 0) return refuse("an empty piece of a non-empty message");
  return h;
}

}  // namespace holmes::verbs
