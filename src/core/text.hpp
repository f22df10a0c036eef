// Small helpers for text that comes from outside (settings, files, the network): without its
// surrounding whitespace, and safe to put in a message or a log.
#pragma once

#include <cctype>
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

}  // namespace holmes
