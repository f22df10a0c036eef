#include "transports/ucx/ucx_address.hpp"

#include <charconv>

#include <fmt/format.h>

#include "core/status.hpp"

namespace holmes::ucx {
namespace {

constexpr std::string_view kPrefix = "ucx1-";

std::uint64_t fnv1a64(std::span<const std::uint8_t> bytes) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (const auto b : bytes) {
    hash ^= b;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits off the text up to the next '-'; false when there is none.
bool take_field(std::string_view& rest, std::string_view& field) {
  const auto dash = rest.find('-');
  if (dash == std::string_view::npos) return false;
  field = rest.substr(0, dash);
  rest.remove_prefix(dash + 1);
  return true;
}

bool parse_unsigned(std::string_view text, unsigned& out) {
  if (text.empty() || text.size() > 6) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string encode_worker_address(std::span<const std::uint8_t> address, UcxVersion version) {
  std::string out =
      fmt::format("{}{}.{}-{:016x}-", kPrefix, version.major, version.minor, fnv1a64(address));
  out.reserve(out.size() + 2 * address.size());
  static constexpr char kDigits[] = "0123456789abcdef";
  for (const auto b : address) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

std::vector<std::uint8_t> decode_worker_address(std::string_view text, UcxVersion ours,
                                                const std::string& what) {
  const auto invalid = [&](std::string_view why) {
    const std::string shown =
        text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text);
    fail(HM_ERR_INVALID_ARGUMENT, "{} '{}' is not a ucx worker address: {}", what, shown, why);
  };
  if (!text.starts_with(kPrefix)) invalid(fmt::format("it does not start with '{}'", kPrefix));
  std::string_view rest = text.substr(kPrefix.size());
  std::string_view version_text;
  std::string_view checksum_text;
  if (!take_field(rest, version_text) || !take_field(rest, checksum_text)) {
    invalid("expected ucx1-<version>-<checksum>-<hex bytes>");
  }
  const auto dot = version_text.find('.');
  UcxVersion theirs;
  if (dot == std::string_view::npos || !parse_unsigned(version_text.substr(0, dot), theirs.major) ||
      !parse_unsigned(version_text.substr(dot + 1), theirs.minor)) {
    invalid(fmt::format("bad UCX version '{}'", version_text));
  }
  if (checksum_text.size() != 16) invalid("the checksum is not 16 hex digits");
  std::uint64_t checksum = 0;
  for (const char c : checksum_text) {
    const int v = hex_value(c);
    if (v < 0) invalid("the checksum is not 16 hex digits");
    checksum = checksum << 4 | static_cast<std::uint64_t>(v);
  }
  if (rest.empty()) invalid("it holds no address bytes");
  if (rest.size() % 2 != 0) invalid("odd number of hex digits");
  if (rest.size() / 2 > kMaxWorkerAddressBytes) {
    invalid(fmt::format("longer than {} bytes", kMaxWorkerAddressBytes));
  }
  std::vector<std::uint8_t> bytes(rest.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const int hi = hex_value(rest[2 * i]);
    const int lo = hex_value(rest[2 * i + 1]);
    if (hi < 0 || lo < 0) invalid(fmt::format("'{}' is not a hex digit", rest.substr(2 * i, 2)));
    bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  if (fnv1a64(bytes) != checksum) invalid("the checksum does not match (damaged or truncated)");
  if (theirs != ours) {
    fail(HM_ERR_UNSUPPORTED,
         "{} comes from UCX {}.{} and this rank runs UCX {}.{}: UCP workers of different versions "
         "may not understand each other; run every rank with the same UCX",
         what, theirs.major, theirs.minor, ours.major, ours.minor);
  }
  return bytes;
}

}  // namespace holmes::ucx
