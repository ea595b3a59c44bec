// single: its options, and CUDA-graph replay against eager steps (CUDA only).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "strategies/deferred_steps.h"
#include "tests/graph_harness.h"
#include "tests/recording_device.h"
#include "tests/strategy_harness.h"
#if PARALAB_HAVE_CUDA
#include "core/cuda/step_trace.h"
#endif

namespace paralab {
namespace {

TEST(Single, OptionsAreCheckedWithTheirPath) {
  auto error = [](const json& options) {
    return error_of([&] { make_strategy("single", options, "runs.4"); });
  };
  EXPECT_EQ(error({{"cuda_graphs", 1}}), "runs.4.cuda_graphs: must be true or false");
  EXPECT_EQ(error({{"ring", true}}),
            "runs.4.ring: unknown option for strategy 'single' (known: cuda_graphs, read_back, "
            "steps_per_launch)");
  EXPECT_EQ(error({{"read_back", "later"}}),
            "runs.4.read_back: must be \"auto\", \"step\" or \"epoch\", got \"later\"");
  EXPECT_EQ(error({{"read_back", 1}}),
            "runs.4.read_back: must be \"auto\", \"step\" or \"epoch\", got 1");
  for (const json& bad : {json(0), json(65), json(2.5), json("8"), json(true)})
    EXPECT_EQ(error({{"steps_per_launch", bad}}),
              "runs.4.steps_per_launch: must be an integer from 1 to 64, got " + bad.dump());
  EXPECT_EQ(error({{"steps_per_launch", 8}, {"read_back", "step"}}),
            "runs.4.steps_per_launch: 8 steps per launch are read together: needs read_back "
            "\"epoch\" or \"auto\", not \"step\"");
  EXPECT_EQ(make_strategy("single", json::object(), "runs.0")->options(),
            (json{{"cuda_graphs", true}, {"read_back", "auto"}, {"steps_per_launch", 1}}));
  EXPECT_EQ(
      make_strategy("single",
                    {{"cuda_graphs", false}, {"read_back", "epoch"}, {"steps_per_launch", 64}},
                    "runs.0")
          ->options(),
      (json{{"cuda_graphs", false}, {"read_back", "epoch"}, {"steps_per_launch", 64}}));
}

TEST(Single, CpuDevicesIgnoreTheGraphOption) {
  const Trained with = train("single", 1, {{"cuda_graphs", true}}, 5, 24);
  const Trained without = train("single", 1, {{"cuda_graphs", false}}, 5, 24);
  EXPECT_EQ(with.params, without.params);
  EXPECT_EQ(with.losses, without.losses);
}

// A CPU device that claims it can capture: "captured" work runs at once (the CPU cannot defer
// it) and a launch only counts. Enough to check when single captures, replays and runs eagerly,
// and that nothing a real capture forbids (allocation, synchronisation, host copies) happens
// while capturing.
class FakeCaptureDevice final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  void* allocate(std::size_t bytes) override {
    forbidden("allocate");
    void* p = ForwardingDevice::allocate(bytes);
    live.insert(p);
    return p;
  }
  void deallocate(void* p) noexcept override {
    live.erase(p);
    freed.push_back(p);
    ForwardingDevice::deallocate(p);
  }
  void copy_from_host(void* d, const void* s, std::size_t n) override {
    forbidden("copy_from_host");
    ForwardingDevice::copy_from_host(d, s, n);
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override {
    forbidden("copy_to_host");
    ForwardingDevice::copy_to_host(d, s, n);
  }
  void synchronize() override { forbidden("synchronize"); }
  bool queues_work() const override { return queues; }
  bool supports_capture() const override { return true; }
  void begin_capture() override {
    EXPECT_FALSE(capturing_) << "nested capture";
    capturing_ = true;
  }
  std::unique_ptr<CapturedWork> end_capture() override {
    EXPECT_TRUE(capturing_) << "end_capture without begin_capture";
    std::this_thread::sleep_for(capture_cost);
    capturing_ = false;
    ++captures;
    struct Graph final : CapturedWork {
      Graph(int& n, json d) : launches(n), described(std::move(d)) {}
      void launch() override { ++launches; }
      json describe() const override { return described; }
      int& launches;
      json described;
    };
    return std::make_unique<Graph>(launches, json{{"census", {{"nodes", captures}}}});
  }
  int captures = 0, launches = 0;
  std::set<void*> live;                       // what is allocated now
  std::vector<void*> freed;                   // every deallocation, in order
  std::chrono::milliseconds capture_cost{0};  // what instantiating the graph takes
  bool queues = false;                        // claim to queue work, as a GPU does

 private:
  void forbidden(const char* what) const {
    EXPECT_FALSE(capturing_) << what << " during a capture";
  }
  bool capturing_ = false;
};

// `single` (default options unless given) on `dev`, set up on `data` and into its first epoch.
std::unique_ptr<Strategy> single_on(Device& dev, const Dataset& data,
                                    const json& options = json::object()) {
  auto s = make_strategy("single", options, "runs.0");
  StrategySetup setup;
  setup.devices = {&dev};
  setup.train = setup.test = &data;
  setup.initial_parameters = lenet_initial_parameters(3, 0.1);
  s->setup(setup);
  Rng shuffle(1);
  s->begin_epoch(random_permutation(data.count, shuffle));
  return s;
}

TEST(Single, CapturesTheFirstBatchSizeOnceAndReplaysAnyLr) {
  static const Dataset data = synthetic(96, 5);
  auto cpu = make_devices("cpu", 1, {});
  FakeCaptureDevice dev(*cpu[0]);
  auto s = single_on(dev, data);
  auto replayed = [&](int64_t offset, int64_t count, float lr) {
    return s->train_step(offset, count, lr).detail.at("cuda_graph_replay").get<int>();
  };
  // The first step runs eagerly; the second captures and replays; then replays.
  EXPECT_EQ(replayed(0, 16, 0.1f), 0);
  // A run that ended here made no graph, and says so.
  EXPECT_EQ(s->report(), (json{{"cuda_graphs",
                                "not used: no second step of one batch size ran (the first runs "
                                "eagerly)"}}));
  EXPECT_EQ(replayed(16, 16, 0.1f), 1);
  EXPECT_EQ(replayed(32, 16, 0.1f), 1);
  EXPECT_EQ(dev.captures, 1);
  EXPECT_EQ(dev.launches, 2);
  // A new learning rate (warm-up) replays the same graph: the step is read on the device.
  EXPECT_EQ(replayed(48, 16, 0.2f), 1);
  EXPECT_EQ(replayed(64, 16, 0.3f), 1);
  // A step of another size (an epoch's shorter last batch) runs eagerly, in buffers of its
  // own, every time; the graph stays, and so it does across evaluations.
  EXPECT_EQ(replayed(64, 8, 0.2f), 0);
  EXPECT_EQ(replayed(72, 8, 0.2f), 0);
  EXPECT_EQ(replayed(0, 16, 0.2f), 1);
  s->evaluate();
  EXPECT_EQ(replayed(16, 16, 0.2f), 1);
  EXPECT_EQ(replayed(80, 8, 0.2f), 0);
  s->evaluate();
  EXPECT_EQ(replayed(0, 16, 0.2f), 1);
  EXPECT_EQ(dev.captures, 1);
  // The report holds what the graph held (its describe(): on CUDA, the graph's census).
  EXPECT_EQ(s->report(), (json{{"cuda_graphs", "used"},
                               {"cuda_graph_captures", 1},
                               {"cuda_graph_replays", 7},
                               {"cuda_graph", {{"census", {{"nodes", 1}}}}}}));
  s.reset();
}

// Neither an evaluation nor a step of another batch size frees anything that existed when the
// step was captured (a graph replays fixed pointers: on a GPU a freed buffer may be handed out
// again while the graph still writes it), and the step after them replays the same graph,
// epoch after epoch. (This device's replays only count; the recording device below computes
// them.)
TEST(Single, EvaluationsAndShorterBatchesFreeNothingTheCapturedStepUses) {
  static const Dataset data = synthetic(96, 5);
  auto cpu = make_devices("cpu", 1, {});
  FakeCaptureDevice dev(*cpu[0]);
  auto s = single_on(dev, data);
  const auto replayed = [&](int64_t offset, int64_t count) {
    return s->train_step(offset, count, 0.1f).detail.at("cuda_graph_replay").get<int>();
  };
  EXPECT_EQ(replayed(0, 16), 0);
  EXPECT_EQ(replayed(16, 16), 1);  // captured
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::set<void*> before = dev.live;
    dev.freed.clear();
    EXPECT_EQ(replayed(80, 12), 0) << "epoch " << epoch;
    s->evaluate();
    for (void* p : dev.freed) EXPECT_EQ(before.count(p), 0u) << "epoch " << epoch;
    EXPECT_EQ(replayed(32, 16), 1) << "epoch " << epoch;
  }
  EXPECT_EQ(dev.captures, 1);
  s.reset();
}

// Three rounds (epochs) of 9 queued steps of `batch` and a shorter last one, each round
// collected and followed by an evaluation, on `graphed` and on `eager`: every step's loss, every
// evaluation and the parameters the same to the bit, and one capture in all on the graphed side.
void expect_replays_across_evaluations_match(Session& graphed, Session& eager, int64_t batch,
                                             const std::string& what) {
  std::vector<double> got, want;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 9; ++i) {
      graphed.queue(i, 0.05f);
      want.push_back(eager.step(i, 0.05f).loss_sum);
    }
    graphed->train_step(9 * batch, batch / 2, 0.05f);
    want.push_back(eager->train_step(9 * batch, batch / 2, 0.05f).loss_sum);
    for (const StepResult& r : graphed->collect()) got.push_back(r.loss_sum);
    const EvalResult ge = graphed->evaluate(), ee = eager->evaluate();
    EXPECT_EQ(ge.loss_sum, ee.loss_sum) << what << ", round " << round;
    EXPECT_EQ(ge.correct, ee.correct) << what << ", round " << round;
  }
  EXPECT_EQ(got, want) << what;
  EXPECT_EQ(graphed->parameters(), eager->parameters()) << what;
  EXPECT_EQ(graphed->report().value("cuda_graph_captures", -1), 1) << graphed->report().dump();
}

