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

const char* lenet_layer_name(int layer) {
  static const char* const names[kLeNetLayers] = {"conv1", "conv2", "fc1", "fc2"};
  PARALAB_REQUIRE(layer >= 0 && layer < kLeNetLayers, "lenet: no layer " + std::to_string(layer));
  return names[layer];
}

Shape lenet_activation_shape(int boundary, int64_t n) {
  switch (boundary) {
    case 0:
      return {n, 1, kImageSide, kImageSide};
    case 1:
      return {n, 20, 13, 13};
    case 2:
      return {n, 50, 4, 4};
    case 3:
      return {n, 128};
    case 4:
      return {n, kClasses};
  }
  throw Error("lenet: no activation boundary " + std::to_string(boundary));
}

int64_t lenet_layer_offset(int layer) {
  PARALAB_REQUIRE(layer >= 0 && layer <= kLeNetLayers, "lenet: no layer " + std::to_string(layer));
  return layer == kLeNetLayers ? kLeNetParameters
                               : lenet_layout()[static_cast<std::size_t>(2 * layer)].offset;
}

struct LeNetStages::Slot {
  std::unique_ptr<ConvReluPool> conv1, conv2;
  std::unique_ptr<Linear> fc1, fc2;
  std::unique_ptr<Relu> relu;
  std::unique_ptr<SoftmaxXent> xent;
  int64_t n = -1;
  // act[b]: activation b; act[first] is the caller's input, the others are owned. grad[b]: its
  // gradient, owned for first < b <= last (and for b == first > 0: the returned input gradient).
  std::array<Tensor, kLeNetLayers + 1> act, grad;
  bool trained = false;
};

LeNetStages::LeNetStages(Device& device, int first, int last, Tensor params, int slots)
    : device_(device), first_(first), last_(last), params_(std::move(params)) {
  PARALAB_REQUIRE(0 <= first && first < last && last <= kLeNetLayers,
                  "lenet: layers [" + std::to_string(first) + ", " + std::to_string(last) +
                      ") are not a non-empty range of LeNet's " + std::to_string(kLeNetLayers));
  PARALAB_REQUIRE(slots >= 1, "lenet: " + std::to_string(slots) + " activation slots");
  const int64_t expect = lenet_layer_offset(last) - lenet_layer_offset(first);
  PARALAB_REQUIRE(params_.numel() == expect,
                  "lenet: layers [" + std::to_string(first) + ", " + std::to_string(last) +
                      ") have " + std::to_string(expect) + " parameters, got a buffer of " +
                      std::to_string(params_.numel()));
  Ops& ops = device.ops();
  for (int i = 0; i < slots; ++i) {
    auto s = std::make_unique<Slot>();
    auto has = [&](int layer) { return first <= layer && layer < last; };
    if (has(0)) s->conv1 = ops.make_conv_relu_pool();
    if (has(1)) s->conv2 = ops.make_conv_relu_pool();
    if (has(2)) {
      s->fc1 = ops.make_linear();
      s->relu = ops.make_relu();
    }
    if (has(3)) {
      s->fc2 = ops.make_linear();
      s->xent = ops.make_softmax_xent();
    }
    slots_.push_back(std::move(s));
  }
}

LeNetStages::~LeNetStages() = default;

Tensor LeNetStages::tensor_in(const Tensor& flat, int i) const {
  PARALAB_REQUIRE(2 * first_ <= i && i < 2 * last_,
                  "lenet: parameter tensor " + std::to_string(i) + " is not in layers [" +
                      std::to_string(first_) + ", " + std::to_string(last_) + ")");
  const ParamInfo& p = lenet_layout()[static_cast<std::size_t>(i)];
  return flat.view(p.offset - lenet_layer_offset(first_), p.shape);
}

void LeNetStages::ensure_batch(Slot& s, int64_t n) {
  if (n == s.n) return;
  for (int b = first_ + 1; b <= last_; ++b)
    s.act[b] = Tensor::empty(device_, lenet_activation_shape(b, n));
  for (int b = std::max(first_, 1); b <= last_; ++b)
    s.grad[b] = Tensor::empty(device_, lenet_activation_shape(b, n));
  s.n = n;
  s.trained = false;
}

const Tensor& LeNetStages::forward(int slot, const Tensor& x, bool training) {
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  const Shape want = lenet_activation_shape(first_, 1);
  PARALAB_REQUIRE(x.ndim() >= 1 && x.dim(0) >= 1 && x.numel() == x.dim(0) * shape_numel(want),
                  std::string("lenet: input ") + shape_string(x.shape()) + " to " +
                      lenet_layer_name(first_) + " is not (N," + shape_string(want).substr(3));
  const int64_t n = x.dim(0);
  ensure_batch(s, n);
  s.act[first_] = x.reshaped(lenet_activation_shape(first_, n));
  for (int l = first_; l < last_; ++l) {
    switch (l) {
      case 0:
        s.conv1->forward(s.act[0], tensor_in(params_, 0), tensor_in(params_, 1), s.act[1],
                         training);
        break;
      case 1:
        s.conv2->forward(s.act[1], tensor_in(params_, 2), tensor_in(params_, 3), s.act[2],
                         training);
        break;
      case 2:
        s.fc1->forward(s.act[2].reshaped({n, 800}), tensor_in(params_, 4), tensor_in(params_, 5),
                       s.act[3]);
        s.relu->forward(s.act[3], s.act[3]);
        break;
      case 3:
        s.fc2->forward(s.act[3], tensor_in(params_, 6), tensor_in(params_, 7), s.act[4]);
        break;
    }
  }
  s.trained = training;
  if (!training) s.act[first_] = Tensor();
  return s.act[last_];
}

