// Parsing the text of settings and addresses, with errors that name what was parsed. (The
// environment itself is read by the settings registry alone: core/settings.cpp.)
#pragma once

#include <cstdint>
#include <string>

namespace holmes {

// Parses a whole decimal number in [min, max]; `what` names it in the error.
std::int64_t parse_int(const std::string& text, std::int64_t min, std::int64_t max,
                       const std::string& what);

// Splits "host:port" (also "[v6]:port"); throws HM_ERR_INVALID_ARGUMENT naming `what`.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};
HostPort parse_host_port(const std::string& text, const std::string& what);

}  // namespace holmes
