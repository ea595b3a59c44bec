// The book's LeNet, the default model: its layout and a replica by name, for the tests and the
// tools that speak of LeNet itself (the allreduce benchmark's gradient size). The network is
// data (core/models/lenet.cpp); strategies use core/model.h and never this header.
//   conv 3x3 1->20, ReLU, avgpool 2/2, conv 5x5 20->50, ReLU, avgpool 2/2, flatten (800),
//   FC 800->128, ReLU, FC 128->10; 129,068 parameters in ONE flat buffer (book order
//   w1,b1,w2,b2,w3,b3,w4,b4).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/model.h"

namespace paralab {

constexpr int kLeNetTensors = 8;
constexpr int64_t kLeNetParameters = 129068;
constexpr int kImageSide = 28;
constexpr int kClasses = 10;

// The registered "lenet" model (default_model()).
std::shared_ptr<const Model> lenet_model();
// w1 (20,1,3,3) b1 (20) w2 (50,20,5,5) b2 (50) w3 (800,128) b3 (128) w4 (128,10) b4 (10).
const std::vector<ParamInfo>& lenet_layout();
// lenet_model()->initial_parameters(seed, scale).
std::vector<float> lenet_initial_parameters(uint64_t seed, double scale = 0.01);

// A LeNet replica on one device (ModelReplica of lenet_model()).
class LeNet : public ModelReplica {
 public:
  explicit LeNet(Device& device) : ModelReplica(lenet_model(), device) {}
};

}  // namespace paralab
