// Reading configuration from environment variables, with errors that name the variable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace holmes {

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> env_string(const char* name);

// The variable as an integer in [min, max]; nullopt when unset or empty. A value that is not a
// whole number in range throws HM_ERR_INVALID_ARGUMENT naming the variable.
std::optional<std::int64_t> env_int(const char* name, std::int64_t min, std::int64_t max);

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
