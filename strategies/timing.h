// The host clock strategies and their helpers time with (device work is timed with
// Device::mark; see core/device.h).
#pragma once

#include <chrono>

namespace paralab {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace paralab