// Replays across evaluations and shorter batches compute what eager steps with the same
// evaluations and batches between them do, to the bit (one step per launch and several).
TEST(Single, ReplaysAcrossEvaluationsGiveTheBitsOfEagerSteps) {
  for (const int per_launch : {1, 2}) {
    auto cpu = make_devices("cpu", 2, {});
    testing::RecordingDevice dev(*cpu[0]);
    const int64_t batch = 16;
    Session graphed("single", {&dev}, {{"steps_per_launch", per_launch}}, test_initial_parameters(),
                    batch);
    Session eager("single", {cpu[1].get()}, {{"cuda_graphs", false}}, test_initial_parameters(),
                  batch);
    expect_replays_across_evaluations_match(graphed, eager, batch,
                                            std::to_string(per_launch) + " per launch");
    EXPECT_TRUE(dev.violations.empty()) << dev.violations.front();
  }
}

TEST(Single, AStepThatCapturesCountsTheCaptureInItsTime) {
  static const Dataset data = synthetic(64, 5);
  auto cpu = make_devices("cpu", 1, {});
  FakeCaptureDevice dev(*cpu[0]);
  dev.capture_cost = std::chrono::milliseconds(30);
  auto s = single_on(dev, data);
  s->train_step(0, 16, 0.1f);  // eager
  const StepResult captured = s->train_step(16, 16, 0.1f);
  EXPECT_EQ(dev.captures, 1);
  EXPECT_GE(captured.times.total_ms, 30.0);  // waiting can only make it longer
  s.reset();
}

