// The book's LeNet on one device, over the backend's layer ops:
//   conv 3x3 1->20, ReLU, avgpool 2/2, conv 5x5 20->50, ReLU, avgpool 2/2, flatten (800),
//   FC 800->128, ReLU, FC 128->10; 129,068 parameters.
// Parameters and gradients each live in ONE flat buffer (book order w1,b1,w2,b2,w3,b3,w4,b4), so
// that a collective can reduce all gradients in one call or in buckets.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace paralab {

struct ParamInfo {
  const char* name;
  Shape shape;
  int64_t offset;  // elements into the flat buffer
};

constexpr int kLeNetTensors = 8;
constexpr int64_t kLeNetParameters = 129068;
constexpr int kImageSide = 28;
constexpr int kClasses = 10;

// w1 (20,1,3,3) b1 (20) w2 (50,20,5,5) b2 (50) w3 (800,128) b3 (128) w4 (128,10) b4 (10).
const std::array<ParamInfo, kLeNetTensors>& lenet_layout();

// Initial parameters on the host: weights N(0, scale^2) drawn in book order from Rng(seed),
// biases 0. The same seed gives the same values on every backend and for every device count.
std::vector<float> lenet_initial_parameters(uint64_t seed, double scale = 0.01);

class LeNet {
 public:
  explicit LeNet(Device& device);

  Device& device() const { return device_; }
  Tensor& params() { return params_; }  // (129068)
  Tensor& grads() { return grads_; }    // (129068), gradients of the summed loss
  Tensor param(int i) const;            // view of tensor i in lenet_layout()
  Tensor grad(int i) const;

  // x (N,1,28,28), labels (N) int32 -> stats (2) = {summed loss, correct count}. With
  // `training`, keeps what backward() needs and the loss gradient.
  void forward(const Tensor& x, const Tensor& labels, Tensor& stats, bool training);
  // Gradients of the summed loss of the last training forward() into grads() (overwritten).
  // on_ready(i) is called as soon as the gradient of parameter tensor i (lenet_layout() order)
  // has been computed, last layer first (7,6, 5,4, 3,2, 1,0): the hook that lets a strategy
  // start reducing gradients while backward is still running.
  void backward(const std::function<void(int)>& on_ready = {});

  const Tensor& logits() const { return logits_; }

 private:
  void ensure_batch(int64_t n);

  Device& device_;
  Tensor params_, grads_;
  std::unique_ptr<ConvReluPool> stage1_, stage2_;
  std::unique_ptr<Relu> relu_;
  std::unique_ptr<Linear> fc1_, fc2_;
  std::unique_ptr<SoftmaxXent> xent_;

  int64_t batch_ = -1;
  Tensor x_;                // last training input (N,1,28,28), shared with the caller
  Tensor p1_, p2_;          // stage outputs (N,20,13,13) (N,50,4,4)
  Tensor h3_, logits_;      // (N,128) (N,10)
  Tensor d_logits_, d_h3_;  // (N,10) (N,128)
  Tensor d_p2_, d_p1_;      // (N,50,4,4) (N,20,13,13)
};

}  // namespace paralab
