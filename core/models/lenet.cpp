// The book's LeNet as a layer list:
//   conv 3x3 1->20, ReLU, avgpool 2/2, conv 5x5 20->50, ReLU, avgpool 2/2, flatten (800),
//   FC 800->128, ReLU, FC 128->10; 129,068 parameters.
// Its conv stages are the fused conv_relu_pool op (the fast path on both backends). For
// channel_split's Megatron pairing, fc1 is split by its input (the rows of W3 that read conv2's
// channels on each device); conv2 cannot be its partner's partner: its fused ReLU and pooling need
// the complete pre-activation.
#include "core/error.h"
#include "core/models/builtin.h"

namespace paralab {

std::shared_ptr<const Model> make_lenet(const nlohmann::json& options) {
  if (!options.empty()) throw Error("lenet has no options, got " + options.dump());
  std::vector<LayerSpec> layers(4);
  layers[0] = {.name = "conv1", .op = LayerOp::kConvReluPool, .out = 20, .kernel = 3};
  layers[1] = {.name = "conv2", .op = LayerOp::kConvReluPool, .out = 50, .kernel = 5};
  layers[2] = {
      .name = "fc1", .op = LayerOp::kLinear, .out = 128, .relu = true, .split = SplitMode::kInput};
  layers[3] = {.name = "fc2", .op = LayerOp::kLinear, .out = 10};
  return std::make_shared<Model>("lenet", Shape{1, 28, 28}, std::move(layers), "lenet");
}

}  // namespace paralab
