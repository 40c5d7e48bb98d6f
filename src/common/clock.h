// The one monotonic clock vpod times itself with (latency metrics, the KV
// cache's driver-call timers, benchmark phases), and the conversions to
// seconds every timer needs.
#pragma once

#include <chrono>

namespace vpod {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

inline double seconds_since(Clock::time_point start) {
  return seconds_between(start, Clock::now());
}

}  // namespace vpod
