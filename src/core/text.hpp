// Small helpers for text that comes from outside (settings, files, the network): without its
// surrounding whitespace, and safe to put in a message or a log.
#pragma once

#include <cctype>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace holmes {

// `text` without leading and trailing whitespace.
inline std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// `text` with every byte outside printable ASCII shown as '?'.
inline std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// `bytes` as lowercase hex digits, two per byte: binary handles (NCCL's unique ids, CUDA IPC
// handles) as text the job's store carries.
inline std::string to_hex(std::span<const std::byte> bytes) {
  constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (std::byte b : bytes) {
    out += kDigits[std::to_integer<unsigned>(b) >> 4];
    out += kDigits[std::to_integer<unsigned>(b) & 0xf];
  }
  return out;
}

// The bytes of `text` written by to_hex into `out`; false unless `text` holds exactly
// 2 * out.size() hex digits.
inline bool from_hex(std::string_view text, std::span<std::byte> out) {
  if (text.size() != 2 * out.size()) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int high = digit(text[2 * i]);
    const int low = digit(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<std::byte>(high * 16 + low);
  }
  return true;
}

}  // namespace holmes
