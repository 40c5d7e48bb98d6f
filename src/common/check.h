// Internal invariant checks. A failed check is a bug in vpod, not bad input:
// it reports the statement, file and line (and the library's own message for
// CUDA, driver, cuBLAS and NCCL calls, see cuda_check.h) and aborts.
// User input never reaches these: it gets a Status (status.h).
#pragma once

#include <string>
#include <string_view>

namespace vpod::detail {

// The one reporter every check macro funnels into.
[[noreturn]] void check_failed(std::string_view library, std::string_view statement,
                               std::string_view message, const char* file, int line);

}  // namespace vpod::detail

#define VPOD_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::vpod::detail::check_failed("vpod", #cond, "check failed", __FILE__, __LINE__); \
  } while (0)

#define VPOD_CHECK_MSG(cond, msg)                                                        \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::vpod::detail::check_failed("vpod", #cond, std::string(msg), __FILE__, __LINE__); \
  } while (0)
