// The ReLU bits of a conv -> ReLU -> avgpool stage on CUDA: one byte per pooled value, bit
// q = 2 dh + dw set where ReLU passed that conv output (conv_relu_pool_kernels.cuh). The training
// forward's, which backward reads, and an evaluation forward's are kept apart, so that evaluating
// between a training forward and its backward changes nothing backward sees. Shared by the stage
// on ParaLab's own kernels (fused_conv_relu_pool.cpp) and on cuDNN (conv_relu_pool.cpp).
#pragma once

#include <cstdint>

#include "core/cuda/conv_relu_pool_plan.h"
#include "core/tensor.h"

namespace paralab::cuda {

class ReluMasks {
 public:
  ReluMasks() = default;
  // The training mask now (a stage's plan is made before any CUDA-graph capture); the evaluation
  // one when first asked for.
  ReluMasks(Device& device, const crp::Geometry& g)
      : device_(&device), bytes_(int64_t{g.n} * g.k * g.ph * g.pw), training_(make()) {}

  // Where a forward writes its bits.
  uint8_t* for_forward(bool training) {
    if (training) return bytes(training_);
    if (!eval_.defined()) eval_ = make();
    return bytes(eval_);
  }
  // The last training forward's bits.
  const uint8_t* training() const { return bytes(training_); }

 private:
  // In an int32 tensor: the tensor interface has no byte type.
  Tensor make() const { return Tensor::empty(*device_, {(bytes_ + 3) / 4}, DType::I32); }
  static uint8_t* bytes(const Tensor& t) { return static_cast<uint8_t*>(t.raw()); }

  Device* device_ = nullptr;
  int64_t bytes_ = 0;
  Tensor training_, eval_;
};

}  // namespace paralab::cuda
