// What the GPU did during a few traced launches of a step's graph (core/cuda/step_trace.h records
// each kernel, copy and memset with its start and end on the GPU's clock): how long the launches
// took end to end, how much of that the GPU was busy, where it sat idle and between which nodes,
// and each kernel's time in the graph as it runs there (warm caches, its neighbours beside it), not
// one at a time as a kernel profiler times it. Plain code, tested on any machine.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paralab {

struct TraceRecord {
  enum class Kind { Kernel, Copy, Fill };
  Kind kind = Kind::Kernel;
  std::string name;  // kernels: the function's name; copies and fills: ""
  uint64_t start_ns = 0, end_ns = 0;
  int64_t bytes = 0;  // copies and fills
};

// The summary of `records`, traced over `launches` launches of a step (> 0):
//   records, launches; span_us (first start to last end) and span_per_launch_us;
//   busy_per_launch_us (the union of the records' intervals), idle_per_launch_us (span less busy),
//   overlap_per_launch_us (the records' durations summed, less busy: work that ran side by side);
//   gaps: the 8 longest idle gaps, each {us, after, before} (the record that ended last before
//     it, the one that started first after it: "kernel NAME", "copy N B", "fill N B");
//   by_name: per kernel name (copies and fills as "(copy)", "(fill)"), longest first, the 25
//     longest: {name, per_launch (count / launches), us_per_launch, mean_us};
//   copies, fills: {per_launch, bytes_per_launch, us_per_launch}.
// Names are cut to 120 characters. Throws Error for launches <= 0 or a record ending before it
// starts.
nlohmann::json trace_summary(std::vector<TraceRecord> records, int launches);

// Which graph launches a trace covers (numbers after + 1 to after + count, in the order their
// queueing began) and when it may end, with launches queued from several threads at once (a
// step graph per device, each launched by its rank's thread). begin() may be called from any
// thread; queued() only under the caller's lock.
class TraceWindow {
 public:
  TraceWindow(int64_t after, int64_t count) : after_(after), count_(count) {}
  // A launch about to be queued: its number (the first traced one starts the trace).
  int64_t begin() { return ++begun_; }
  bool first(int64_t n) const { return n == after_ + 1; }
  bool traced(int64_t n) const { return n > after_ && n <= after_ + count_; }
  // Launch n has been queued: true once every traced launch has been, for the last of them
  // (not when the count of begun launches first reaches the window's end: a traced launch of
  // another thread may still be being queued then).
  bool queued(int64_t n) { return traced(n) && ++queued_ == count_; }

 private:
  int64_t after_, count_;
  std::atomic<int64_t> begun_{0};
  int64_t queued_ = 0;
};

}  // namespace paralab