// A CPU device that claims to queue its work, as a GPU does, and counts what would stall a GPU's
// host: synchronisations and copies to the host.
class QueuingDevice final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  bool queues_work() const override { return true; }
  void synchronize() override {
    ++synchronizations;
    ForwardingDevice::synchronize();
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override {
    ++host_reads;
    ForwardingDevice::copy_to_host(d, s, n);
  }
  int synchronizations = 0, host_reads = 0;
};

// On a device that queues work, read_back "auto" queues an epoch's steps without waiting for
// any: their figures come from collect(), in one synchronisation and one read, and are the
// very figures of steps read one by one.
TEST(Single, QueuedStepsAreReadOnceWithTheFiguresOfStepsReadOneByOne) {
  static const Dataset data = synthetic(96, 5);
  auto cpu = make_devices("cpu", 2, {});
  QueuingDevice dev(*cpu[0]);
  auto queued = single_on(dev, data, {{"cuda_graphs", false}});  // eager: computed for real
  auto direct = single_on(*cpu[1], data, {{"cuda_graphs", false}});
  EXPECT_EQ(queued->options()["read_back"], "epoch");
  EXPECT_EQ(direct->options()["read_back"], "step");  // a CPU device's work is done when queued
  std::vector<StepResult> expected;
  for (int i = 0; i < 5; ++i) {
    const float lr = 0.05f * static_cast<float>(1 + i);
    const StepResult r = queued->train_step(16 * i, 16, lr);
    EXPECT_TRUE(r.pending);
    EXPECT_EQ(r.samples, 16);
    expected.push_back(direct->train_step(16 * i, 16, lr));
    EXPECT_FALSE(expected.back().pending);
  }
  EXPECT_EQ(dev.synchronizations, 0);
  EXPECT_EQ(dev.host_reads, 0);
  const std::vector<StepResult> got = queued->collect();
  EXPECT_EQ(dev.synchronizations, 1);
  EXPECT_EQ(dev.host_reads, 1);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(got[i].pending);
    EXPECT_EQ(got[i].loss_sum, expected[i].loss_sum) << "step " << i;
    EXPECT_EQ(got[i].correct, expected[i].correct) << "step " << i;
    EXPECT_EQ(got[i].samples, 16);
    EXPECT_GT(got[i].times.total_ms, 0.0);
    EXPECT_GE(got[i].times.total_ms,
              got[i].times.forward_ms + got[i].times.backward_ms + got[i].times.optimizer_ms);
  }
  EXPECT_TRUE(queued->collect().empty());
  EXPECT_EQ(queued->parameters(), direct->parameters());
  // Evaluation reads its batches' figures once, too.
  const int reads = dev.host_reads;
  const EvalResult eq = queued->evaluate(), ed = direct->evaluate();
  EXPECT_EQ(dev.host_reads, reads + 1);
  EXPECT_EQ(eq.loss_sum, ed.loss_sum);
  EXPECT_EQ(eq.correct, ed.correct);
  EXPECT_EQ(eq.samples, ed.samples);
  // More steps than one slot chunk holds: still one read per 512 steps.
  for (int i = 0; i < 600; ++i) queued->train_step(0, 4, 0.01f);
  dev.host_reads = 0;
  EXPECT_EQ(queued->collect().size(), 600u);
  EXPECT_EQ(dev.host_reads, 2);
  queued.reset();
  direct.reset();
}