void LeNetStages::loss(int slot, const Tensor& labels, Tensor& stats, bool training) {
  PARALAB_REQUIRE(has_loss(), std::string("lenet: loss() on layers ending before fc2"));
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  PARALAB_REQUIRE(s.n >= 1, std::string("lenet: loss() before forward()"));
  PARALAB_REQUIRE(labels.numel() == s.n, "lenet: " + std::to_string(labels.numel()) +
                                             " labels for " + std::to_string(s.n) + " images");
  s.xent->forward_backward(s.act[kLeNetLayers], labels, training ? &s.grad[kLeNetLayers] : nullptr,
                           stats);
}

const Tensor& LeNetStages::backward(int slot, const Tensor* dy, Tensor& grads,
                                    const std::function<void(int)>& on_ready) {
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  PARALAB_REQUIRE(s.trained, std::string("lenet: backward() without a training forward()"));
  PARALAB_REQUIRE(grads.numel() == params_.numel(),
                  "lenet: gradient buffer of " + std::to_string(grads.numel()) + " for " +
                      std::to_string(params_.numel()) + " parameters");
  const int64_t n = s.n;
  if (!has_loss()) {
    PARALAB_REQUIRE(dy && dy->numel() == s.act[last_].numel(),
                    std::string("lenet: backward() of layers ending at ") +
                        lenet_layer_name(last_ - 1) + " needs the gradient of its output " +
                        shape_string(s.act[last_].shape()));
  }
  const Tensor d_out =
      has_loss() ? s.grad[kLeNetLayers] : dy->reshaped(lenet_activation_shape(last_, n));
  auto w = [&](int i) { return tensor_in(params_, i); };
  auto g = [&](int i) { return tensor_in(grads, i); };
  for (int l = last_ - 1; l >= first_; --l) {
    const Tensor& dout = l == last_ - 1 ? d_out : s.grad[l + 1];
    Tensor* din = l > 0 ? &s.grad[l] : nullptr;
    Tensor gw = g(2 * l), gb = g(2 * l + 1);
    switch (l) {
      case 3:
        s.fc2->backward(s.act[3], w(6), dout, din, gw, gb);
        break;
      case 2: {
        s.relu->backward(s.act[3], dout, s.grad[3]);
        Tensor din_flat = s.grad[2].reshaped({n, 800});
        s.fc1->backward(s.act[2].reshaped({n, 800}), w(4), s.grad[3], &din_flat, gw, gb);
        break;
      }
      case 1:
        s.conv2->backward(s.act[1], w(2), dout, din, gw, gb);
        break;
      case 0:
        s.conv1->backward(s.act[0], w(0), dout, nullptr, gw, gb);
        break;
    }
    if (on_ready) {
      on_ready(2 * l + 1);
      on_ready(2 * l);
    }
  }
  static const Tensor none;
  return first_ > 0 ? s.grad[first_] : none;
}

LeNet::LeNet(Device& device)
    : device_(device),
      params_(Tensor::zeros(device, {kLeNetParameters})),
      grads_(Tensor::zeros(device, {kLeNetParameters})),
      layers_(std::make_unique<LeNetStages>(device, 0, kLeNetLayers, params_)) {}

LeNet::~LeNet() = default;

Tensor LeNet::param(int i) const {
  const ParamInfo& p = lenet_layout().at(static_cast<std::size_t>(i));
  return params_.view(p.offset, p.shape);
}

Tensor LeNet::grad(int i) const {
  const ParamInfo& p = lenet_layout().at(static_cast<std::size_t>(i));
  return grads_.view(p.offset, p.shape);
}

void LeNet::forward(const Tensor& x, const Tensor& labels, Tensor& stats, bool training) {
  PARALAB_REQUIRE(x.ndim() == 4 && x.dim(1) == 1 && x.dim(2) == kImageSide &&
                      x.dim(3) == kImageSide && x.dim(0) >= 1,
                  "lenet: input " + shape_string(x.shape()) + " is not (N,1,28,28)");
  PARALAB_REQUIRE(labels.numel() == x.dim(0), "lenet: " + std::to_string(labels.numel()) +
                                                  " labels for " + std::to_string(x.dim(0)) +
                                                  " images");
  logits_ = layers_->forward(0, x, training);
  layers_->loss(0, labels, stats, training);
  trained_ = training;
}

void LeNet::backward(const std::function<void(int)>& on_ready) {
  PARALAB_REQUIRE(trained_, "lenet: backward() without a training forward()");
  layers_->backward(0, nullptr, grads_, on_ready);
}

}  // namespace paralab
