// End to end on real Fashion-MNIST: the runner's training loop through the `single` strategy on
// the CPU backend learns (loss falls, test accuracy clears 0.5) and is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/device.h"
#include "core/fashion_mnist.h"
#include "experiments/descriptor.h"
#include "experiments/trainer.h"

namespace paralab {
namespace {

using nlohmann::json;

// A few thousand images; batch 32 so that 640 SGD steps fit in ~10 s on one core: with the
// book's lr 0.2 and N(0, 0.01^2) weights the loss sits on a plateau near ln 10 for roughly the
// first 300 steps before it falls.
json small_run() {
  return {{"name", "e2e"},
          {"backend", "cpu"},
          {"dataset", {{"train_limit", 4096}, {"test_limit", 2000}}},
          {"training", {{"epochs", 5}, {"batch_size", 32}, {"lr", 0.2}, {"seed", 0}}},
          {"runs", {{{"strategy", "single"}}}}};
}

class Training : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      data_ = load_fashion_mnist(std::nullopt, 4096, 2000);
    } catch (const std::exception& e) {
      GTEST_SKIP() << "Fashion-MNIST not available: " << e.what();
    }
  }
  json run(const json& doc) {
    const Descriptor d = parse_descriptor(doc, "e2e.json");
    Progress quiet(false);
    RunContext ctx{&d, &data_, &quiet, 0, 1, true};
    return run_training(d.runs[0], ctx);
  }
  // The run with its steps read after each ("step") and once per epoch ("epoch").
  std::pair<json, json> run_both_read_backs(json doc) {
    doc["runs"][0]["read_back"] = "step";
    json step = run(doc);
    doc["runs"][0]["read_back"] = "epoch";
    return {std::move(step), run(doc)};
  }
  FashionMnist data_;
};

TEST_F(Training, LossFallsAndTestAccuracyClearsHalf) {
  const json r = run(small_run());
  ASSERT_EQ(r["status"], "ok") << r["reason"];
  const json& epochs = r["epochs"];
  ASSERT_EQ(epochs.size(), 5u);
  const double first = epochs.front()["train_loss"], last = epochs.back()["train_loss"];
  EXPECT_LT(last, first - 0.5) << "train loss " << first << " -> " << last;
  EXPECT_GT(epochs.back()["test_acc"].get<double>(), 0.5);
  EXPECT_EQ(
      r["timing"]["timed_iterations"].get<int>() + r["timing"]["warmup_iterations"].get<int>(),
      5 * 128);
}

TEST_F(Training, SameSeedGivesBitIdenticalLosses) {
  json doc = small_run();
  doc["training"]["epochs"] = 1;
  doc["training"]["max_iterations_per_epoch"] = 20;
  const json a = run(doc), b = run(doc);
  ASSERT_EQ(a["status"], "ok");
  EXPECT_EQ(a["epochs"][0]["train_loss"], b["epochs"][0]["train_loss"]);
  EXPECT_EQ(a["epochs"][0]["test_loss"], b["epochs"][0]["test_loss"]);
  doc["training"]["seed"] = 1;
  const json c = run(doc);
  EXPECT_NE(a["epochs"][0]["train_loss"], c["epochs"][0]["train_loss"]);
}

TEST_F(Training, NonFiniteLossIsRecordedAsDiverged) {
  json doc = small_run();
  doc["training"]["lr"] = 1e30;
  doc["training"]["epochs"] = 1;
  const json r = run(doc);
  EXPECT_EQ(r["status"], "diverged");
  ASSERT_TRUE(r.contains("diverged_at"));
  EXPECT_NE(r["reason"].get<std::string>().find("at epoch 1, iteration"), std::string::npos);
}

