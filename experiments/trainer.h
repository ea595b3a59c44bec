// The training loop bench_runner runs for each descriptor run: shuffle, train global minibatches
// through a Strategy, evaluate per epoch, time every iteration; it does not know the strategy.
#pragma once

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  // Set (to the signal's number) by a SIGINT/SIGTERM handler: the run stops after the iteration
  // in progress and is recorded as interrupted. Null: never.
  const std::atomic<int>* stop = nullptr;
  // The mpi launcher: this process is rank `rank` of `world` (bench_runner under mpirun); each
  // run is one rank per process, and only rank 0 reports.
  bool mpi = false;
  int rank = 0, world = 1;
  int local_rank = 0;  // among the ranks on this node
  int local_size = 1;  // ranks on this node
  bool pin = true;     // CPU ranks under mpirun pinned to cores of their own (cpu_binding.h)
};

// The signal that stopped this process (0: none); under MPI, whether any rank's did, agreed by
// every rank (so that all stop at the same iteration).
int stop_signal(const RunContext& ctx);

// The global minibatch of a run: training.batch_size, times the devices with weak scaling.
int64_t global_batch(const RunSpec& run);
// Iterations per epoch over `train_examples`: ceil(examples / global batch), capped by
// max_iterations_per_epoch.
int64_t iterations_per_epoch(const RunSpec& run, int64_t train_examples);
// Every global minibatch size a run trains over `train_examples`: the global batch (or all the
// examples, when fewer), and the smaller last one of an epoch where the run reaches it.
std::vector<int64_t> minibatch_sizes(const RunSpec& run, int64_t train_examples);

// Checks that each run's strategy can train the descriptor's model on its devices with its
// minibatches (Strategy::check_plan), before any run starts; an Error naming the run's path
// and label otherwise, e.g. "runs.1 (data_parallel/ring x2): data_parallel: global batch 63 is
// not divisible by 2 devices ...".
void check_plans(const Descriptor& d, int64_t train_examples);

// "4 virtual devices on 1 GPU" when device_list (the devices' describe()) has virtual devices
// (CUDA devices sharing a GPU), else "".
std::string virtual_placement(const nlohmann::json& device_list);

// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int sig);

// A run's `timing` from its timed iterations (results/README): median, p10, p90 and mean
// iteration times, samples per second, per_device (each rank field's mean over the iterations
// that recorded their devices; null where none did, or where they list different numbers) and
// detail (the mean of each figure that every iteration holds as a number); warmup: the
// iterations left out before them.
nlohmann::json timing_json(const nlohmann::json& iterations, int64_t warmup);

// One element of the results' runs[]: config, status (ok | skipped | diverged | failed |
// interrupted) and reason, iterations, warmup, timing, epochs (the completed ones). Library
// errors inside the run become "failed".
nlohmann::json run_training(const RunSpec& run, const RunContext& ctx);

}  // namespace paralab
