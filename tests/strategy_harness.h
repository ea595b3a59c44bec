// Trains a strategy on synthetic data for a few steps and compares it with single-device
// training: the harness of the strategy test suites (data_parallel, layer_split,
// channel_split). Synthetic data: these tests need no dataset.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/lenet.h"
#include "core/rng.h"
#include "strategies/strategy.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

using nlohmann::json;

// The message of the Error that fn throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline Dataset synthetic(int64_t count, uint64_t seed) {
  Dataset d;
  d.count = count;
  d.rows = d.cols = kImageSide;
  Rng rng(seed);
  d.images.resize(static_cast<std::size_t>(count * kImageSide * kImageSide));
  for (auto& p : d.images) p = static_cast<float>(rng.uniform());
  for (int64_t i = 0; i < count; ++i) d.labels.push_back(static_cast<int32_t>(rng.below(10)));
  return d;
}

struct Trained {
  std::vector<float> params;
  std::vector<float> first_gradients, last_gradients;  // of the first and the last step
  std::vector<std::vector<float>> replicas;
  std::vector<double> losses;
  EvalResult eval;  // after the last step
};

// Trains `steps` global batches of `batch` examples, in the same order for every strategy.
// A larger init scale than the book's so that 20 steps move every parameter measurably, and a
// learning rate small enough that training on random labels is not chaotic: at lr 0.1 this
// setup amplifies float rounding (1e-7) to a 10 % parameter difference within 15 steps, so no
// two summation orders could agree, however correct.
// lr_of(step): the learning rate of each step (default 0.05 throughout).
inline Trained train(const std::string& strategy, int devices, const json& options, int steps,
                     int64_t batch, const std::string& backend = "cpu",
                     const std::function<float(int)>& lr_of = nullptr) {
  static const Dataset train_set = synthetic(480, 1), test_set = synthetic(100, 2);
  DeviceOptions device_options;
  device_options.virtual_devices = true;  // CUDA: k devices may share one GPU
  auto owned = make_devices(backend, devices, device_options);
  std::vector<Device*> group;
  for (auto& d : owned) group.push_back(d.get());
  auto s = make_strategy(strategy, options, "runs.0");
  StrategySetup setup;
  setup.devices = group;
  setup.train = &train_set;
  setup.test = &test_set;
  setup.initial_parameters = lenet_initial_parameters(3, 0.1);
  setup.train_batch = batch;
  setup.eval_batch = 32;  // the 100 test examples in 4 batches, the last one short
  s->setup(setup);
  Rng shuffle(9);
  const auto order = random_permutation(train_set.count, shuffle);
  s->begin_epoch(order);
  Trained t;
  for (int i = 0; i < steps; ++i) {
    const int64_t offset = (i * batch) % (train_set.count - batch + 1);
    t.losses.push_back(s->train_step(offset, batch, lr_of ? lr_of(i) : 0.05f).loss_sum);
    if (i == 0) t.first_gradients = s->gradients();
  }
  t.last_gradients = s->gradients();
  t.params = s->parameters();
  t.eval = s->evaluate();
  t.replicas = s->replica_parameters();
  s.reset();  // before the devices it lives on
  return t;
}

// Per parameter tensor: |dp - single| <= 1e-5 * (|single| + max|single over the tensor|).
// The second term keeps parameters that pass near zero from demanding an impossible relative
// precision; any real error (a missing shard, a wrong scale) is orders of magnitude larger.
inline ::testing::AssertionResult close_per_tensor(const std::vector<float>& got,
                                                   const std::vector<float>& ref) {
  for (const auto& p : lenet_layout()) {
    const auto b = static_cast<std::size_t>(p.offset), e = b + shape_numel(p.shape);
    const std::vector<float> g(got.begin() + b, got.begin() + e),
        r(ref.begin() + b, ref.begin() + e);
    double scale = 0;
    for (float v : r) scale = std::max(scale, double(std::abs(v)));
    auto res = testing::all_close(g, r, 1e-5 * scale, 1e-5);
    if (!res) return res << " in " << p.name;
  }
  return ::testing::AssertionSuccess();
}

// The model-parallel strategies' bar: every step's loss (relative 1e-5), the gradients of the
// first and the last step and the final parameters (close_per_tensor), and the evaluation.
inline ::testing::AssertionResult matches_single(const Trained& got, const Trained& single) {
  for (std::size_t i = 0; i < single.losses.size(); ++i) {
    auto loss = testing::all_close(std::vector<double>{got.losses[i]},
                                   std::vector<double>{single.losses[i]}, 0, 1e-5);
    if (!loss) return loss << " in the loss of step " << i + 1;
  }
  if (auto r = close_per_tensor(got.first_gradients, single.first_gradients); !r)
    return r << " (gradients of step 1)";
  if (auto r = close_per_tensor(got.last_gradients, single.last_gradients); !r)
    return r << " (gradients of the last step)";
  if (auto r = close_per_tensor(got.params, single.params); !r) return r << " (parameters)";
  if (got.eval.samples != single.eval.samples || got.eval.correct != single.eval.correct)
    return ::testing::AssertionFailure()
           << "evaluation: " << got.eval.correct << "/" << got.eval.samples
           << " correct, single device " << single.eval.correct << "/" << single.eval.samples;
  return testing::all_close(std::vector<double>{got.eval.loss_sum},
                            std::vector<double>{single.eval.loss_sum}, 0, 1e-5)
         << " in the evaluation loss";
}

}  // namespace
}  // namespace paralab
