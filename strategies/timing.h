// How strategies time their work: the host clock, and the split of a rank's communication read
// from its transport (device work is timed with Device::mark; see core/device.h).
#pragma once

#include <chrono>

#include "strategies/collectives/transport.h"
#include "strategies/strategy.h"

namespace paralab {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The transport's receive times since its last reset into `times` (waiting and moving; see
// Transport::ReceiveTimes), once the device has finished the step's work.
inline void take_receive_times(const Transport& t, Device& device, RankTimes& times) {
  const Transport::ReceiveTimes rt = t.receive_times(device);
  times.wait_ms = rt.wait_ms;
  times.move_ms = rt.move_ms;
  times.receives = rt.receives;
}

}  // namespace paralab
