#include "core/parse.hpp"

#include <charconv>

#include "core/status.hpp"

namespace holmes {

std::int64_t parse_int(const std::string& text, std::int64_t min, std::int64_t max,
                       const std::string& what) {
  std::int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end) {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' is not a whole number", what, text);
  }
  if (value < min || value > max) {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: {} is outside [{}, {}]", what, value, min, max);
  }
  return value;
}

HostPort parse_host_port(const std::string& text, const std::string& what) {
  HostPort result;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' is not [address]:port", what, text);
    }
    result.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    if (result.host.empty())
      fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' has an empty address", what, text);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      fail(HM_ERR_INVALID_ARGUMENT, "{}: '{}' is not host:port", what, text);
    }
    result.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  result.port = static_cast<std::uint16_t>(parse_int(port_text, 1, 65535, what + " port"));
  return result;
}

}  // namespace holmes
