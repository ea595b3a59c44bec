// The allreduce microbenchmark program (allreduce_bench.cpp) as a function, so that a test can
// run it with one more, deliberately wrong, allreduce registered beside the real ones.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/device.h"
#include "strategies/collectives/collectives.h"

namespace paralab {

using AllreduceFactory = std::function<std::unique_ptr<Allreduce>()>;
// Takes each device the benchmark makes and returns the one it runs on (a test's decorator,
// e.g. a device that records and replays its work as a CUDA device captures it).
using DeviceWrapper = std::function<std::unique_ptr<Device>(std::unique_ptr<Device>)>;

// argv as the program's (own flags, then Google Benchmark's). Returns the exit status: 0, 1 on
// bad arguments, 2 when a collective failed its correctness check.
int allreduce_bench_main(int argc, char** argv,
                         const std::map<std::string, AllreduceFactory>& extra = {},
                         DeviceWrapper wrap = nullptr);

// Whether allreduce_bench_main got past its arguments (checked, and the same on every rank
// under mpirun): an error after that may be one rank's alone, and that rank says it.
bool allreduce_bench_setup_done();

}  // namespace paralab
