// Logging (log.h): configures the one spdlog logger from a level name (the
// CLI's --log-level).

#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace vpod {

bool configure_logging(std::string_view level) {
  const auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") return false;
  auto logger = spdlog::get("vpod");
  if (!logger) logger = spdlog::stderr_color_mt("vpod");
  logger->set_pattern("%^[%Y-%m-%d %H:%M:%S.%e] [%l]%$ %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  spdlog::set_level(parsed);
  return true;
}

}  // namespace vpod
