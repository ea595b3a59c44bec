// channel_split against single-device training (loss, every gradient and parameters at each of
// 10 SGD steps) for both pairings, its measured bytes against the analytic count, and its errors.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/graph_harness.h"
#include "tests/strategy_harness.h"

namespace paralab {
namespace {

TEST(ChannelSplit, TracksSingleDeviceForEveryDeviceCountAndPairing) {
  // Sanitizer builds (testing::kSanitizerBuild): up to 3 devices, whose uneven blocks and
  // three-rank collectives hold every hand-off that 4 even ones do.
  for (int k : {1, 2, 3, 4})  // k = 3 splits conv1's 20 channels 7/7/6, fc2's 10 units 4/3/3
    for (const char* pairing : {"none", "megatron"})
      if (!testing::kSanitizerBuild || k < 4) {
        EXPECT_TRUE(tracks_single("channel_split", k, {{"pairing", pairing}}, 10, 24))
            << pairing << " k=" << k;
      }
}

// The collectives between the channel blocks are split into waiting and moving.
TEST(ChannelSplit, CommunicationIsSplitIntoWaitingAndMoving) {
  Session s("channel_split", 2, json::object(), test_initial_parameters(), 24, "cpu");
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(communication_is_split(s.step(i, 0.05f)));
}

TEST(ChannelSplit, MegatronPairingWithEveryAllreduceTracksSingleDevice) {
  for (const char* algorithm : {"naive", "tree"}) {
    const json options = {{"pairing", "megatron"}, {"allreduce", algorithm}};
    EXPECT_TRUE(tracks_single("channel_split", 3, options, 10, 24)) << algorithm;
  }
}

TEST(ChannelSplit, CudaVirtualDevicesMatchSingleDevice) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (int k : {2, 4})
    for (const char* pairing : {"none", "megatron"})
      EXPECT_TRUE(tracks_single("channel_split", k, {{"pairing", pairing}}, 10, 24, "cuda"))
          << pairing << " k=" << k;
}

// One training step of `batch` on k devices; returns its detail (bytes sent and expected).
json one_step(int k, const std::string& pairing, int64_t batch) {
  Dataset data;
  data.count = batch;
  data.rows = data.cols = kImageSide;
  data.images.assign(static_cast<std::size_t>(batch * 784), 0.25f);
  data.labels.assign(static_cast<std::size_t>(batch), 1);
  auto owned = make_devices("cpu", k, {});
  std::vector<Device*> devices;
  for (auto& d : owned) devices.push_back(d.get());
  auto s = make_strategy("channel_split", {{"pairing", pairing}}, "runs.0");
  StrategySetup setup;
  setup.devices = devices;
  setup.train = setup.test = &data;
  setup.initial_parameters = lenet_initial_parameters(1);
  s->setup(setup);
  std::vector<int32_t> order(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) order[static_cast<std::size_t>(i)] = i;
  s->begin_epoch(order);
  json detail = s->train_step(0, batch, 0.1f).detail;
  detail["report"] = s->report();
  return detail;
}

TEST(ChannelSplit, MeasuredBytesEqualTheAnalyticCount) {
  // Floats per example each collective moves; a ring all-gather or reduce-scatter makes each
  // of them travel k-1 hops, an allreduce 2(k-1).
  //   none:     gathers 20*13*13 + 50*4*4 + 128 + 10, reduce-scatters 128 + 800 + 3380
  //   megatron: gathers 3380 + 10, allreduces 128 + 128, reduce-scatters 3380
  for (int k : {2, 3, 4}) {
    const int64_t n = 16;
    const json none = one_step(k, "none", n), megatron = one_step(k, "megatron", n);
    EXPECT_EQ(none["bytes_expected"].get<int64_t>(), 4 * n * (k - 1) * (4318 + 4308));
    EXPECT_EQ(none["bytes_sent"].get<int64_t>(), none["bytes_expected"].get<int64_t>());
    EXPECT_EQ(megatron["bytes_expected"].get<int64_t>(), 4 * n * (k - 1) * (3390 + 2 * 256 + 3380));
    EXPECT_EQ(megatron["bytes_sent"].get<int64_t>(), megatron["bytes_expected"].get<int64_t>());
  }
  const json report = one_step(3, "none", 4)["report"];
  EXPECT_EQ(report["output_channels"]["conv1"], json::array({7, 7, 6}));
  EXPECT_EQ(report["output_channels"]["fc2"], json::array({4, 3, 3}));
}

TEST(ChannelSplit, ErrorsNameTheProblem) {
  const auto error = error_of;
  EXPECT_EQ(error([] { train("channel_split", 11, json::object(), 1, 24); }),
            "channel_split: 11 devices, but fc2 has only 10 output channels to split (at most 10 "
            "devices)");
  auto option = [&](const json& o) {
    return error([&] { make_strategy("channel_split", o, "runs.3"); });
  };
  EXPECT_EQ(option({{"pairing", "alexnet"}}),
            "runs.3.pairing: unknown pairing 'alexnet' (known: megatron, none)");
  EXPECT_EQ(option({{"allreduce", "star"}}),
            "runs.3.allreduce: unknown allreduce 'star' (known: naive, nccl, ring, tree)");
  EXPECT_EQ(option({{"microbatches", 2}}),
            "runs.3.microbatches: unknown option for strategy 'channel_split' (known: pairing, "
            "allreduce, cuda_graphs, read_back)");
  EXPECT_EQ(option({{"cuda_graphs", "yes"}}), "runs.3.cuda_graphs: must be true or false");
  EXPECT_EQ(option({{"read_back", true}}),
            "runs.3.read_back: must be \"step\" or \"epoch\", got true");
}

// The all-gathers, reduce-scatters and (Megatron pairing) allreduces between the devices make
// one graph over the group: its replays compute the eager steps to the bit.
TEST(ChannelSplit, OneGraphOverTheGroupReplaysTheEagerStepsBitForBit) {
  for (const char* pairing : {"none", "megatron"})
    for (int k : {2, 3})
      EXPECT_TRUE(graph_replays_match_eager("channel_split", k, {{"pairing", pairing}}))
          << pairing << " k=" << k;
}

// The same with whole steps (PARALAB_STEP_MOVES=whole, devices of one memory: virtual devices
// of one GPU), each step of every collective moved for all ranks at once.
TEST(ChannelSplit, WholeStepsInOneGraphOverTheGroupReplayTheEagerStepsBitForBit) {
  testing::EnvGuard env("PARALAB_STEP_MOVES");
  env.set("whole");
  for (const char* pairing : {"none", "megatron"})
    for (int k : {2, 3})
      EXPECT_TRUE(graph_replays_match_eager("channel_split", k, {{"pairing", pairing}}, 24, 0))
          << pairing << " k=" << k;
}

// A group graph that cannot be made: that step and every later one run eagerly, to the bit.
// read_back "epoch": the group graph's launches are queued and read once, at collect(), to the
// bit of the eager steps, with both pairings (megatron's allreduces in the graph too).
TEST(ChannelSplit, ReadBackEpochQueuesTheLaunchesAndReadsThemOnce) {
  // Sanitizer builds (testing::kSanitizerBuild): 2 devices only (1 and 3 in the plain build).
  for (const char* pairing : {"none", "megatron"})
    for (int k : {1, 2, 3})
      if (!testing::kSanitizerBuild || k == 2) {
        EXPECT_TRUE(read_once_matches_eager("channel_split", k, {{"pairing", pairing}}))
            << pairing << " k=" << k;
      }
  EXPECT_TRUE(read_once_collects_a_diverged_run("channel_split", 2, {{"pairing", "megatron"}}));
}

// On a GPU: the launches read once per epoch give the bits of steps read one by one.
TEST(ChannelSplit, CudaReadBackEpochGivesTheBitsOfStepsReadOneByOne) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const char* pairing : {"none", "megatron"})
    for (int k : {2, 4})
      EXPECT_TRUE(cuda_read_once_matches_read_per_step("channel_split", k, {{"pairing", pairing}}))
          << pairing << " k=" << k;
}