// read_back "epoch" queues every step of an epoch and reads their figures once at its end (what
// a GPU does by default): the runner records the same epochs, iterations and final bits.
TEST_F(Training, StepsReadOncePerEpochRecordTheSameRun) {
  json doc = small_run();
  doc["training"]["epochs"] = 2;
  doc["training"]["max_iterations_per_epoch"] = 12;
  doc["training"]["warmup_iterations"] = 3;
  const auto [step, epoch] = run_both_read_backs(doc);
  ASSERT_EQ(step["status"], "ok") << step["reason"];
  ASSERT_EQ(epoch["status"], "ok") << epoch["reason"];
  EXPECT_EQ(epoch["config"]["options"]["read_back"], "epoch");
  EXPECT_EQ(step["config"]["options"]["read_back"], "step");
  EXPECT_EQ(epoch["parameters_digest"], step["parameters_digest"]);
  for (const char* key : {"train_loss", "train_acc", "test_loss", "test_acc", "samples"})
    for (int e = 0; e < 2; ++e) EXPECT_EQ(epoch["epochs"][e][key], step["epochs"][e][key]) << key;
  EXPECT_EQ(epoch["warmup"].size(), 3u);
  ASSERT_EQ(epoch["iterations"].size(), step["iterations"].size());
  for (std::size_t i = 0; i < epoch["iterations"].size(); ++i) {
    const json &a = epoch["iterations"][i], &b = step["iterations"][i];
    EXPECT_EQ(a["epoch"], b["epoch"]);
    EXPECT_EQ(a["iteration"], b["iteration"]);
    EXPECT_EQ(a["lr"], b["lr"]);
    EXPECT_GT(a["total_ms"].get<double>(), 0.0);
  }
}

// A queued step whose loss is not finite is found when the epoch's steps are read: the run is
// recorded as diverged at that step, as when each step is read at once.
TEST_F(Training, AQueuedNonFiniteLossIsRecordedAsDivergedAtItsStep) {
  json doc = small_run();
  doc["training"]["lr"] = 1e30;
  doc["training"]["epochs"] = 1;
  doc["training"]["max_iterations_per_epoch"] = 20;
  const auto [step, epoch] = run_both_read_backs(doc);
  ASSERT_EQ(step["status"], "diverged");
  EXPECT_EQ(epoch["status"], "diverged");
  EXPECT_EQ(epoch["diverged_at"], step["diverged_at"]);
  EXPECT_EQ(epoch["reason"], step["reason"]);
  EXPECT_EQ(epoch["warmup"].size() + epoch["iterations"].size(),
            step["warmup"].size() + step["iterations"].size());
}

// On a GPU: a group's graph launches read once per epoch, with a shorter last batch in every
// epoch (4,096 examples in batches of 240: 17 and one of 16): the runner reads the queued
// launches before that batch, so each epoch's last launch keeps every device's phases (the
// eager batch would drop the graph whose marks hold them).
TEST_F(Training, CudaGroupLaunchesReadOnceKeepEachEpochsLastPhases) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  json doc = small_run();
  doc["backend"] = "cuda";
  doc["virtual_devices"] = true;
  doc["training"]["epochs"] = 2;
  doc["training"]["batch_size"] = 240;
  for (const json& run_spec : {json{{"strategy", "data_parallel"}, {"allreduce", "ring"}},
                               json{{"strategy", "layer_split"}, {"microbatches", 4}},
                               json{{"strategy", "channel_split"}}}) {
    doc["runs"][0] = run_spec;
    doc["runs"][0]["devices"] = 2;
    doc["runs"][0]["read_back"] = "epoch";
    const json r = run(doc);
    ASSERT_EQ(r["status"], "ok") << r["reason"];
    int last_launches_read = 0;
    for (const char* part : {"warmup", "iterations"})
      for (const json& it : r[part])
        if (it["iteration"] == 17 && it.contains("devices") && it["devices"].size() == 2u)
          ++last_launches_read;
    EXPECT_EQ(last_launches_read, 2) << run_spec.dump();
    EXPECT_EQ(r["timing"]["per_device"].size(), 2u) << run_spec.dump();
  }
}

// communication_split: on the CPU ("auto") each device's communication is split into waiting and
// moving in the results; false leaves the split out (no receive marks).
TEST_F(Training, CommunicationSplitIsRecordedUnlessTurnedOff) {
  json doc = small_run();
  doc["training"]["max_iterations_per_epoch"] = 4;
  doc["training"]["warmup_iterations"] = 1;
  doc["training"]["epochs"] = 1;
  doc["runs"][0] = {{"strategy", "data_parallel"}, {"devices", 2}, {"allreduce", "ring"}};
  const json on = run(doc);
  doc["communication_split"] = false;
  const json off = run(doc);
  ASSERT_EQ(on["status"], "ok") << on["reason"];
  ASSERT_EQ(off["status"], "ok") << off["reason"];
  ASSERT_EQ(on["timing"]["per_device"].size(), 2u);
  ASSERT_EQ(off["timing"]["per_device"].size(), 2u);
  for (const json& d : on["timing"]["per_device"]) {
    EXPECT_GT(d["receives"].get<double>(), 0.0);
    EXPECT_TRUE(d.contains("communication_wait_ms") && d.contains("communication_move_ms"));
  }
  for (const json& d : off["timing"]["per_device"]) {
    EXPECT_FALSE(d.contains("receives"));
    EXPECT_FALSE(d.contains("communication_wait_ms"));
  }
}

