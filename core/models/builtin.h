// The built-in models, registered by name in core/model.cpp's registry (make_model).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "core/model.h"

namespace paralab {

// The book's LeNet; no options.
std::shared_ptr<const Model> make_lenet(const nlohmann::json& options);
// The book's AlexNet for Fashion-MNIST; options in core/models/alexnet.cpp.
std::shared_ptr<const Model> make_alexnet(const nlohmann::json& options);

}  // namespace paralab
