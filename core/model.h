// Model: a network as data. A model is a list of layers, each mapping activation l to
// activation l+1 (activation 0 is the input image, the last is the logits), with
//   - each layer's parameter tensors (names, shapes, offsets) in ONE flat buffer, layer by layer,
//     so that any run of layers owns a contiguous range (a layer_split stage holds just its own)
//     and a collective can reduce all gradients at once or in buckets;
//   - the activation shape per example at every boundary;
//   - how channel_split may divide each layer across devices (the Megatron pairing, below).
// ModelStages runs a slice of the layers on a Device through its Ops; strategies see only these
// two, never a particular network. Models are built by name (or from a layer list) through
// make_model(); an unknown name is an Error listing the known ones.
//
// Channel split (Megatron-LM's tensor parallelism), per layer:
//   Output       the output channels / units are divided over the devices (column-parallel):
//                needs the whole input on every device; in backward each device's input
//                gradient is a partial sum over its channels.
//   Input        a linear layer divided by its INPUT features (row-parallel): reads the channel
//                shard the previous layer left on each device; the partial outputs are summed
//                by an allreduce (forward) and its input gradient needs no communication.
//                Paired with an Output layer before it: one allreduce forward and one backward
//                instead of an all-gather and a reduce-scatter per layer.
//   Channelwise  parameterless and per channel (pooling, dropout): runs on whatever shard it
//                is given.
//   Replicated   every device computes the whole layer (the input resize).
// Under channel_split's pairing "none", Input layers are split by Output instead.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace paralab {

enum class LayerOp {
  kConvReluPool,  // LeNet's fused stage: conv (stride 1, no padding), ReLU, avgpool 2/2 floor
  kConv,          // conv with stride and padding, then ReLU if `relu`
  kPool,          // max or average pooling
  kLinear,        // y = x W + b on the flattened input, then ReLU if `relu`
  kDropout,       // inverted dropout with probability p (training only)
  kResize,        // upsampling of the input to size x size (forward only: first layers only)
};

enum class SplitMode { kOutput, kInput, kChannelwise, kReplicated };

struct LayerSpec {
  std::string name;
  LayerOp op = LayerOp::kLinear;
  int64_t out = 0;                          // conv: output channels; linear: output units
  int kernel = 0, stride = 1, padding = 0;  // conv, pool (square windows)
  bool relu = false;                        // conv, linear
  bool max_pool = true;                     // pool: max, else average
  double p = 0;                             // dropout probability
  int64_t size = 0;                         // resize: output side
  bool bilinear = false;                    // resize: bilinear, else nearest
  SplitMode split = SplitMode::kOutput;
};

// How a model's weights start (biases start at 0):
//   Normal        N(0, scale^2), the book's LeNet chapters (scale 0.01);
//   XavierUniform U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010; PyTorch's
//                 xavier_uniform_, which the book applies to AlexNet): conv (K,C,R,S) fan_in
//                 C*R*S, fan_out K*R*S; linear (in,out) fan_in in, fan_out out.
struct InitRule {
  enum class Kind { Normal, XavierUniform } kind = Kind::Normal;
  double scale = 0.01;  // Normal only
  nlohmann::json describe() const;
  // "normal" (with `scale`) or "xavier_uniform"; an Error naming `path` otherwise.
  static InitRule from_json(const nlohmann::json& name, const nlohmann::json& scale,
                            const std::string& path);
};

struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset;  // elements into the flat buffer
  bool weight;     // drawn from N(0, scale^2) at initialisation; biases start at 0
};

class Model {
 public:
  // input: the example's shape (C,H,W); layers in order; config: what built it (reported).
  Model(std::string name, Shape input, std::vector<LayerSpec> layers, nlohmann::json config,
        InitRule init = {});

  const std::string& name() const { return name_; }
  const nlohmann::json& config() const { return config_; }
  // The description for results files: name, config, layers, parameter and FLOP counts.
  nlohmann::json describe() const;

