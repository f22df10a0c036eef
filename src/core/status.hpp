// Raising errors inside the library: every failure is a holmes::Error with a status code and a
// message formatted with fmt. The C API turns them back into hm_status_t (src/capi).
#pragma once

#include <holmes/error.hpp>

#include <fmt/format.h>

#include <string>
#include <utility>

namespace holmes {

const char* status_name(hm_status_t status) noexcept;

template <typename... Args>
[[noreturn]] void fail(hm_status_t status, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(status, fmt::format(format, std::forward<Args>(args)...));
}

// Throws HM_ERR_INVALID_ARGUMENT unless `condition` holds.
template <typename... Args>
void require(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) fail(HM_ERR_INVALID_ARGUMENT, format, std::forward<Args>(args)...);
}

}  // namespace holmes