// DeferredSteps: a step holds as many stats slots as losses it computed (a pipeline's last stage
// one per micro-batch, other stages none), summed in order, the loss in double; the slots of
// several steps are read in one copy; a step noted with other than the slots saved for it is
// an error naming both counts. merge_rank_steps sums the ranks' figures and takes the slowest
// rank's time.
TEST(DeferredSteps, StepsHoldTheirOwnNumberOfStatsSlots) {
  auto cpu = make_devices("cpu", 1, {});
  QueuingDevice dev(*cpu[0]);
  DeferredSteps steps(dev);
  const auto stats = [&](float loss, float correct) {
    return Tensor::from_host(dev, {2}, std::vector<float>{loss, correct});
  };
  const Tensor a = stats(0.1f, 3), b = stats(16777216.0f, 4), c = stats(1.0f, 5);
  for (const Tensor* t : {&a, &b, &c}) steps.save_stats(*t);
  QueuedStep three;
  three.stats = 3;
  three.samples = 12;
  three.start = three.end = dev.mark();
  steps.add(three);
  QueuedStep none;
  none.stats = 0;
  none.start = none.end = dev.mark();
  steps.add(none);
  steps.save_stats(c);
  EXPECT_EQ(error_of([&] { steps.add(none); }),
            "deferred steps: a step noted with 0 stats slots, 1 saved for it");
  QueuedStep one;
  one.start = one.end = dev.mark();
  steps.add(one);
  dev.host_reads = dev.synchronizations = 0;
  const std::vector<StepResult> got = steps.collect();
  EXPECT_EQ(dev.synchronizations, 1);
  EXPECT_EQ(dev.host_reads, 1);
  ASSERT_EQ(got.size(), 3u);
  // In double: 0.1f + 2^24 + 1 keeps the 1 and the 0.1 that a float sum would lose.
  EXPECT_EQ(got[0].loss_sum, (static_cast<double>(0.1f) + 16777216.0) + 1.0);
  EXPECT_EQ(got[0].correct, 12);
  EXPECT_EQ(got[0].samples, 12);
  EXPECT_EQ(got[1].loss_sum, 0.0);
  EXPECT_EQ(got[1].correct, 0);
  EXPECT_EQ(got[2].loss_sum, 1.0);
  EXPECT_EQ(got[2].correct, 5);
  EXPECT_TRUE(steps.collect().empty());

  // A graph of several steps: one copy of their stats (across a chunk's end: one copy per
  // chunk), one queued entry; each step its own slot and a share of the entry's time.
  for (int i = 0; i < 510; ++i) steps.save_stats(a);
  QueuedStep many;
  many.stats = many.steps = 510;
  many.start = many.end = dev.mark();
  steps.add(many);
  std::vector<float> six;
  for (int i = 0; i < 6; ++i) six.insert(six.end(), {static_cast<float>(i), static_cast<float>(i)});
  steps.save_stats(Tensor::from_host(dev, {12}, six));
  QueuedStep launch;
  launch.stats = launch.steps = 6;
  launch.samples = 4;
  launch.start = dev.mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(12));
  launch.end = dev.mark();
  launch.from_previous = false;
  steps.add(launch);
  const std::vector<StepResult> all = steps.collect();
  ASSERT_EQ(all.size(), 516u);
  for (int i = 0; i < 6; ++i) {
    const StepResult& r = all[static_cast<std::size_t>(510 + i)];
    EXPECT_EQ(r.loss_sum, i);
    EXPECT_EQ(r.correct, i);
    EXPECT_EQ(r.samples, 4);
    EXPECT_EQ(r.times.total_ms, all[510].times.total_ms);
  }
  EXPECT_GE(all[510].times.total_ms * 6, 12.0);
  steps.save_stats(Tensor::from_host(dev, {4}, std::vector<float>{1, 1, 1, 1}));
  QueuedStep odd;
  odd.stats = 2;
  odd.steps = 3;
  EXPECT_EQ(error_of([&] { steps.add(odd); }), "deferred steps: 2 stats slots for 3 steps");
  odd.steps = 2;
  odd.phases = true;
  EXPECT_EQ(error_of([&] { steps.add(odd); }),
            "deferred steps: 2 stats slots for 2 steps with phases (only a single step's are "
            "timed)");
  EXPECT_EQ(error_of([&] { steps.save_stats(Tensor::zeros(dev, {3})); }),
            "deferred steps: stats must be pairs of floats, got (3)");

  std::vector<std::vector<StepResult>> per(2, std::vector<StepResult>(2));
  per[0][0].loss_sum = 1.5;
  per[0][0].samples = 8;
  per[0][0].times.total_ms = 2.0;
  per[0][0].detail = {{"cuda_graph_replay", 1}};
  per[1][0].loss_sum = 0.5;
  per[1][0].correct = 3;
  per[1][0].samples = 8;
  per[1][0].times.total_ms = 3.0;
  const std::vector<StepResult> merged = merge_rank_steps(per, "x_split");
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].loss_sum, 2.0);
  EXPECT_EQ(merged[0].correct, 3);
  EXPECT_EQ(merged[0].samples, 16);
  EXPECT_EQ(merged[0].times.total_ms, 3.0);
  EXPECT_EQ(merged[0].detail, json({{"cuda_graph_replay", 1}}));
  per[1].pop_back();
  EXPECT_EQ(error_of([&] { merge_rank_steps(per, "x_split"); }),
            "x_split: the ranks queued different numbers of steps");
}

