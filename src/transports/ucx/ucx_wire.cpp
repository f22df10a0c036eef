#include "transports/ucx/ucx_wire.hpp"

#include <string>

#include "core/bytes.hpp"
#include "transports/common/job_token.hpp"

namespace holmes::ucx {

std::array<std::uint8_t, kAmHeaderBytes> AmHeader::encode() const {
  std::array<std::uint8_t, kAmHeaderBytes> out{};
  store_le<std::uint64_t>(out.data(), cookie);
  store_le<std::uint32_t>(out.data() + 8, sender);
  store_le<std::uint16_t>(out.data() + 12, static_cast<std::uint16_t>(kind));
  store_le<std::uint16_t>(out.data() + 14, kAmVersion);
  store_le<std::uint64_t>(out.data() + 16, tag);
  store_le<std::uint32_t>(out.data() + 24, signature);
  store_le<std::uint32_t>(out.data() + 28, 0);
  store_le<std::uint64_t>(out.data() + 32, total);
  return out;
}

std::optional<AmHeader> AmHeader::decode(std::span<const std::uint8_t> bytes) {
  if (bytes.size() != kAmHeaderBytes) return std::nullopt;
  AmHeader h;
  h.cookie = load_le<std::uint64_t>(bytes.data());
  h.sender = load_le<std::uint32_t>(bytes.data() + 8);
  const auto kind = load_le<std::uint16_t>(bytes.data() + 12);
  const auto version = load_le<std::uint16_t>(bytes.data() + 14);
  h.tag = load_le<std::uint64_t>(bytes.data() + 16);
  h.signature = load_le<std::uint32_t>(bytes.data() + 24);
  const auto reserved = load_le<std::uint32_t>(bytes.data() + 28);
  h.total = load_le<std::uint64_t>(bytes.data() + 32);
  if (version != kAmVersion || reserved != 0 || h.sender >= kMaxRank) return std::nullopt;
  if (kind != static_cast<std::uint16_t>(AmKind::kData) &&
      kind != static_cast<std::uint16_t>(AmKind::kGoodbye)) {
    return std::nullopt;
  }
  h.kind = static_cast<AmKind>(kind);
  return h;
}

std::uint64_t am_cookie(std::string_view token, std::string_view context) {
  // A proof without nonces: UCP messages carry no handshake to exchange them.
  const auth::Nonce zero{};
  const JobToken job{std::string(token), std::string(context)};
  const auto mac = job.mac(auth::Role::kClient, zero, zero, std::string("ucx|").append(context));
  return load_le<std::uint64_t>(mac.data());
}

}  // namespace holmes::ucx