// One capture serves the run: evaluations and an epoch's shorter last batch run in buffers and
// ops of their own, eagerly, and the next step launches the same graph, with the bits of eager
// steps, allocating nothing (graph_outlives_evaluations); both pairings.
TEST(ChannelSplit, OneGraphOutlivesEvaluationsAndShorterBatches) {
  for (const char* pairing : {"none", "megatron"})
    for (int k : {2, 3})
      if (!testing::kSanitizerBuild || k == 2) {
        EXPECT_TRUE(graph_outlives_evaluations("channel_split", k, {{"pairing", pairing}}))
            << pairing << " k=" << k;
      }
}

TEST(ChannelSplit, AFailedGroupCaptureRunsTheStepsEagerly) {
  for (const char* pairing : {"none", "megatron"})
    EXPECT_TRUE(failed_group_capture_runs_eagerly("channel_split", 2, {{"pairing", pairing}}))
        << pairing;
}

// An operation failing as one rank queues it into the group's capture: the peers stop too, the
// transport is reopened, and that step and every later one run eagerly, to the bit.
TEST(ChannelSplit, AnOperationFailingInTheGroupCaptureRunsTheStepsEagerly) {
  for (const char* pairing : {"none", "megatron"})
    for (const GroupCaptureFault& fault : operation_faults(
             {0, 1},
             {GroupCaptureFault::First, GroupCaptureFault::Middle, GroupCaptureFault::Last}))
      EXPECT_TRUE(
          failed_group_capture_runs_eagerly("channel_split", 2, {{"pairing", pairing}}, fault))
          << pairing << ", " << describe(fault);
}

// An error of the step itself, which an eager step meets too, still ends the run with it.
TEST(ChannelSplit, AnErrorOfTheStepItselfEndsTheRunAfterABrokenCapture) {
  for (const char* pairing : {"none", "megatron"})
    EXPECT_TRUE(group_step_error_ends_the_run("channel_split", 2, {{"pairing", pairing}}))
        << pairing;
}

// On a GPU: a capture over the group that breaks part-way (each device's 3rd fault point of
// its second capture, after the trial's, or one device's alone while the other waits for it)
// falls back to eager steps, to the bit.
TEST(ChannelSplit, CudaBrokenGroupCaptureRunsTheStepsEagerly) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const char* pairing : {"none", "megatron"})
    for (int device : {-1, 0, 1})
      EXPECT_TRUE(cuda_broken_capture_runs_eagerly("channel_split", 2, {{"pairing", pairing}}, 2, 3,
                                                   6, device))
          << pairing << ", device " << device;
}

// On a GPU: one graph over 2 (or 4) virtual devices computes the eager steps to the bit.
TEST(ChannelSplit, CudaGroupGraphMatchesEagerStepsBitForBit) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const char* pairing : {"none", "megatron"})
    EXPECT_TRUE(cuda_graphs_match_eager("channel_split", 2, {{"pairing", pairing}})) << pairing;
}

// On a GPU: one capture serves three rounds of steps, shorter batches and evaluations, with the
// bits of eager steps (graph_outlives_evaluations).
TEST(ChannelSplit, CudaOneGraphOutlivesEvaluationsAndShorterBatches) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const char* pairing : {"none", "megatron"})
    EXPECT_TRUE(graph_outlives_evaluations("channel_split", 2, {{"pairing", pairing}}, true))
        << pairing;
}

}  // namespace
}  // namespace paralab