// Queued graph replays: the capture's host time is counted in its step, replays are flagged,
// and collect() keeps the order.
TEST(Single, QueuedReplaysKeepTheirOrderAndTheCaptureTime) {
  static const Dataset data = synthetic(64, 5);
  auto cpu = make_devices("cpu", 1, {});
  FakeCaptureDevice dev(*cpu[0]);
  dev.queues = true;
  dev.capture_cost = std::chrono::milliseconds(30);
  auto s = single_on(dev, data);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(s->train_step(16 * i, 16, 0.1f).pending);
  const std::vector<StepResult> got = s->collect();
  ASSERT_EQ(got.size(), 4u);
  std::vector<int> replayed;
  for (const StepResult& r : got) replayed.push_back(r.detail.at("cuda_graph_replay").get<int>());
  EXPECT_EQ(replayed, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(dev.captures, 1);
  EXPECT_EQ(dev.launches, 3);
  EXPECT_GE(got[1].times.total_ms, 30.0);
  EXPECT_LT(got[2].times.total_ms, 30.0);
  s.reset();
}

// The two ways a capture fails on the recording device: its end (a graph the GPU cannot make),
// or an operation queued into it (a call that a CUDA capture does not allow: the step's third).
// Sets the fault on dev and returns its message.
enum class CaptureFault { End, Operation };
std::string fail_captures(testing::RecordingDevice& dev, CaptureFault fault) {
  if (fault == CaptureFault::End)
    return dev.fail_end_capture = "cudaGraphInstantiate: out of memory (simulated)";
  dev.fail_in_capture_at = 3;
  return dev.fail_in_capture = "cuda: cudaErrorStreamCaptureUnsupported (simulated)";
}

// After the one capture a run tried failed (the recording device's simulated fault `why`): the
// graphed run's parameters are the eager run's, and its report says why it has no graphs.
void expect_eager_after_a_failed_capture(Strategy& graphed, Strategy& eager,
                                         const testing::RecordingDevice& dev,
                                         const std::string& why) {
  EXPECT_EQ(graphed.parameters(), eager.parameters());
  EXPECT_EQ(dev.failed_end_captures + dev.failed_in_capture, 1);
  EXPECT_EQ(graphed.report(), (json{{"cuda_graphs", "not used: capture failed: " + why}}));
  EXPECT_TRUE(dev.violations.empty()) << dev.violations.front();
}

// A step that cannot be made a graph (end_capture fails, as on a GPU that cannot instantiate
// it, or an operation fails as it is queued into the capture) runs eagerly, and so does every
// later one, to the bit as with graphs off; no capture is tried again, even after an
// evaluation; the report says why.
TEST(Single, AFailedCaptureRunsTheStepsEagerly) {
  static const Dataset data = synthetic(96, 5);
  for (CaptureFault fault : {CaptureFault::End, CaptureFault::Operation}) {
    auto cpu = make_devices("cpu", 2, {});
    testing::RecordingDevice dev(*cpu[0]);
    const std::string why = fail_captures(dev, fault);
    SCOPED_TRACE(why);
    auto graphed = single_on(dev, data, {{"read_back", "step"}});
    auto eager = single_on(*cpu[1], data, {{"cuda_graphs", false}});
    for (int i = 0; i < 5; ++i) {
      if (i == 3) {
        EXPECT_EQ(graphed->evaluate().loss_sum, eager->evaluate().loss_sum);
      }
      const StepResult g = graphed->train_step(16 * i, 16, 0.1f);
      const StepResult e = eager->train_step(16 * i, 16, 0.1f);
      EXPECT_EQ(g.loss_sum, e.loss_sum) << "step " << i;
      EXPECT_EQ(g.detail.value("cuda_graph_replay", 0), 0) << "step " << i;
    }
    expect_eager_after_a_failed_capture(*graphed, *eager, dev, why);
  }
}

// An operation that fails in the capture and again when the step runs eagerly is an error of
// the work, not of capturing it: the step throws it, as the eager step would have.
TEST(Single, AnErrorOfTheStepItselfStillEndsTheRun) {
  static const Dataset data = synthetic(96, 5);
  auto cpu = make_devices("cpu", 1, {});
  testing::RecordingDevice dev(*cpu[0]);
  const std::string why = fail_captures(dev, CaptureFault::Operation);
  dev.fail_eagerly_after = true;
  auto graphed = single_on(dev, data, {{"read_back", "step"}});
  graphed->train_step(0, 16, 0.1f);  // eager: the first step captures nothing
  try {
    graphed->train_step(16, 16, 0.1f);
    ADD_FAILURE() << "the step did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), why);
  }
  EXPECT_EQ(dev.failed_in_capture, 1);
}

// steps_per_launch: launch_steps consecutive steps of one batch size run as one launch of a
// graph that holds them all, with the bits of eager steps (every step's loss and correct count,
// the parameters), their learning rates set per step; the host queues three things per launch
// (the steps' indices, their SGD steps, their stats), not three per step. Steps that cannot
// complete a launch (an epoch's end, a step that does not follow the held ones, an evaluation
// or a read of the parameters) run eagerly, in order.
TEST(Single, SeveralStepsPerLaunchGiveTheBitsOfEagerSteps) {
  static const Dataset data = synthetic(256, 5);
  auto cpu = make_devices("cpu", 2, {});
  testing::RecordingDevice dev(*cpu[0]);
  auto graphed = single_on(dev, data, {{"steps_per_launch", 4}});
  auto eager = single_on(*cpu[1], data, {{"cuda_graphs", false}});
  EXPECT_EQ(graphed->options()["steps_per_launch"], 4);
  std::vector<StepResult> expected;
  const auto both = [&](int64_t offset, float lr) {
    EXPECT_TRUE(graphed->train_step(offset, 16, lr).pending);
    expected.push_back(eager->train_step(offset, 16, lr));
  };
  // Step 0 sizes the graph's buffers (eager); 1-4 are captured and launched; 5-8 launched.
  int direct_before_second_launch = 0;
  for (int i = 0; i < 9; ++i) {
    if (i == 5) direct_before_second_launch = dev.direct_ops;
    both(16 * i, 0.02f * static_cast<float>(1 + i));  // a warm-up: every step's own lr
    if (i == 3)  // steps 1-3 are held, not yet launched: no graph made so far
      EXPECT_EQ(graphed->report(),
                (json{{"cuda_graphs", "not used: no 4 consecutive steps of one batch size ran"}}));
  }
  EXPECT_EQ(dev.direct_ops - direct_before_second_launch, 3);
  // 9 and 10 are held; 12 does not follow them: they run eagerly, then 12 is held, and runs
  // eagerly at collect().
  both(16 * 9, 0.1f);
  both(16 * 10, 0.1f);
  both(16 * 11 + 16, 0.1f);
  std::vector<StepResult> got = graphed->collect();
  ASSERT_EQ(got.size(), expected.size());
  std::vector<int> steps;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].loss_sum, expected[i].loss_sum) << "step " << i;
    EXPECT_EQ(got[i].correct, expected[i].correct) << "step " << i;
    EXPECT_EQ(got[i].samples, 16);
    EXPECT_GT(got[i].times.total_ms, 0.0) << "step " << i;
    steps.push_back(got[i].detail.value("cuda_graph_steps", 0));
  }
  EXPECT_EQ(steps, (std::vector<int>{0, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0}));
  EXPECT_EQ(got[1].times.total_ms, got[4].times.total_ms);  // a launch's time, shared
  EXPECT_EQ(graphed->parameters(), eager->parameters());
  // Held steps run before an evaluation and before the parameters are read.
  for (int i = 0; i < 6; ++i) both(16 * i, 0.1f);
  const EvalResult ge = graphed->evaluate(), ee = eager->evaluate();
  EXPECT_EQ(ge.loss_sum, ee.loss_sum);
  EXPECT_EQ(ge.correct, ee.correct);
  for (int i = 0; i < 3; ++i) both(16 * i, 0.1f);
  EXPECT_EQ(graphed->parameters(), eager->parameters());
  EXPECT_EQ(graphed->collect().size(), 9u);
  EXPECT_EQ(graphed->report(), (json{{"cuda_graphs", "used"},
                                     {"cuda_graph_captures", 1},
                                     {"cuda_graph_replays", 3},
                                     {"cuda_graph_steps_per_launch", 4},
                                     {"cuda_graph_steps_run_eagerly", 8}}));
  EXPECT_TRUE(dev.violations.empty()) << dev.violations.front();
}

