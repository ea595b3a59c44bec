// The results file's environment helpers that do not need a run: the GPU models a file names.
#include <gtest/gtest.h>

#include "experiments/results.h"

namespace paralab {
namespace {

using nlohmann::json;

TEST(UsedGpuModels, ListsEachModelOnceInOrderOfFirstUse) {
  const json runs = json::parse(R"([
    {"device_list": [{"name": "cpu:0", "kind": "cpu", "threads": 1}]},
    {"status": "failed"},
    {"device_list": [{"name": "cuda:0", "gpu_model": "NVIDIA H200"},
                     {"name": "cuda:1", "gpu_model": "NVIDIA H200"}]},
    {"device_list": [{"name": "cuda:0", "gpu_model": "NVIDIA A100-SXM4-80GB"},
                     {"name": "cuda:1", "gpu_model": "NVIDIA H200"}]}
  ])");
  EXPECT_EQ(used_gpu_models(runs), json({"NVIDIA H200", "NVIDIA A100-SXM4-80GB"}));
}

TEST(UsedGpuModels, IsNullWhenNoRunUsedAGpu) {
  EXPECT_EQ(used_gpu_models(json::array()), json(nullptr));
  EXPECT_EQ(used_gpu_models(json::parse(R"([{"device_list": [{"name": "cpu:0"}]}])")),
            json(nullptr));
}

}  // namespace
}  // namespace paralab
