// single: the whole minibatch on one device; the baseline every other strategy is measured by.
//
// Options: "cuda_graphs": true  on a device that can capture work (CUDA), the step (gather,
// forward, backward, SGD) is captured once per run and replayed; the SGD step is read
// from device memory, set before each replay, so any learning rate replays the same graph.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "strategies/strategy.h"

namespace paralab {

std::unique_ptr<Strategy> make_single(const nlohmann::json& options, const std::string& path);

}  // namespace paralab
