// The results file's helpers that do not need a run: the GPU models a file names, how a run's
// virtual devices sit on its GPUs.
#include <gtest/gtest.h>

#include <cmath>

#include "core/device.h"
#include "experiments/results.h"
#include "experiments/trainer.h"

namespace paralab {
namespace {

using nlohmann::json;

TEST(ParametersDigest, ChangesWithAnyBitAndNothingElse) {
  EXPECT_EQ(parameters_digest({}), "fnv1a64:cbf29ce484222325");  // FNV-1a 64's offset basis
  const std::vector<float> a = {0.5f, -1.25f, 3.0f};
  EXPECT_EQ(parameters_digest(a), parameters_digest(std::vector<float>(a)));
  std::vector<float> b = a;
  b[1] = std::nextafter(b[1], 0.0f);  // one ulp: one bit
  EXPECT_NE(parameters_digest(a), parameters_digest(b));
  EXPECT_NE(parameters_digest({0.0f}), parameters_digest({-0.0f}));  // equal floats, other bits
  EXPECT_NE(parameters_digest({1.0f, 2.0f}), parameters_digest({2.0f, 1.0f}));
}

TEST(UsedGpuModels, ListsEachModelOnceInOrderOfFirstUse) {
  // As bench_runner writes runs: the devices under config.device_list.
  const json runs = json::parse(R"([
    {"config": {"device_list": [{"name": "cpu:0", "kind": "cpu", "threads": 1}]}},
    {"status": "failed"},
    {"config": {"device_list": [{"name": "cuda:0", "gpu_model": "NVIDIA H200"},
                                {"name": "cuda:1", "gpu_model": "NVIDIA H200"}]}},
    {"config": {"device_list": [{"name": "cuda:0", "gpu_model": "NVIDIA A100-SXM4-80GB"},
                                {"name": "cuda:1", "gpu_model": "NVIDIA H200"}]}}
  ])");
  EXPECT_EQ(used_gpu_models(runs), json({"NVIDIA H200", "NVIDIA A100-SXM4-80GB"}));
}

TEST(UsedGpuModels, IsNullWhenNoRunUsedAGpu) {
  EXPECT_EQ(used_gpu_models(json::array()), json(nullptr));
  EXPECT_EQ(used_gpu_models(json::parse(R"([{"config": {"device_list": [{"name": "cpu:0"}]}}])")),
            json(nullptr));
  // A device list outside the config is not where runs keep it.
  EXPECT_EQ(used_gpu_models(json::parse(R"([{"device_list": [{"gpu_model": "NVIDIA H200"}]}])")),
            json(nullptr));
}

TEST(NoteRuns, SetsTheGpuModelsAndRefreshesTheLibrariesKeepingTheRest) {
  // bench_runner calls it after each run: cuBLAS, loaded on first use, has a version to record
  // only then; what describe_environment wrote besides stays.
  json env = {
      {"gpu_model", nullptr}, {"hostname", "h"}, {"libraries", {{"nlohmann_json", "9.9.9"}}}};
  const json runs = json::parse(
      R"([{"config": {"device_list": [{"name": "cuda:0", "gpu_model": "NVIDIA H200"}]}}])");
  note_runs(env, runs);
  EXPECT_EQ(env["gpu_model"], json({"NVIDIA H200"}));
  EXPECT_EQ(env["hostname"], "h");
  EXPECT_EQ(env["libraries"]["nlohmann_json"], "9.9.9");
  const json versions = backend_versions();
  for (const auto& [name, version] : versions.items())
    EXPECT_EQ(env["libraries"][name], version) << name;
  EXPECT_EQ(env["libraries"].size(), versions.size() + 1);
}

TEST(VirtualPlacement, CountsVirtualDevicesAndTheirGpus) {
  // As CudaDevice::describe() writes them: 4 devices on 1 GPU, then 4 on 2.
  const json one = json::parse(R"([{"gpu": 0, "virtual": true}, {"gpu": 0, "virtual": true},
                                   {"gpu": 0, "virtual": true}, {"gpu": 0, "virtual": true}])");
  EXPECT_EQ(virtual_placement(one), "4 virtual devices on 1 GPU");
  const json two = json::parse(R"([{"gpu": 0, "virtual": true}, {"gpu": 1, "virtual": true},
                                   {"gpu": 0, "virtual": true}, {"gpu": 1, "virtual": true}])");
  EXPECT_EQ(virtual_placement(two), "4 virtual devices on 2 GPUs");
}

TEST(VirtualPlacement, IsEmptyWithoutVirtualDevices) {
  EXPECT_EQ(virtual_placement(json::parse(R"([{"name": "cpu:0", "kind": "cpu"}])")), "");
  EXPECT_EQ(virtual_placement(json::parse(R"([{"gpu": 0, "virtual": false},
                                              {"gpu": 1, "virtual": false}])")),
            "");
  EXPECT_EQ(virtual_placement(json::array()), "");
}

}  // namespace
}  // namespace paralab
