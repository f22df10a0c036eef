#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>

#include "core/env.hpp"

namespace holmes {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>("holmes", sink);
  log->set_pattern("[%H:%M:%S.%e holmes %P %^%l%$] %v");
  auto level = spdlog::level::warn;
  if (auto text = env_string("HOLMES_LOG_LEVEL")) {
    level = spdlog::level::from_str(*text);  // unknown names give "off"
  }
  log->set_level(level);
  log->flush_on(spdlog::level::warn);
  return log;
}

}  // namespace

spdlog::logger& logger() {
  // Part of the process-wide runtime state: created once, on first use, never replaced.
  static const std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

}  // namespace holmes
