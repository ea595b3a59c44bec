// data_parallel against single-device training on the same global batches, replica identity,
// and the batch-split errors. Synthetic data: these tests need no dataset.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/lenet.h"
#include "core/rng.h"
#include "strategies/strategy.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

using nlohmann::json;

Dataset synthetic(int64_t count, uint64_t seed) {
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
  std::vector<std::vector<float>> replicas;
  std::vector<double> losses;
};

// Trains `steps` global batches of `batch` examples, in the same order for every strategy.
// A larger init scale than the book's so that 20 steps move every parameter measurably, and a
// learning rate small enough that training on random labels is not chaotic: at lr 0.1 this
// setup amplifies float rounding (1e-7) to a 10 % parameter difference within 15 steps, so no
// two summation orders could agree, however correct.
Trained train(const std::string& strategy, int devices, const json& options, int steps,
              int64_t batch, const std::string& backend = "cpu") {
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
  s->setup(setup);
  Rng shuffle(9);
  const auto order = random_permutation(train_set.count, shuffle);
  s->begin_epoch(order);
  Trained t;
  for (int i = 0; i < steps; ++i) {
    const int64_t offset = (i * batch) % (train_set.count - batch + 1);
    t.losses.push_back(s->train_step(offset, batch, 0.05f).loss_sum);
  }
  t.params = s->parameters();
  t.replicas = s->replica_parameters();
  s.reset();  // before the devices it lives on
  return t;
}

// Per parameter tensor: |dp - single| <= 1e-5 * (|single| + max|single over the tensor|).
// The second term keeps parameters that pass near zero from demanding an impossible relative
// precision; any real error (a missing shard, a wrong scale) is orders of magnitude larger.
::testing::AssertionResult close_per_tensor(const std::vector<float>& got,
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

TEST(DataParallel, MatchesSingleDeviceAfter20Steps) {
  const Trained single = train("single", 1, json::object(), 20, 24);
  for (const char* algorithm : {"naive", "ring", "tree"}) {
    for (int k : {2, 3, 4}) {
      const Trained dp = train("data_parallel", k, {{"allreduce", algorithm}}, 20, 24);
      EXPECT_TRUE(close_per_tensor(dp.params, single.params)) << algorithm << " k=" << k;
      EXPECT_NEAR(dp.losses.back(), single.losses.back(), 1e-4 * std::abs(single.losses.back()))
          << algorithm << " k=" << k;
    }
  }
}

TEST(DataParallel, CudaVirtualDevicesMatchSingleDevice) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  const Trained single = train("single", 1, json::object(), 20, 24, "cuda");
  for (int k : {2, 4}) {
    const Trained dp = train("data_parallel", k, {{"allreduce", "ring"}}, 20, 24, "cuda");
    EXPECT_TRUE(close_per_tensor(dp.params, single.params)) << "k=" << k;
    for (std::size_t r = 1; r < dp.replicas.size(); ++r)
      EXPECT_EQ(dp.replicas[r], dp.replicas[0]) << "k=" << k << " replica " << r;
  }
}

TEST(DataParallel, GroupingAndOverlapMatchSingleDevice) {
  const Trained single = train("single", 1, json::object(), 20, 24);
  const std::vector<json> variants = {
      {{"allreduce", "ring"}, {"grouping", "per_tensor"}},
      {{"allreduce", "ring"}, {"grouping", "bucketed"}, {"bucket_bytes", 4096}, {"overlap", true}},
      {{"allreduce", "tree"}, {"grouping", "per_tensor"}, {"overlap", true}},
      {{"allreduce", "naive"}, {"grouping", "bucketed"}, {"overlap", true}},
  };
  for (const json& v : variants) {
    const Trained dp = train("data_parallel", 3, v, 20, 24);
    EXPECT_TRUE(close_per_tensor(dp.params, single.params)) << v.dump();
  }
}

TEST(DataParallel, OverlapDoesNotChangeTheArithmetic) {
  // The same buckets reduced by the same algorithm: overlapping them with backward changes when
  // they are reduced, not what is added to what.
  const json base = {{"allreduce", "ring"}, {"grouping", "bucketed"}, {"bucket_bytes", 4096}};
  json overlapped = base;
  overlapped["overlap"] = true;
  EXPECT_EQ(train("data_parallel", 3, base, 10, 24).params,
            train("data_parallel", 3, overlapped, 10, 24).params);
}

TEST(DataParallel, ReplicasStayBitIdenticalAfter50Steps) {
  for (const char* algorithm : {"naive", "ring", "tree"}) {
    const Trained dp = train("data_parallel", 3, {{"allreduce", algorithm}}, 50, 24);
    ASSERT_EQ(dp.replicas.size(), 3u);
    for (std::size_t r = 1; r < dp.replicas.size(); ++r)
      EXPECT_EQ(dp.replicas[r], dp.replicas[0]) << algorithm << ": replica " << r;
  }
}

TEST(DataParallel, UnevenShardsWeightEveryExampleEqually) {
  const Trained single = train("single", 1, json::object(), 20, 25);
  const Trained dp = train("data_parallel", 3, {{"uneven_shards", true}}, 20, 25);  // 9/8/8
  EXPECT_TRUE(close_per_tensor(dp.params, single.params));
}

TEST(DataParallel, NonDivisibleBatchIsAClearError) {
  try {
    train("data_parallel", 3, json::object(), 1, 256);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "data_parallel: global batch 256 is not divisible by 3 devices (set "
                 "\"uneven_shards\": true to allow shards that differ by one)");
  }
}

TEST(DataParallel, BadOptionsNameTheirPath) {
  auto error = [](const json& options) {
    try {
      make_strategy("data_parallel", options, "runs.2");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error({{"allreduce", "butterfly"}}),
            "runs.2.allreduce: unknown allreduce 'butterfly' (known: naive, ring, tree)");
  EXPECT_EQ(error({{"grouping", "all"}}),
            "runs.2.grouping: unknown grouping 'all' (known: bucketed, per_tensor)");
  EXPECT_EQ(error({{"overlap", 1}}), "runs.2.overlap: must be true or false");
  EXPECT_NE(error({{"allredcue", "ring"}}).find("runs.2.allredcue: unknown option"),
            std::string::npos);
}

}  // namespace
}  // namespace paralab
