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

// LeNet as four layers, each mapping activation l to activation l+1 (activation 0 is the image):
//   0 conv1 stage (conv, ReLU, pool)  (1,28,28) -> (20,13,13)   tensors w1 b1
//   1 conv2 stage                     (20,13,13) -> (50,4,4)    tensors w2 b2
//   2 fc1 and its ReLU                (800)      -> (128)       tensors w3 b3
//   3 fc2                             (128)      -> (10) logits tensors w4 b4
// Layer l owns parameter tensors 2l and 2l+1, so any run of layers owns a contiguous range of
// the flat buffer: what lets a model-parallel stage hold just its own parameters.
constexpr int kLeNetLayers = 4;
const char* lenet_layer_name(int layer);
// The activation at boundary b (0..4) for n examples: (n,1,28,28) (n,20,13,13) (n,50,4,4)
// (n,128) (n,10).
Shape lenet_activation_shape(int boundary, int64_t n);
// First flat element of layer l's parameters; lenet_layer_offset(4) == kLeNetParameters.
int64_t lenet_layer_offset(int layer);

// Layers [first, last) of LeNet on one device, with `slots` independent sets of activations so
// that a pipeline stage can hold several micro-batches between their forward and backward
// passes (each slot has its own layer ops too: a conv op keeps its last forward's activation).
class LeNetStages {
 public:
  // params: a flat tensor holding exactly these layers' parameters (shared, not copied).
  LeNetStages(Device& device, int first, int last, Tensor params, int slots = 1);
  ~LeNetStages();

  int first() const { return first_; }
  int last() const { return last_; }
  bool has_loss() const { return last_ == kLeNetLayers; }
  int slots() const { return static_cast<int>(slots_.size()); }
  // View of parameter tensor i (lenet_layout() numbering, 2*first <= i < 2*last) in `flat`, a
  // buffer laid out like the params given to the constructor (the params, or their gradients).
  Tensor tensor_in(const Tensor& flat, int i) const;

  // x: activation `first` for n examples, any shape with that many elements per example; kept
  // (shared, not copied) for backward when training. Returns the slot's activation `last`
  // (the logits when has_loss()); it stays valid until the slot's next forward.
  const Tensor& forward(int slot, const Tensor& x, bool training);
  // has_loss() only: softmax cross-entropy of the slot's logits; stats (2) = {summed loss,
  // correct}. With `training`, keeps the logits' gradient for backward().
  void loss(int slot, const Tensor& labels, Tensor& stats, bool training);
  // Backward of the slot's last training forward: dy is the gradient of its output (null when
  // has_loss(): the loss's own). Writes the gradients of these layers' parameters into `grads`
  // (overwritten; laid out like the params). Returns the gradient of the input x, or an empty
  // tensor when first == 0. on_ready(i) as in LeNet::backward.
  const Tensor& backward(int slot, const Tensor* dy, Tensor& grads,
                         const std::function<void(int)>& on_ready = {});

 private:
  struct Slot;
  void ensure_batch(Slot& s, int64_t n);

  Device& device_;
  int first_, last_;
  Tensor params_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

class LeNet {
 public:
  explicit LeNet(Device& device);
  ~LeNet();

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
  Device& device_;
  Tensor params_, grads_;
  std::unique_ptr<LeNetStages> layers_;
  Tensor logits_;
  bool trained_ = false;
};

}  // namespace paralab