// A graph of several steps that cannot be made: its steps and every later one run eagerly, with
// the bits of eager steps; the report says why.
TEST(Single, SeveralStepsPerLaunchFallBackToEagerStepsWhenTheCaptureFails) {
  static const Dataset data = synthetic(96, 5);
  for (CaptureFault fault : {CaptureFault::End, CaptureFault::Operation}) {
    auto cpu = make_devices("cpu", 2, {});
    testing::RecordingDevice dev(*cpu[0]);
    const std::string why = fail_captures(dev, fault);
    SCOPED_TRACE(why);
    auto graphed = single_on(dev, data, {{"steps_per_launch", 2}});
    auto eager = single_on(*cpu[1], data, {{"cuda_graphs", false}});
    std::vector<StepResult> expected;
    for (int i = 0; i < 6; ++i) {
      graphed->train_step(16 * i, 16, 0.1f);
      expected.push_back(eager->train_step(16 * i, 16, 0.1f));
    }
    const std::vector<StepResult> got = graphed->collect();
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].loss_sum, expected[i].loss_sum) << "step " << i;
      EXPECT_EQ(got[i].detail.value("cuda_graph_replay", 0), 0) << "step " << i;
    }
    expect_eager_after_a_failed_capture(*graphed, *eager, dev, why);
  }
}

