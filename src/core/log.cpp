#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>

#include "core/settings.hpp"

namespace holmes {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>("holmes", sink);
  log->set_pattern("[%H:%M:%S.%e holmes %P %^%l%$] %v");
  auto level = spdlog::level::warn;
  // The environment's HOLMES_LOG_LEVEL (a communicator's config may change it later). Read
  // without checking: the logger exists before any communicator, and must not throw; unknown
  // names give "off" here and fail when a communicator is configured.
  if (const auto& text = process_settings().value(Setting::kLogLevel).text) {
    level = spdlog::level::from_str(*text);
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
