// Strategy: how one global minibatch is trained across a group of devices.
//
// bench_runner's training loop does not know which strategy it runs: it hands the strategy the
// epoch's example order, asks it to train global minibatches (slices of that order) and to
// evaluate. The strategy owns devices, replicas and communication, and never includes a backend
// header (it sees Device, Ops and LeNet only).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/fashion_mnist.h"

namespace paralab {

// Milliseconds of one training iteration, measured by the strategy (device-synchronised).
struct IterationTimes {
  double forward_ms = 0;        // minibatch gather, forward pass and loss
  double backward_ms = 0;       // backward pass (gradients)
  double communication_ms = 0;  // collectives, transfers between devices (0 on one device)
  double optimizer_ms = 0;      // SGD update
  double total_ms = 0;          // the whole iteration, wall clock
};

struct StepResult {
  double loss_sum = 0;  // summed over the global minibatch
  int64_t correct = 0;
  int64_t samples = 0;
  IterationTimes times;
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t samples = 0;
};

struct StrategySetup {
  std::vector<Device*> devices;  // the group, owned by the caller
  const Dataset* train = nullptr;
  const Dataset* test = nullptr;
  std::vector<float> initial_parameters;  // lenet_initial_parameters(seed)
  int64_t eval_batch = 1000;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Uploads data and parameters; called once, before anything else.
  virtual void setup(const StrategySetup& setup) = 0;
  // The epoch's global order of training examples (a permutation of the training set).
  virtual void begin_epoch(std::span<const int32_t> order) = 0;
  // Trains examples order[offset, offset+count) as one global minibatch with SGD step lr/count.
  virtual StepResult train_step(int64_t offset, int64_t count, float lr) = 0;
  // Loss and accuracy over the whole test set.
  virtual EvalResult evaluate() = 0;
  // The model's parameters (flat, book order), as the host sees them after the last step.
  virtual std::vector<float> parameters() = 0;
  // Options as resolved (reported in the results' run config).
  virtual nlohmann::json options() const = 0;
};

// Builds a strategy by name. `options` holds the run's strategy-specific keys; an unknown key is
// an Error naming `path` + key. An unknown name is an Error listing the known names.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const nlohmann::json& options,
                                        const std::string& path);
std::vector<std::string> known_strategies();

}  // namespace paralab