  int layers() const { return static_cast<int>(layers_.size()); }
  const LayerSpec& layer(int l) const;
  // Every parameter tensor, in the flat buffer's order (layer by layer, weight then bias).
  const std::vector<ParamInfo>& tensors() const { return tensors_; }
  int64_t parameters() const { return offsets_.back(); }
  // Parameter tensors of layer l: [first_tensor(l), first_tensor(l + 1)).
  int first_tensor(int l) const;
  // First flat element of layer l's parameters; layer_offset(layers()) == parameters().
  int64_t layer_offset(int l) const;
  bool has_params(int l) const { return first_tensor(l) != first_tensor(l + 1); }
  bool has_dropout() const;
  // Whether backward must compute the gradient of activation l: some layer before l has
  // parameters.
  bool needs_input_grad(int l) const;
  // Activation b (0..layers()) of one example: (C,H,W) or (F); with n examples in front.
  const Shape& activation(int b) const;
  Shape activation_shape(int b, int64_t n) const;
  int64_t classes() const { return shape_numel(activation(layers())); }

  // Initial parameters on the host: weights by the model's InitRule, drawn in flat order from
  // Rng(seed), biases 0. The same seed gives the same values on every backend and for every
  // device count.
  const InitRule& init() const { return init_; }
  std::vector<float> initial_parameters(uint64_t seed) const;
  // The same with weights N(0, scale^2) whatever the model's rule (tests).
  std::vector<float> initial_parameters(uint64_t seed, double scale) const;
  // Forward multiply-adds of layer l for one example (convolutions and linear layers; the
  // elementwise layers count as 0). Training costs about 3x the forward's 2 FLOPs per MAC.
  int64_t forward_macs(int l) const;
  int64_t forward_macs() const;

 private:
  std::vector<float> draw(uint64_t seed, const InitRule& rule) const;

  std::string name_;
  nlohmann::json config_;
  InitRule init_;
  std::vector<LayerSpec> layers_;
  std::vector<Shape> activations_;
  std::vector<ParamInfo> tensors_;
  std::vector<int> first_tensor_;
  std::vector<int64_t> offsets_;  // per layer, and the total last
};

// Builds a model from its descriptor value: a built-in's name ("lenet", "alexnet"), an object
// {"name": built-in, options...}, or {"layers": [...], "input": [C,H,W]} (layer_from_json).
// Unknown names are an Error listing the known ones; `path` names the descriptor key.
std::shared_ptr<const Model> make_model(const nlohmann::json& config,
                                        const std::string& path = "model");
// The default model (LeNet), shared.
std::shared_ptr<const Model> default_model();
using ModelFactory = std::function<std::shared_ptr<const Model>(const nlohmann::json& options)>;
// Adds a built-in (tests register their own); replaces one of the same name.
void register_model(const std::string& name, ModelFactory factory);
std::vector<std::string> known_models();

// A layer as JSON and back: {"op": "conv", "out": 96, "kernel": 11, "stride": 4, "relu": true,
// "split": "output", "name": "conv1"}; ops conv_relu_pool, conv, pool ("mode": max|avg),
// linear, dropout ("p"), resize ("size", "mode": nearest|bilinear).
LayerSpec layer_from_json(const nlohmann::json& j, const std::string& path);
nlohmann::json layer_to_json(const LayerSpec& l);

// What a dropout layer's mask depends on, identical across strategies: the run's seed and epoch
// and the GLOBAL position of each example in the epoch's order (set by the strategy per pass);
// the layer index and the channel shard's first feature are added by the executor.
struct PassKey {
  uint64_t seed = 0;
  int64_t example_offset = 0;  // the first example of this pass in the epoch's order
};
uint64_t dropout_seed(uint64_t run_seed, int64_t epoch);
// The seed of layer l's mask in a pass keyed by pass_seed (DropoutKey::seed).
uint64_t dropout_layer_seed(uint64_t pass_seed, int layer);
// The op parameters of a conv or pool layer.
struct Conv2dParams;
struct Pool2dParams;
Conv2dParams conv_params(const LayerSpec& l);
Pool2dParams pool_params(const LayerSpec& l);

