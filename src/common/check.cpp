// Internal invariant checks (check.h): the one reporter every check macro ends in,
// which prints the failed statement, file, line and message, then aborts.

#include "common/check.h"

#include <cstdio>
#include <cstdlib>

namespace vpod::detail {

void check_failed(std::string_view library, std::string_view statement, std::string_view message,
                  const char* file, int line) {
  // stderr directly, not the logger: this must work before logging is set up
  // and while the process is dying.
  std::fprintf(stderr, "vpod: %.*s error at %s:%d\n  statement: %.*s\n  message:   %.*s\n",
               static_cast<int>(library.size()), library.data(), file, line,
               static_cast<int>(statement.size()), statement.data(),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace vpod::detail
