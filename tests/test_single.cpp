// single: its options, and CUDA-graph replay against eager steps (CUDA only).
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/strategy_harness.h"

namespace paralab {
namespace {

TEST(Single, OptionsAreCheckedWithTheirPath) {
  auto error = [](const json& options) {
    try {
      make_strategy("single", options, "runs.4");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error({{"cuda_graphs", 1}}), "runs.4.cuda_graphs: must be true or false");
  EXPECT_EQ(error({{"ring", true}}),
            "runs.4.ring: unknown option for strategy 'single' (known: cuda_graphs)");
  EXPECT_EQ(make_strategy("single", json::object(), "runs.0")->options(),
            (json{{"cuda_graphs", true}}));
  EXPECT_EQ(make_strategy("single", {{"cuda_graphs", false}}, "runs.0")->options(),
            (json{{"cuda_graphs", false}}));
}

TEST(Single, CpuDevicesIgnoreTheGraphOption) {
  const Trained with = train("single", 1, {{"cuda_graphs", true}}, 5, 24);
  const Trained without = train("single", 1, {{"cuda_graphs", false}}, 5, 24);
  EXPECT_EQ(with.params, without.params);
  EXPECT_EQ(with.losses, without.losses);
}

TEST(Single, CudaGraphReplayMatchesEagerStepsBitForBit) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  // 20 steps: the first eager, the second captured, the rest replayed; the same kernels with
  // the same (deterministic) algorithms, so the same bits.
  const Trained graphs = train("single", 1, {{"cuda_graphs", true}}, 20, 24, "cuda");
  const Trained eager = train("single", 1, {{"cuda_graphs", false}}, 20, 24, "cuda");
  EXPECT_EQ(graphs.losses, eager.losses);
  EXPECT_EQ(graphs.params, eager.params);
  EXPECT_EQ(graphs.eval.correct, eager.eval.correct);
}

}  // namespace
}  // namespace paralab