// On a GPU: the step's capture breaks at its second fault point, the SGD update after the
// minibatch gather (PARALAB_TEST_CAPTURE_FAULT; the step has no event or mark): the steps run
// eagerly, to the bit of cuda_graphs false, and the device stays ready for them.
TEST(Single, CudaBrokenCaptureRunsTheStepsEagerly) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  EXPECT_TRUE(cuda_broken_capture_runs_eagerly("single", 1, json::object(), 1, 2));
}

TEST(Single, CudaGraphReplayMatchesEagerStepsBitForBit) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  // 20 steps: the first eager, the second captured, the rest replayed; the same kernels with
  // the same (deterministic) algorithms, so the same bits. The learning rate changes every
  // step, as in a warm-up: the replays must take each new value.
  const auto lr = [](int step) { return 0.01f * static_cast<float>(1 + step % 5); };
  const Trained graphs = train("single", 1, {{"cuda_graphs", true}}, 20, 24, "cuda", lr);
  const Trained eager = train("single", 1, {{"cuda_graphs", false}}, 20, 24, "cuda", lr);
  EXPECT_EQ(graphs.losses, eager.losses);
  EXPECT_EQ(graphs.params, eager.params);
  EXPECT_EQ(graphs.eval.correct, eager.eval.correct);
}

// On a GPU: 20 steps queued with 4 steps per launch (the first eager, then 4 launches of one
// graph holding 4 steps, the last 3 eagerly at collect()) give the bits of 20 eager steps, the
// learning rate changing every step.
TEST(Single, CudaSeveralStepsPerLaunchMatchEagerStepsBitForBit) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  const auto lr = [](int step) { return 0.01f * static_cast<float>(1 + step % 5); };
  const Trained eager = train("single", 1, {{"cuda_graphs", false}}, 20, 24, "cuda", lr);
  Session s("single", 1, {{"steps_per_launch", 4}}, test_initial_parameters(), 24, "cuda");
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(s.queue(i, lr(i)).pending) << "step " << i;
  std::vector<double> losses;
  for (const StepResult& r : s->collect()) losses.push_back(r.loss_sum);
  EXPECT_EQ(losses, eager.losses);
  EXPECT_EQ(s->parameters(), eager.params);
  EXPECT_EQ(s->evaluate().correct, eager.eval.correct);
  const json report = s->report();
  EXPECT_EQ(report.value("cuda_graph_replays", -1), 4) << report.dump();
  EXPECT_EQ(report.value("cuda_graph_steps_run_eagerly", -1), 3) << report.dump();
}

// On a GPU: a captured step replayed across evaluations (which run at their own batch size, in
// buffers of their own) gives the bits of eager steps with the same evaluations between them,
// one step per launch and four; one capture for the whole run.
TEST(Single, CudaReplaysAcrossEvaluationsMatchEagerSteps) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const int per_launch : {1, 4}) {
    const int64_t batch = 24;
    Session graphed("single", 1, {{"steps_per_launch", per_launch}}, test_initial_parameters(),
                    batch, "cuda");
    Session eager("single", 1, {{"cuda_graphs", false}}, test_initial_parameters(), batch, "cuda");
    expect_replays_across_evaluations_match(graphed, eager, batch,
                                            std::to_string(per_launch) + " per launch");
  }
}

// On a GPU: the report's census of the captured step (core/graph_census.h) reads the graph the
// runtime made: every kernel the step launches, ParaLab's own SGD (sgd_at_k, which reads its
// step on the device) among them by name, and a longest chain no longer than the graph's work.
TEST(Single, CudaGraphCensusReadsTheCapturedStep) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  Session graphed("single", 1, {{"cuda_graphs", true}}, test_initial_parameters(), 24, "cuda");
  for (int step = 0; step < 3; ++step) graphed.step(step, 0.05f);
  const json report = graphed->report();
  ASSERT_EQ(report.value("cuda_graphs", ""), "used") << report.dump();
  const json census = report.value("cuda_graph", json::object()).value("census", json());
  ASSERT_TRUE(census.is_object() && !census.contains("unknown")) << census.dump();
  const int64_t kernels = census.at("kernels"), work = kernels +
                                                       census.at("copies").get<int64_t>() +
                                                       census.at("fills").get<int64_t>();
  EXPECT_GE(kernels, 10) << census.dump();  // gather, conv stages, linear layers, loss, SGD
  EXPECT_GE(census.at("nodes").get<int64_t>(), work);
  const int64_t chain = census.at("longest_chain").at("work_nodes");
  EXPECT_GE(chain, 1);
  EXPECT_LE(chain, work);
  bool sgd = false;
  for (const auto& [name, count] : census.at("kernels_by_name").items())
    sgd = sgd || (name.find("sgd_at_k") != std::string::npos && count.get<int64_t>() >= 1);
  EXPECT_TRUE(sgd) << census.at("kernels_by_name").dump();
}

