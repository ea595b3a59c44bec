// End to end on real Fashion-MNIST: the runner's training loop through the `single` strategy on
// the CPU backend learns (loss falls, test accuracy clears 0.5) and is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

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
