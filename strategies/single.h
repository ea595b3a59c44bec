// single: the whole minibatch on one device; the baseline every other strategy is measured by.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "strategies/strategy.h"

namespace paralab {

std::unique_ptr<Strategy> make_single(const nlohmann::json& options, const std::string& path);

}  // namespace paralab