#if PARALAB_HAVE_CUDA
// PARALAB_STEP_TRACE (core/cuda/step_trace.h) counts graph launches, traces launches AFTER+1 ..
// AFTER+N, and writes the file after the last: the trace where CUPTI can trace (a GPU), else
// why not (here: no driver), nothing before. Each case in a child process of its own (the
// tracer reads its variables once per process).
TEST(StepTrace, WritesTheTraceOrWhyNotAfterItsLaunches) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = ::testing::TempDir() + "paralab-step-trace-test.json";
  std::remove(path.c_str());
  EXPECT_EXIT(
      {
        setenv("PARALAB_STEP_TRACE", path.c_str(), 1);
        setenv("PARALAB_STEP_TRACE_AFTER", "2", 1);
        setenv("PARALAB_STEP_TRACE_LAUNCHES", "1", 1);
        for (int i = 0; i < 2; ++i) {
          cuda::step_trace_before_launch();
          cuda::step_trace_after_launch(nullptr);
        }
        if (std::ifstream(path).good()) {
          std::fprintf(stderr, "written before the traced launch\n");
          std::exit(1);
        }
        cuda::step_trace_before_launch();
        cuda::step_trace_after_launch(nullptr);
        std::exit(std::ifstream(path).good() ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "");
  const json trace = json::parse(std::ifstream(path));
  EXPECT_EQ(trace.value("after_launches", -1), 2);
  EXPECT_EQ(trace.value("launches", -1), 1);
  EXPECT_NE(trace.contains("error"), trace.contains("summary")) << trace.dump();
  EXPECT_FALSE(std::ifstream(path + ".partial").good());
  std::remove(path.c_str());
}

TEST(StepTrace, ABadCountIsOneLineNamingItsVariable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("PARALAB_STEP_TRACE", (::testing::TempDir() + "never-written.json").c_str(), 1);
        setenv("PARALAB_STEP_TRACE_LAUNCHES", "0", 1);
        try {
          cuda::step_trace_before_launch();
        } catch (const Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3),
      "PARALAB_STEP_TRACE_LAUNCHES=0: not a whole number of at least 1");
}

// Records are read in the layouts of the build's headers: a library of another CUDA minor
// release is refused, naming both; its own updates are not; 13.0's first release is refused.
TEST(StepTrace, CuptiOfAnotherMinorReleaseIsRefusedNamingBoth) {
  EXPECT_EQ(cuda::cupti_version_mismatch(130001, 130001), "");
  EXPECT_EQ(cuda::cupti_version_mismatch(130002, 130001), "");
  EXPECT_EQ(cuda::cupti_version_mismatch(130101, 130001)
                .rfind("the CUPTI library loaded is CUDA "
                       "13.1 (API version 130101), this "
                       "build's headers CUDA 13.0 (API "
                       "version 130001)",
                       0),
            0u);
  EXPECT_NE(cuda::cupti_version_mismatch(120900, 130001), "");
  EXPECT_NE(cuda::cupti_version_mismatch(130000, 130000).find("before Update 1"),
            std::string::npos);
}

// On a GPU: the trace of single's graphed steps holds each launch's kernels, ParaLab's SGD once
// a launch among them, and a span no shorter than the GPU's busy time.
TEST(Single, CudaStepTraceRecordsTheGraphedStepsKernels) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = ::testing::TempDir() + "paralab-step-trace-single.json";
  std::remove(path.c_str());
  EXPECT_EXIT(
      {
        setenv("PARALAB_STEP_TRACE", path.c_str(), 1);
        setenv("PARALAB_STEP_TRACE_AFTER", "1", 1);
        setenv("PARALAB_STEP_TRACE_LAUNCHES", "2", 1);
        {
          // Step 0 eager, step 1 captured and launch 1, steps 2 and 3 the traced launches.
          Session graphed("single", 1, {{"cuda_graphs", true}}, test_initial_parameters(), 24,
                          "cuda");
          for (int step = 0; step < 5; ++step) graphed.step(step, 0.05f);
        }
        std::exit(std::ifstream(path).good() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  const json trace = json::parse(std::ifstream(path));
  if (trace.contains("error")) {
    const std::string error = trace["error"].get<std::string>();
    for (const char* unusable : {"cannot load", "the CUPTI library loaded is", "CUPTI 13.0 before"})
      if (error.rfind(unusable, 0) == 0) GTEST_SKIP() << "no usable CUPTI here: " << error;
  }
  ASSERT_TRUE(trace.contains("summary")) << trace.dump();
  const json& s = trace["summary"];
  EXPECT_EQ(s.value("launches", 0), 2);
  EXPECT_GE(s.value("records", 0), 20) << s.dump();
  EXPECT_GE(s.value("span_per_launch_us", 0.0), s.value("busy_per_launch_us", 1.0));
  bool sgd = false;
  for (const json& n : s.at("by_name"))
    sgd = sgd || (n.at("name").get<std::string>().find("sgd_at_k") != std::string::npos &&
                  n.at("per_launch").get<double>() == 1.0);
  EXPECT_TRUE(sgd) << s.at("by_name").dump();
  std::remove(path.c_str());
}
#endif

}  // namespace
}  // namespace paralab
