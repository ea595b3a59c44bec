// Strategy: how one global minibatch is trained across a group of devices.
//
// bench_runner's training loop does not know which strategy it runs: it hands the strategy the
// epoch's example order, asks it to train global minibatches (slices of that order) and to
// evaluate. The strategy owns devices, replicas and communication, and never includes a backend
// header (it sees Device, Ops and Model only).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/fashion_mnist.h"
#include "core/model.h"

namespace paralab {

// Milliseconds of one training iteration, measured by the strategy (device-synchronised).
struct IterationTimes {
  double forward_ms = 0;        // minibatch gather, forward pass and loss
  double backward_ms = 0;       // backward pass (gradients)
  double communication_ms = 0;  // collectives, transfers between devices (0 on one device)
  double optimizer_ms = 0;      // SGD update
  double total_ms = 0;          // the whole iteration, wall clock
};

// One rank's share of an iteration (data-parallel and model-parallel strategies).
struct RankTimes {
  double compute_ms = 0;                // forward + backward on this device
  double communication_ms = 0;          // time spent in collectives (all of it)
  double exposed_communication_ms = 0;  // the part not hidden behind compute
  double optimizer_ms = 0;
  double total_ms = 0;  // barrier to barrier: includes waiting for peers
  int64_t bytes_sent = 0;
  int64_t samples = 0;  // examples this device processed
  // The communication time split over this device's receives (Transport::ReceiveTimes): waiting
  // for the peers and moving data. receives = 0 where it is not measured (NCCL, MPI, no
  // transport).
  double wait_ms = 0, move_ms = 0;
  int64_t receives = 0;
};

struct StepResult {
  double loss_sum = 0;  // summed over the global minibatch
  int64_t correct = 0;
  int64_t samples = 0;
  IterationTimes times;          // rank 0's phases; total_ms is the whole step's wall time
  std::vector<RankTimes> ranks;  // per device; empty for single-device strategies
  // Strategy-specific figures of this iteration (numbers only: the runner reports each one's
  // mean over the timed iterations), e.g. layer_split's measured bubble fraction.
  nlohmann::json detail = nlohmann::json::object();
  // The step is queued and its figures are not known yet (only `samples` is): the strategy did
  // not wait for the device. collect() returns them later, complete.
  bool pending = false;
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t samples = 0;
};

struct StrategySetup {
  std::vector<Device*> devices;    // the group, owned by the caller
  const Dataset* train = nullptr;  // both owned by the caller and alive as long as the strategy
  const Dataset* test = nullptr;
  // The model every rank trains (null: default_model()) and its initial parameters
  // (model->initial_parameters(seed)).
  std::shared_ptr<const Model> model;
  std::vector<float> initial_parameters;
  uint64_t seed = 0;  // the run's seed: dropout masks derive from it (dropout_seed)
  int64_t eval_batch = 1000;
  int64_t train_batch = 256;  // the global minibatch the run trains with (for profiling passes)
  // Under mpirun (the mpi launcher): this process runs one rank of a group spread over the
  // world's processes, and `devices` holds that rank's one device. Strategies that support it
  // (mpi_unsupported() empty) build their group with make_group (strategies/spmd_group.h).
  bool mpi = false;
  // Split each device's communication into waiting and moving (RankTimes::wait_ms, move_ms):
  // the transport marks every receive three times (Transport::set_receive_timing).
  bool communication_split = true;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Uploads data and parameters; called once, before anything else.
  virtual void setup(const StrategySetup& setup) = 0;
  // The epoch's global order of training examples (a permutation of the training set).
  virtual void begin_epoch(std::span<const int32_t> order) = 0;
  // Trains examples order[offset, offset+count) as one global minibatch with SGD step lr/count.
  // The result may be pending (StepResult::pending): the step is queued on the devices.
  virtual StepResult train_step(int64_t offset, int64_t count, float lr) = 0;
  // The figures of every pending step since the last call, complete and in step order: the
  // host waits for the devices here, once, and reads what the steps left on them. The runner
  // calls it at the end of each epoch, before evaluate() (and before it stops early).
  virtual std::vector<StepResult> collect() { return {}; }
  // Whether this strategy can train a global batch of `count` examples on its group; the
  // message says why not (e.g. data_parallel with a batch not divisible by the device count).
  virtual void check_batch(int64_t count) const { (void)count; }
  // The Error that setup() or check_batch() would raise for `model` on a group of `devices`
  // devices training global minibatches of each size in `batches`, raised on a strategy that
  // has not been set up (no device is touched): bench_runner checks every run of a descriptor
  // so before the first one starts. The default has nothing to check.
  virtual void check_plan(const Model& model, int devices, std::span<const int64_t> batches) {
    (void)model, (void)devices, (void)batches;
  }
  // Loss and accuracy over the whole test set.
  virtual EvalResult evaluate() = 0;
  // The model's parameters (flat, book order), as the host sees them after the last step.
  // Under mpirun a collective (every rank calls it; split models gather every rank's part).
  virtual std::vector<float> parameters() = 0;
  // Gradients of the last train_step's summed loss (flat, book order, summed over the global
  // minibatch), as the update used them.
  virtual std::vector<float> gradients() = 0;
  // Every replica's parameters (data parallel: one per device, which must stay bit-identical;
  // under mpirun a collective, like parameters()).
  virtual std::vector<std::vector<float>> replica_parameters() { return {parameters()}; }
  // Why the strategy, with these options, cannot run one rank per process under mpirun
  // (StrategySetup::mpi): what such a run is skipped with; "" where it can.
  virtual std::string mpi_unsupported() const { return "does not run one rank per process"; }
  // Options as resolved (reported in the results' run config).
  virtual nlohmann::json options() const = 0;
  // What the strategy decided and measured over the run, for the results' "strategy_report"
  // (e.g. layer_split's split points and the timeline of its last iteration); null if nothing.
  virtual nlohmann::json report() const { return nullptr; }
};

// Builds a strategy by name. `options` holds the run's strategy-specific keys; an unknown key is
// an Error naming `path` + key. An unknown name is an Error listing the known names.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const nlohmann::json& options,
                                        const std::string& path);
std::vector<std::string> known_strategies();

// The options that the multi-device strategies read alike: "cuda_graphs" (true or false, into
// cuda_graphs) and "read_back" ("step" or "epoch", into read_back). True where `key` is one of
// them; a bad value is an Error naming `path` + key.
bool read_step_option(const std::string& path, const std::string& key, const nlohmann::json& v,
                      bool& cuda_graphs, std::string& read_back);

}  // namespace paralab