// A run's timing over iterations of which some recorded no devices (steps read once per epoch):
// per-device means over those that did (the graph replays among them where there are any), and
// only the figures every iteration holds as numbers averaged.
TEST(Timing, PerDeviceMeansOverTheIterationsThatRecordedDevices) {
  json device;
  for (const char* f : {"compute_ms", "communication_ms", "exposed_communication_ms",
                        "optimizer_ms", "idle_ms", "total_ms", "bytes_sent", "samples"})
    device[f] = 0.5;
  device["compute_ms"] = 1.0;
  const json read = {{"total_ms", 2.0},
                     {"samples", 24},
                     {"devices", {device, device}},
                     {"detail", {{"cuda_graph_replay", 1}, {"bubble_fraction", 0.25}}}};
  json queued = {{"total_ms", 1.0},
                 {"samples", 24},
                 {"detail", {{"cuda_graph_replay", 1}, {"note", "not a number"}}}};
  const json both = timing_json(json::array({queued, read, queued}), 0);
  ASSERT_EQ(both["per_device"].size(), 2u) << both.dump();
  EXPECT_DOUBLE_EQ(both["per_device"][0]["compute_ms"].get<double>(), 1.0) << "the read one's";
  EXPECT_TRUE(timing_json(json::array({queued, queued}), 0)["per_device"].is_null());
  EXPECT_EQ(both["detail"], json({{"cuda_graph_replay", 1.0}})) << both.dump();
  EXPECT_DOUBLE_EQ(both["median_iteration_ms"].get<double>(), 1.0);
  const json all_read = timing_json(json::array({read, read}), 1);
  ASSERT_EQ(all_read["per_device"].size(), 2u) << all_read.dump();
  EXPECT_DOUBLE_EQ(all_read["per_device"][1]["compute_ms"].get<double>(), 1.0);
  EXPECT_EQ(all_read["detail"], json({{"cuda_graph_replay", 1.0}, {"bubble_fraction", 0.25}}));
  EXPECT_EQ(all_read["warmup_iterations"], 1);
  // Where some iterations with devices were graph replays, the eager ones (an epoch's first, its
  // shorter last batch) are left out of the means: a run read once has as many of them.
  json eager = read;
  eager["detail"] = {{"bubble_fraction", 0.5}};
  eager["devices"][0]["compute_ms"] = 7.0;
  const json mixed = timing_json(json::array({eager, queued, read, eager}), 0);
  EXPECT_DOUBLE_EQ(mixed["per_device"][0]["compute_ms"].get<double>(), 1.0) << mixed.dump();
  const json eager_only = timing_json(json::array({eager, eager}), 0);
  EXPECT_DOUBLE_EQ(eager_only["per_device"][0]["compute_ms"].get<double>(), 7.0);
  // A device list of another length is not averaged with it either.
  queued["devices"] = {device};
  EXPECT_TRUE(timing_json(json::array({read, queued}), 0)["per_device"].is_null());
}

TEST_F(Training, ABackendTheMachineLacksIsSkippedWithTheReason) {
  const auto known = known_backends();
  if (std::find(known.begin(), known.end(), "cuda") == known.end())
    GTEST_SKIP() << "this build has no CUDA backend";
  const std::string why = backend_unavailable("cuda");
  if (why.empty()) GTEST_SKIP() << "a GPU is usable here: nothing to skip";
  json doc = small_run();
  doc["backend"] = "cuda";
  const json r = run(doc);
  EXPECT_EQ(r["status"], "skipped");
  EXPECT_EQ(r["reason"], "cuda: " + why);
  EXPECT_TRUE(r["epochs"].empty());
}

}  // namespace
}  // namespace paralab