// Layers [first, last) of a model on one device, with `slots` independent sets of activations
// so that a pipeline stage can hold several micro-batches between their forward and backward
// passes (each slot has its own layer ops too: a conv op keeps its last forward's activation).
class ModelStages {
 public:
  // params: a flat tensor holding exactly these layers' parameters (shared, not copied).
  ModelStages(const Model& model, Device& device, int first, int last, Tensor params,
              int slots = 1);
  ~ModelStages();

  const Model& model() const { return model_; }
  int first() const { return first_; }
  int last() const { return last_; }
  bool has_loss() const { return last_ == model_.layers(); }
  int slots() const { return static_cast<int>(slots_.size()); }
  // View of parameter tensor i (model numbering, within these layers) in `flat`, a buffer laid
  // out like the params given to the constructor (the params, or their gradients).
  Tensor tensor_in(const Tensor& flat, int i) const;

  // x: activation `first` for n examples, any shape with that many elements per example; kept
  // (shared, not copied) for backward when training. Returns the slot's activation `last`
  // (the logits when has_loss()); it stays valid until the slot's next forward.
  const Tensor& forward(int slot, const Tensor& x, bool training, const PassKey& key = {});
  // has_loss() only: softmax cross-entropy of the slot's logits; stats (2) = {summed loss,
  // correct}. With `training`, keeps the logits' gradient for backward().
  void loss(int slot, const Tensor& labels, Tensor& stats, bool training);
  // Backward of the slot's last training forward: dy is the gradient of its output (null when
  // has_loss(): the loss's own). Writes the gradients of these layers' parameters into `grads`
  // (overwritten; laid out like the params). Returns the gradient of the input x, or an empty
  // tensor when first == 0. on_ready(i) is called as soon as the gradient of parameter tensor i
  // has been computed, last tensor first: the hook that lets a strategy start reducing
  // gradients while backward is still running.
  const Tensor& backward(int slot, const Tensor* dy, Tensor& grads,
                         const std::function<void(int)>& on_ready = {});

 private:
  struct Slot;
  void ensure_batch(Slot& s, int64_t n);

  const Model& model_;
  Device& device_;
  int first_, last_;
  Tensor params_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// A whole model on one device with its flat parameters and gradients (single, data_parallel).
// slots: sets of activations and ops (ModelStages' slots); each forward names its slot, and
// backward() works on the slot of the last training forward. More than one lets a caller keep
// one pass's buffers where they are while passes at other batch sizes run in others (single: a
// CUDA graph of its training step outlives evaluations and an epoch's shorter last batch). One
// slot (the default) resizes its buffers for each new batch size and holds one batch's.
class ModelReplica {
 public:
  ModelReplica(std::shared_ptr<const Model> model, Device& device, int slots = 1);
  ~ModelReplica();

  const Model& model() const { return *model_; }
  Device& device() const { return device_; }
  Tensor& params() { return params_; }  // (parameters())
  Tensor& grads() { return grads_; }    // (parameters()), gradients of the summed loss
  Tensor param(int i) const;            // view of tensor i
  Tensor grad(int i) const;

  // x (N, input...), labels (N) int32 -> stats (2) = {summed loss, correct count}, in `slot`.
  // With `training`, keeps what backward() needs and the loss gradient.
  void forward(const Tensor& x, const Tensor& labels, Tensor& stats, bool training,
               const PassKey& key = {}, int slot = 0);
  // Gradients of the summed loss of the last training forward() into grads() (overwritten);
  // on_ready as in ModelStages::backward.
  void backward(const std::function<void(int)>& on_ready = {});

  const Tensor& logits() const { return logits_; }

 private:
  std::shared_ptr<const Model> model_;
  Device& device_;
  Tensor params_, grads_;
  std::unique_ptr<ModelStages> layers_;
  Tensor logits_;
  int trained_slot_ = -1;  // the slot of the last training forward, while backward may use it
};

}  // namespace paralab
