#include "core/lenet.h"

#include "core/error.h"
#include "core/rng.h"

namespace paralab {

const std::array<ParamInfo, kLeNetTensors>& lenet_layout() {
  static const std::array<ParamInfo, kLeNetTensors> layout = [] {
    std::array<ParamInfo, kLeNetTensors> l{{{"w1", {20, 1, 3, 3}, 0},
                                            {"b1", {20}, 0},
                                            {"w2", {50, 20, 5, 5}, 0},
                                            {"b2", {50}, 0},
                                            {"w3", {800, 128}, 0},
                                            {"b3", {128}, 0},
                                            {"w4", {128, 10}, 0},
                                            {"b4", {10}, 0}}};
    int64_t offset = 0;
    for (auto& p : l) {
      p.offset = offset;
      offset += shape_numel(p.shape);
    }
    return l;
  }();
  return layout;
}

std::vector<float> lenet_initial_parameters(uint64_t seed, double scale) {
  std::vector<float> flat(static_cast<std::size_t>(kLeNetParameters), 0.0f);
  Rng rng(seed);
  for (int i = 0; i < kLeNetTensors; i += 2) {  // weights; biases (odd i) stay 0
    const ParamInfo& p = lenet_layout()[static_cast<std::size_t>(i)];
    for (int64_t j = 0; j < shape_numel(p.shape); ++j)
      flat[static_cast<std::size_t>(p.offset + j)] = static_cast<float>(scale * rng.normal());
  }
  return flat;
}

LeNet::LeNet(Device& device)
    : device_(device),
      params_(Tensor::zeros(device, {kLeNetParameters})),
      grads_(Tensor::zeros(device, {kLeNetParameters})),
      stage1_(device.ops().make_conv_relu_pool()),
      stage2_(device.ops().make_conv_relu_pool()),
      relu_(device.ops().make_relu()),
      fc1_(device.ops().make_linear()),
      fc2_(device.ops().make_linear()),
      xent_(device.ops().make_softmax_xent()) {}

Tensor LeNet::param(int i) const {
  const ParamInfo& p = lenet_layout().at(static_cast<std::size_t>(i));
  return params_.view(p.offset, p.shape);
}

Tensor LeNet::grad(int i) const {
  const ParamInfo& p = lenet_layout().at(static_cast<std::size_t>(i));
  return grads_.view(p.offset, p.shape);
}

void LeNet::ensure_batch(int64_t n) {
  if (n == batch_) return;
  Device& d = device_;
  p1_ = Tensor::empty(d, {n, 20, 13, 13});
  p2_ = Tensor::empty(d, {n, 50, 4, 4});
  h3_ = Tensor::empty(d, {n, 128});
  logits_ = Tensor::empty(d, {n, kClasses});
  d_logits_ = Tensor::empty(d, {n, kClasses});
  d_h3_ = Tensor::empty(d, {n, 128});
  d_p2_ = Tensor::empty(d, {n, 50, 4, 4});
  d_p1_ = Tensor::empty(d, {n, 20, 13, 13});
  batch_ = n;
}

void LeNet::forward(const Tensor& x, const Tensor& labels, Tensor& stats, bool training) {
  PARALAB_REQUIRE(x.ndim() == 4 && x.dim(1) == 1 && x.dim(2) == kImageSide &&
                      x.dim(3) == kImageSide && x.dim(0) >= 1,
                  "lenet: input " + shape_string(x.shape()) + " is not (N,1,28,28)");
  PARALAB_REQUIRE(labels.numel() == x.dim(0), "lenet: " + std::to_string(labels.numel()) +
                                                  " labels for " + std::to_string(x.dim(0)) +
                                                  " images");
  const int64_t n = x.dim(0);
  ensure_batch(n);
  stage1_->forward(x, param(0), param(1), p1_, training);
  stage2_->forward(p1_, param(2), param(3), p2_, training);
  const Tensor flat = p2_.reshaped({n, 800});
  fc1_->forward(flat, param(4), param(5), h3_);
  relu_->forward(h3_, h3_);
  fc2_->forward(h3_, param(6), param(7), logits_);
  xent_->forward_backward(logits_, labels, training ? &d_logits_ : nullptr, stats);
  x_ = training ? x : Tensor();
}

void LeNet::backward(const std::function<void(int)>& on_ready) {
  PARALAB_REQUIRE(x_.defined(), "lenet: backward() without a training forward()");
  auto ready = [&](int a, int b) {
    if (!on_ready) return;
    on_ready(a);
    on_ready(b);
  };
  const int64_t n = batch_;
  Tensor w1 = grad(0), b1 = grad(1), w2 = grad(2), b2 = grad(3);
  Tensor w3 = grad(4), b3 = grad(5), w4 = grad(6), b4 = grad(7);
  fc2_->backward(h3_, param(6), d_logits_, &d_h3_, w4, b4);
  ready(7, 6);
  relu_->backward(h3_, d_h3_, d_h3_);
  Tensor d_flat = d_p2_.reshaped({n, 800});
  fc1_->backward(p2_.reshaped({n, 800}), param(4), d_h3_, &d_flat, w3, b3);
  ready(5, 4);
  stage2_->backward(p1_, param(2), d_p2_, &d_p1_, w2, b2);
  ready(3, 2);
  stage1_->backward(x_, param(0), d_p1_, nullptr, w1, b1);
  ready(1, 0);
}

}  // namespace paralab
