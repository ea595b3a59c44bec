// The training loop bench_runner runs for each descriptor run: shuffle, train global minibatches
// through a Strategy, evaluate per epoch, time every iteration; it does not know the strategy.
#pragma once

#include <nlohmann/json.hpp>

#include "core/fashion_mnist.h"
#include "experiments/descriptor.h"
#include "experiments/progress.h"

namespace paralab {

struct RunContext {
  const Descriptor* descriptor;
  const FashionMnist* data;
  Progress* progress;
  int index;  // 0-based
  int total;
  bool quiet = false;  // no warnings on stderr
};

// One element of the results' runs[]: config, status (ok | skipped | diverged | failed) and
// reason, iterations, warmup, timing, epochs. Library errors inside the run become "failed".
nlohmann::json run_training(const RunSpec& run, const RunContext& ctx);

}  // namespace paralab
