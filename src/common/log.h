// Logging through spdlog. One logger, configured once by the CLI; library
// code just calls VPOD_LOG_INFO(...) etc. (fmt syntax).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace vpod {

// Sets the level from "trace|debug|info|warn|error|off"; returns false if the
// name is unknown. Logs go to stderr so stdout stays for command output.
bool configure_logging(std::string_view level);

}  // namespace vpod

#define VPOD_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define VPOD_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define VPOD_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define VPOD_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define VPOD_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
