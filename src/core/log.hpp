// The library's logger: spdlog, to stderr, named "holmes", level from HOLMES_LOG_LEVEL
// (trace, debug, info, warn, error, off; default warn). It never touches the application's own
// spdlog default logger.
#pragma once

#include <spdlog/spdlog.h>

namespace holmes {

spdlog::logger& logger();

}  // namespace holmes

#define HM_LOG_TRACE(...) ::holmes::logger().trace(__VA_ARGS__)
#define HM_LOG_DEBUG(...) ::holmes::logger().debug(__VA_ARGS__)
#define HM_LOG_INFO(...) ::holmes::logger().info(__VA_ARGS__)
#define HM_LOG_WARN(...) ::holmes::logger().warn(__VA_ARGS__)
#define HM_LOG_ERROR(...) ::holmes::logger().error(__VA_ARGS__)
