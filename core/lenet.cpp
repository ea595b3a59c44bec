#include "core/lenet.h"

namespace paralab {

std::shared_ptr<const Model> lenet_model() { return default_model(); }

const std::vector<ParamInfo>& lenet_layout() { return lenet_model()->tensors(); }

std::vector<float> lenet_initial_parameters(uint64_t seed, double scale) {
  return lenet_model()->initial_parameters(seed, scale);
}

}  // namespace paralab
