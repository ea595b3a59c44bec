#include "core/model.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/lenet.h"
#include "core/models/builtin.h"
#include "core/ops.h"
#include "core/rng.h"

namespace paralab {

namespace {

using nlohmann::json;

const char* op_name(LayerOp op) {
  switch (op) {
    case LayerOp::kConvReluPool:
      return "conv_relu_pool";
    case LayerOp::kConv:
      return "conv";
    case LayerOp::kPool:
      return "pool";
    case LayerOp::kLinear:
      return "linear";
    case LayerOp::kDropout:
      return "dropout";
    case LayerOp::kResize:
      return "resize";
  }
  return "?";
}

const char* split_name(SplitMode s) {
  switch (s) {
    case SplitMode::kOutput:
      return "output";
    case SplitMode::kInput:
      return "input";
    case SplitMode::kChannelwise:
      return "channelwise";
    case SplitMode::kReplicated:
      return "replicated";
  }
  return "?";
}

bool has_weights(LayerOp op) {
  return op == LayerOp::kConvReluPool || op == LayerOp::kConv || op == LayerOp::kLinear;
}

// The activation after `l` for one example, and l's parameter shapes; throws when l cannot
// take `in`.
Shape output_of(const LayerSpec& l, const Shape& in, std::vector<Shape>& params) {
  auto fail = [&](const std::string& why) {
    throw Error("layer " + l.name + " (" + op_name(l.op) + ") on input " + shape_string(in) + ": " +
                why);
  };
  auto spatial = [&] {
    if (in.size() != 3) fail("needs a (C,H,W) input");
  };
  auto window = [&](int64_t side) {
    if (l.kernel < 1 || l.stride < 1 || l.padding < 0) fail("kernel, stride or padding < 1");
    const int64_t o = (side + 2 * l.padding - l.kernel) / l.stride + 1;
    if (side + 2 * l.padding < l.kernel || o < 1) fail("the window does not fit");
    return o;
  };
  switch (l.op) {
    case LayerOp::kConvReluPool: {
      spatial();
      if (l.out < 1 || l.kernel < 1) fail("out and kernel must be >= 1");
      const int64_t ch = in[1] - l.kernel + 1, cw = in[2] - l.kernel + 1;
      if (ch < 2 || cw < 2) fail("the conv output is smaller than 2x2");
      params = {{l.out, in[0], l.kernel, l.kernel}, {l.out}};
      return {l.out, ch / 2, cw / 2};
    }
    case LayerOp::kConv: {
      spatial();
      if (l.out < 1) fail("out must be >= 1");
      params = {{l.out, in[0], l.kernel, l.kernel}, {l.out}};
      return {l.out, window(in[1]), window(in[2])};
    }
    case LayerOp::kPool:
      spatial();
      // As pool2d requires (core/ops.cpp): a window that could lie wholly in the padding.
      if (2 * static_cast<int64_t>(l.padding) > l.kernel)
        fail("padding " + std::to_string(l.padding) + " is more than half the window " +
             std::to_string(l.kernel));
      return {in[0], window(in[1]), window(in[2])};
    case LayerOp::kLinear:
      if (l.out < 1) fail("out must be >= 1");
      params = {{shape_numel(in), l.out}, {l.out}};
      return {l.out};
    case LayerOp::kDropout:
      if (!(l.p >= 0 && l.p < 1)) fail("p must be in [0, 1)");
      return in;
    case LayerOp::kResize:
      spatial();
      if (l.size < 1) fail("size must be >= 1");
      return {in[0], l.size, l.size};
  }
  fail("unknown op");
  return {};
}

struct Registry {
  std::mutex mu;
  std::map<std::string, ModelFactory> factories;
  Registry() {
    factories["lenet"] = make_lenet;
    factories["alexnet"] = make_alexnet;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string known_list() {
  std::string s;
  for (const auto& n : known_models()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

json InitRule::describe() const {
  if (kind == Kind::XavierUniform) return {{"rule", "xavier_uniform"}};
  return {{"rule", "normal"}, {"scale", scale}};
}

InitRule InitRule::from_json(const json& name, const json& scale, const std::string& path) {
  InitRule r;
  if (name == "xavier_uniform") {
    r.kind = Kind::XavierUniform;
    if (!scale.is_null()) throw Error(path + "_scale: only for the normal rule");
  } else if (name == "normal") {
    if (!scale.is_null()) {
      if (!scale.is_number() || !(scale.get<double>() > 0))
        throw Error(path + "_scale: must be a number > 0");
      r.scale = scale.get<double>();
    }
  } else {
    throw Error(path + ": must be \"normal\" or \"xavier_uniform\"");
  }
  return r;
}

Model::Model(std::string name, Shape input, std::vector<LayerSpec> layers, json config,
             InitRule init)
    : name_(std::move(name)), config_(std::move(config)), init_(init), layers_(std::move(layers)) {
  PARALAB_REQUIRE(!layers_.empty(), "model " + name_ + ": no layers");
  PARALAB_REQUIRE(input.size() == 3,
                  "model " + name_ + ": input " + shape_string(input) + " is not (C,H,W)");
  activations_.push_back(input);
  offsets_.push_back(0);
  int weights = 0;
  bool params_before = false;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    LayerSpec& l = layers_[i];
    if (l.name.empty()) l.name = std::string(op_name(l.op)) + std::to_string(i + 1);
    std::vector<Shape> shapes;
    try {
      activations_.push_back(output_of(l, activations_.back(), shapes));
    } catch (const Error& e) {
      throw Error("model " + name_ + ": " + e.what());
    }
    first_tensor_.push_back(static_cast<int>(tensors_.size()));
    if (l.op == LayerOp::kResize && params_before)
      throw Error("model " + name_ + ": " + l.name +
                  " (resize) has no backward: it may only come before every layer with "
                  "parameters");
    const bool weighted = has_weights(l.op);
    if (!weighted && (l.split == SplitMode::kOutput || l.split == SplitMode::kInput))
      l.split = l.op == LayerOp::kResize ? SplitMode::kReplicated : SplitMode::kChannelwise;
    if (l.split == SplitMode::kInput && l.op != LayerOp::kLinear)
      throw Error("model " + name_ + ": " + l.name +
                  ": only a linear layer can be split by its input (a ReLU or pooling after the "
                  "sum needs the complete pre-activation)");
    if (l.split == SplitMode::kChannelwise && weighted)
      throw Error("model " + name_ + ": " + l.name + " has parameters: split output or input");
    if (weighted) {
      ++weights;
      const std::string k = std::to_string(weights);
      int64_t at = offsets_.back();
      tensors_.push_back({"w" + k, shapes[0], at, true});
      at += shape_numel(shapes[0]);
      tensors_.push_back({"b" + k, shapes[1], at, false});
      at += shape_numel(shapes[1]);
      offsets_.push_back(at);
      params_before = true;
    } else {
      offsets_.push_back(offsets_.back());
    }
  }
  first_tensor_.push_back(static_cast<int>(tensors_.size()));
  PARALAB_REQUIRE(activations_.back().size() == 1, "model " + name_ + ": the last layer's output " +
                                                       shape_string(activations_.back()) +
                                                       " is not a vector of logits");
  // One logit per Fashion-MNIST class: the loss reads the logit of each example's label (a
  // model of 5 outputs read and wrote past them).
  if (activations_.back()[0] != kClasses)
    throw Error("model " + name_ + ": the last layer has " +
                std::to_string(activations_.back()[0]) + " outputs; it needs " +
                std::to_string(kClasses) + ", one per class");
}

const LayerSpec& Model::layer(int l) const {
  PARALAB_REQUIRE(l >= 0 && l < layers(), "model " + name_ + ": no layer " + std::to_string(l));
  return layers_[static_cast<std::size_t>(l)];
}

int Model::first_tensor(int l) const {
  PARALAB_REQUIRE(l >= 0 && l <= layers(), "model " + name_ + ": no layer " + std::to_string(l));
  return first_tensor_[static_cast<std::size_t>(l)];
}

int64_t Model::layer_offset(int l) const {
  PARALAB_REQUIRE(l >= 0 && l <= layers(), "model " + name_ + ": no layer " + std::to_string(l));
  return offsets_[static_cast<std::size_t>(l)];
}

bool Model::has_dropout() const {
  return std::any_of(layers_.begin(), layers_.end(),
                     [](const LayerSpec& l) { return l.op == LayerOp::kDropout && l.p > 0; });
}

bool Model::needs_input_grad(int l) const {
  PARALAB_REQUIRE(l >= 0 && l <= layers(), "model " + name_ + ": no layer " + std::to_string(l));
  return layer_offset(l) > 0;
}

const Shape& Model::activation(int b) const {
  PARALAB_REQUIRE(b >= 0 && b <= layers(),
                  "model " + name_ + ": no activation boundary " + std::to_string(b));
  return activations_[static_cast<std::size_t>(b)];
}

Shape Model::activation_shape(int b, int64_t n) const {
  Shape s{n};
  const Shape& a = activation(b);
  s.insert(s.end(), a.begin(), a.end());
  return s;
}

std::vector<float> Model::initial_parameters(uint64_t seed) const { return draw(seed, init_); }

std::vector<float> Model::initial_parameters(uint64_t seed, double scale) const {
  return draw(seed, {InitRule::Kind::Normal, scale});
}

std::vector<float> Model::draw(uint64_t seed, const InitRule& rule) const {
  std::vector<float> flat(static_cast<std::size_t>(parameters()), 0.0f);
  Rng rng(seed);
  for (const ParamInfo& p : tensors_) {
    if (!p.weight) continue;
    double bound = 0;  // XavierUniform's a
    if (rule.kind == InitRule::Kind::XavierUniform) {
      const Shape& s = p.shape;  // conv (K,C,R,S), linear (in,out)
      const int64_t field = s.size() == 4 ? s[2] * s[3] : 1;
      const int64_t fan_in = s.size() == 4 ? s[1] * field : s[0];
      const int64_t fan_out = s.size() == 4 ? s[0] * field : s[1];
      bound = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    }
    for (int64_t j = 0; j < shape_numel(p.shape); ++j)
      flat[static_cast<std::size_t>(p.offset + j)] = static_cast<float>(
          rule.kind == InitRule::Kind::Normal ? rule.scale * rng.normal()
                                              : bound * (2.0 * rng.uniform() - 1.0));
  }
  return flat;
}

int64_t Model::forward_macs(int l) const {
  const LayerSpec& s = layer(l);
  const Shape& in = activation(l);
  const Shape& out = activation(l + 1);
  switch (s.op) {
    case LayerOp::kConvReluPool:  // the conv before the pooling
      return s.out * (in[1] - s.kernel + 1) * (in[2] - s.kernel + 1) * in[0] * s.kernel * s.kernel;
    case LayerOp::kConv:
      return shape_numel(out) * in[0] * s.kernel * s.kernel;
    case LayerOp::kLinear:
      return shape_numel(in) * s.out;
    default:
      return 0;
  }
}

int64_t Model::forward_macs() const {
  int64_t sum = 0;
  for (int l = 0; l < layers(); ++l) sum += forward_macs(l);
  return sum;
}

json Model::describe() const {
  json layers = json::array();
  for (int l = 0; l < this->layers(); ++l) {
    json j = layer_to_json(layers_[static_cast<std::size_t>(l)]);
    j["output"] = activation(l + 1);
    j["parameters"] = layer_offset(l + 1) - layer_offset(l);
    j["forward_macs"] = forward_macs(l);
    layers.push_back(j);
  }
  return {{"name", name_},
          {"config", config_},
          {"input", activation(0)},
          {"layers", layers},
          {"parameters", parameters()},
          {"init", init_.describe()},
          {"forward_macs_per_example", forward_macs()},
          // Forward 2 FLOPs per multiply-add; backward twice the forward (input and weight
          // gradients): 6 per MAC per training example.
          {"training_flops_per_example", 6 * forward_macs()}};
}

LayerSpec layer_from_json(const json& j, const std::string& path) {
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
  if (!j.is_object()) fail("a layer must be an object");
  LayerSpec l;
  if (j.contains("op") && !j["op"].is_string()) fail("op: must be a string");
  const std::string op = j.value("op", "");
  static const std::map<std::string, LayerOp> ops = {{"conv_relu_pool", LayerOp::kConvReluPool},
                                                     {"conv", LayerOp::kConv},
                                                     {"pool", LayerOp::kPool},
                                                     {"linear", LayerOp::kLinear},
                                                     {"dropout", LayerOp::kDropout},
                                                     {"resize", LayerOp::kResize}};
  const auto it = ops.find(op);
  if (it == ops.end())
    fail("unknown op '" + op + "' (known: conv, conv_relu_pool, dropout, linear, pool, resize)");
  l.op = it->second;
  l.split = has_weights(l.op)          ? SplitMode::kOutput
            : l.op == LayerOp::kResize ? SplitMode::kReplicated
                                       : SplitMode::kChannelwise;
  // Into its field's type, or an error: kernel 4294967301 became 5 in an int.
  auto integer = [&](const std::string& key, auto& into) {
    using T = std::remove_reference_t<decltype(into)>;
    const auto& v = j.at(key);
    if (!v.is_number_integer() && !v.is_number_unsigned()) fail(key + ": must be an integer");
    const bool fits =
        v.is_number_unsigned()
            ? v.template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
            : v.template get<int64_t>() >= std::numeric_limits<T>::min() &&
                  v.template get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) fail(key + ": " + v.dump() + " is out of range");
    into = v.template get<T>();
  };
  for (const auto& [key, v] : j.items()) {
    if (key == "op") continue;
    if (key == "name") {
      if (!v.is_string()) fail("name: must be a string");
      l.name = v.get<std::string>();
    } else if (key == "out") {
      integer(key, l.out);
    } else if (key == "kernel") {
      integer(key, l.kernel);
    } else if (key == "stride") {
      integer(key, l.stride);
    } else if (key == "padding") {
      integer(key, l.padding);
    } else if (key == "size") {
      integer(key, l.size);
    } else if (key == "relu") {
      if (!v.is_boolean()) fail("relu: must be true or false");
      l.relu = v.get<bool>();
    } else if (key == "p") {
      if (!v.is_number()) fail("p: must be a number");
      l.p = v.get<double>();
    } else if (key == "mode") {
      const std::string m = v.is_string() ? v.get<std::string>() : "";
      if (l.op == LayerOp::kPool && (m == "max" || m == "avg"))
        l.max_pool = m == "max";
      else if (l.op == LayerOp::kResize && (m == "nearest" || m == "bilinear"))
        l.bilinear = m == "bilinear";
      else
        fail("mode: '" + v.dump() + "' (known: max, avg for pool; nearest, bilinear for resize)");
    } else if (key == "split") {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      static const std::map<std::string, SplitMode> splits = {
          {"output", SplitMode::kOutput},
          {"input", SplitMode::kInput},
          {"channelwise", SplitMode::kChannelwise},
          {"replicated", SplitMode::kReplicated}};
      const auto sit = splits.find(s);
      if (sit == splits.end())
        fail("split: '" + v.dump() + "' (known: channelwise, input, output, replicated)");
      l.split = sit->second;
    } else if (key == "output" || key == "parameters" || key == "forward_macs") {
      // What describe() adds: derived, ignored on the way back in.
    } else {
      fail("unknown key '" + key + "' for a layer");
    }
  }
  return l;
}

json layer_to_json(const LayerSpec& l) {
  json j = {{"name", l.name}, {"op", op_name(l.op)}, {"split", split_name(l.split)}};
  switch (l.op) {
    case LayerOp::kConvReluPool:
      j["out"] = l.out;
      j["kernel"] = l.kernel;
      break;
    case LayerOp::kConv:
      j["out"] = l.out;
      j["kernel"] = l.kernel;
      j["stride"] = l.stride;
      j["padding"] = l.padding;
      j["relu"] = l.relu;
      break;
    case LayerOp::kPool:
      j["mode"] = l.max_pool ? "max" : "avg";
      j["kernel"] = l.kernel;
      j["stride"] = l.stride;
      j["padding"] = l.padding;
      break;
    case LayerOp::kLinear:
      j["out"] = l.out;
      j["relu"] = l.relu;
      break;
    case LayerOp::kDropout:
      j["p"] = l.p;
      break;
    case LayerOp::kResize:
      j["size"] = l.size;
      j["mode"] = l.bilinear ? "bilinear" : "nearest";
      break;
  }
  return j;
}

std::shared_ptr<const Model> make_model(const json& config, const std::string& path) {
  // A model's own errors start "model NAME: "; under the descriptor's path, the path says that.
  auto at_path = [&](const Error& e, const std::string& name) {
    std::string what = e.what();
    if (const std::string own = "model " + name + ": "; what.rfind(own, 0) == 0)
      what.erase(0, own.size());
    return Error(path + ": " + what);
  };
  if (config.is_object() && config.contains("layers")) {
    const json& layers = config["layers"];
    if (!layers.is_array() || layers.empty())
      throw Error(path + ".layers: must be a non-empty array");
    std::vector<LayerSpec> specs;
    for (std::size_t i = 0; i < layers.size(); ++i)
      specs.push_back(layer_from_json(layers[i], path + ".layers." + std::to_string(i)));
    Shape input = {1, 28, 28};
    InitRule init;
    for (const auto& [key, v] : config.items()) {
      // What describe() adds beside the layers is derived: ignored on the way back in.
      if (key == "layers" || key == "name" || key == "config" || key == "parameters" ||
          key == "forward_macs_per_example" || key == "training_flops_per_example" ||
          key == "init_scale")
        continue;
      if (key == "input") {
        // The data is Fashion-MNIST's: other shapes reshaped its images silently, or failed at
        // run time. A resize layer changes the side.
        if (v != json::array({1, 28, 28}))
          throw Error(path +
                      ".input: must be [1, 28, 28] (Fashion-MNIST's images; a resize "
                      "layer changes their side), got " +
                      v.dump().substr(0, 40));
      } else if (key == "init") {
        // "normal" | "xavier_uniform" (+ "init_scale"), or describe()'s {"rule", "scale"}.
        const bool object = v.is_object();
        init = InitRule::from_json(
            object ? v.value("rule", json()) : v,
            object ? v.value("scale", json()) : config.value("init_scale", json()), path + ".init");
      } else {
        throw Error(path + "." + key +
                    ": unknown key for a layer list (known: input, init, init_scale, layers, "
                    "name)");
      }
    }
    if (config.contains("init_scale") && !config.contains("init"))
      throw Error(path + ".init_scale: only with \"init\": \"normal\"");
    if (config.contains("name") && !config["name"].is_string())
      throw Error(path + ".name: must be a string");
    const std::string name = config.value("name", "custom");
    try {
      return std::make_shared<Model>(name, input, std::move(specs), config, init);
    } catch (const Error& e) {
      throw at_path(e, name);
    }
  }
  std::string name;
  json options = json::object();
  if (config.is_string()) {
    name = config.get<std::string>();
  } else if (config.is_object() && config.contains("name") && config["name"].is_string()) {
    name = config["name"].get<std::string>();
    options = config;
    options.erase("name");
  } else {
    throw Error(path + ": must be a model name (known: " + known_list() +
                "), {\"name\": ..., options} or {\"layers\": [...]}");
  }
  ModelFactory factory;
  {
    std::lock_guard lock(registry().mu);
    const auto it = registry().factories.find(name);
    if (it != registry().factories.end()) factory = it->second;
  }
  if (!factory) throw Error(path + ": unknown model '" + name + "' (known: " + known_list() + ")");
  try {
    return factory(options);
  } catch (const Error& e) {
    throw at_path(e, name);
  }
}

std::shared_ptr<const Model> default_model() {
  static const std::shared_ptr<const Model> m = make_lenet(json::object());
  return m;
}

void register_model(const std::string& name, ModelFactory factory) {
  std::lock_guard lock(registry().mu);
  registry().factories[name] = std::move(factory);
}

std::vector<std::string> known_models() {
  std::lock_guard lock(registry().mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : registry().factories) names.push_back(name);
  return names;
}

uint64_t dropout_seed(uint64_t run_seed, int64_t epoch) {
  return mix(run_seed ^ 0xd5a61266f0c9392cULL, static_cast<uint64_t>(epoch));
}

uint64_t dropout_layer_seed(uint64_t pass_seed, int layer) {
  return mix(pass_seed, static_cast<uint64_t>(layer));
}

Conv2dParams conv_params(const LayerSpec& l) { return Conv2dParams::square(l.stride, l.padding); }

Pool2dParams pool_params(const LayerSpec& l) {
  return Pool2dParams::square(l.max_pool ? PoolMode::Max : PoolMode::Average, l.kernel, l.stride,
                              l.padding);
}

// ---- the executor ----

struct ModelStages::Slot {
  // Per layer, the op objects it needs (null elsewhere).
  std::vector<std::unique_ptr<ConvReluPool>> conv_relu_pool;
  std::vector<std::unique_ptr<Conv2d>> conv;
  std::vector<std::unique_ptr<Pool2d>> pool;
  std::vector<std::unique_ptr<Linear>> linear;
  std::vector<std::unique_ptr<Relu>> relu;
  std::vector<std::unique_ptr<Dropout>> dropout;
  std::vector<std::unique_ptr<Resize>> resize;
  std::unique_ptr<SoftmaxXent> xent;
  int64_t n = -1;
  // act[b]: activation b; act[first] is the caller's input, the others are owned. grad[b]: its
  // gradient, owned for first < b <= last (and for b == first > 0: the returned input gradient).
  std::vector<Tensor> act, grad;
  bool trained = false;
};

ModelStages::ModelStages(const Model& model, Device& device, int first, int last, Tensor params,
                         int slots)
    : model_(model), device_(device), first_(first), last_(last), params_(std::move(params)) {
  const int layers = model.layers();
  PARALAB_REQUIRE(0 <= first && first < last && last <= layers,
                  model.name() + ": layers [" + std::to_string(first) + ", " +
                      std::to_string(last) + ") are not a non-empty range of its " +
                      std::to_string(layers));
  PARALAB_REQUIRE(slots >= 1, model.name() + ": " + std::to_string(slots) + " activation slots");
  const int64_t expect = model.layer_offset(last) - model.layer_offset(first);
  PARALAB_REQUIRE(params_.numel() == expect,
                  model.name() + ": layers [" + std::to_string(first) + ", " +
                      std::to_string(last) + ") have " + std::to_string(expect) +
                      " parameters, got a buffer of " + std::to_string(params_.numel()));
  Ops& ops = device.ops();
  for (int i = 0; i < slots; ++i) {
    auto s = std::make_unique<Slot>();
    const auto L = static_cast<std::size_t>(layers);
    s->conv_relu_pool.resize(L);
    s->conv.resize(L);
    s->pool.resize(L);
    s->linear.resize(L);
    s->relu.resize(L);
    s->dropout.resize(L);
    s->resize.resize(L);
    s->act.resize(L + 1);
    s->grad.resize(L + 1);
    for (int l = first; l < last; ++l) {
      const LayerSpec& spec = model.layer(l);
      const auto at = static_cast<std::size_t>(l);
      switch (spec.op) {
        case LayerOp::kConvReluPool:
          s->conv_relu_pool[at] = ops.make_conv_relu_pool();
          break;
        case LayerOp::kConv:
          s->conv[at] = ops.make_conv2d(conv_params(spec));
          if (spec.relu) s->relu[at] = ops.make_relu();
          break;
        case LayerOp::kPool:
          s->pool[at] = ops.make_pool2d(pool_params(spec));
          break;
        case LayerOp::kLinear:  // with its ReLU as one op (CUDA fuses them)
          s->linear[at] = spec.relu ? ops.make_linear_relu() : ops.make_linear();
          break;
        case LayerOp::kDropout:
          s->dropout[at] = ops.make_dropout();
          break;
        case LayerOp::kResize:
          s->resize[at] =
              ops.make_resize(spec.bilinear ? ResizeMode::Bilinear : ResizeMode::Nearest);
          break;
      }
    }
    if (last == layers) s->xent = ops.make_softmax_xent();
    slots_.push_back(std::move(s));
  }
}

ModelStages::~ModelStages() = default;

Tensor ModelStages::tensor_in(const Tensor& flat, int i) const {
  PARALAB_REQUIRE(model_.first_tensor(first_) <= i && i < model_.first_tensor(last_),
                  model_.name() + ": parameter tensor " + std::to_string(i) +
                      " is not in layers [" + std::to_string(first_) + ", " +
                      std::to_string(last_) + ")");
  const ParamInfo& p = model_.tensors()[static_cast<std::size_t>(i)];
  return flat.view(p.offset - model_.layer_offset(first_), p.shape);
}

void ModelStages::ensure_batch(Slot& s, int64_t n) {
  if (n == s.n) return;
  for (int b = first_ + 1; b <= last_; ++b)
    s.act[b] = Tensor::empty(device_, model_.activation_shape(b, n));
  for (int b = std::max(first_, 1); b <= last_; ++b)
    s.grad[b] = Tensor::empty(device_, model_.activation_shape(b, n));
  s.n = n;
  s.trained = false;
}

const Tensor& ModelStages::forward(int slot, const Tensor& x, bool training, const PassKey& key) {
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  const Shape want = model_.activation_shape(first_, 1);
  PARALAB_REQUIRE(x.ndim() >= 1 && x.dim(0) >= 1 && x.numel() == x.dim(0) * shape_numel(want),
                  model_.name() + ": input " + shape_string(x.shape()) + " to " +
                      model_.layer(first_).name + " is not (N," + shape_string(want).substr(3));
  const int64_t n = x.dim(0);
  ensure_batch(s, n);
  s.act[first_] = x.reshaped(model_.activation_shape(first_, n));
  for (int l = first_; l < last_; ++l) {
    const auto at = static_cast<std::size_t>(l);
    const LayerSpec& spec = model_.layer(l);
    const int t = model_.first_tensor(l);
    switch (spec.op) {
      case LayerOp::kConvReluPool:
        s.conv_relu_pool[at]->forward(s.act[at], tensor_in(params_, t), tensor_in(params_, t + 1),
                                      s.act[at + 1], training);
        break;
      case LayerOp::kLinear:
        s.linear[at]->forward(s.act[at].reshaped({n, shape_numel(model_.activation(l))}),
                              tensor_in(params_, t), tensor_in(params_, t + 1), s.act[at + 1]);
        break;
      case LayerOp::kConv:
        s.conv[at]->forward(s.act[at], tensor_in(params_, t), tensor_in(params_, t + 1),
                            s.act[at + 1]);
        if (spec.relu) s.relu[at]->forward(s.act[at + 1], s.act[at + 1]);
        break;
      case LayerOp::kPool:
        s.pool[at]->forward(s.act[at], s.act[at + 1], training);
        break;
      case LayerOp::kDropout:
        s.dropout[at]->forward(s.act[at], s.act[at + 1], static_cast<float>(spec.p),
                               {dropout_layer_seed(key.seed, l), key.example_offset, 0}, training);
        break;
      case LayerOp::kResize:
        s.resize[at]->forward(s.act[at], s.act[at + 1]);
        break;
    }
  }
  s.trained = training;
  if (!training) s.act[first_] = Tensor();
  return s.act[last_];
}

void ModelStages::loss(int slot, const Tensor& labels, Tensor& stats, bool training) {
  PARALAB_REQUIRE(has_loss(), model_.name() + ": loss() on layers ending before the last");
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  PARALAB_REQUIRE(s.n >= 1, model_.name() + ": loss() before forward()");
  PARALAB_REQUIRE(labels.numel() == s.n, model_.name() + ": " + std::to_string(labels.numel()) +
                                             " labels for " + std::to_string(s.n) + " examples");
  s.xent->forward_backward(s.act[last_], labels, training ? &s.grad[last_] : nullptr, stats);
}

const Tensor& ModelStages::backward(int slot, const Tensor* dy, Tensor& grads,
                                    const std::function<void(int)>& on_ready) {
  Slot& s = *slots_.at(static_cast<std::size_t>(slot));
  PARALAB_REQUIRE(s.trained, model_.name() + ": backward() without a training forward()");
  PARALAB_REQUIRE(grads.numel() == params_.numel(),
                  model_.name() + ": gradient buffer of " + std::to_string(grads.numel()) +
                      " for " + std::to_string(params_.numel()) + " parameters");
  const int64_t n = s.n;
  if (!has_loss()) {
    PARALAB_REQUIRE(dy && dy->numel() == s.act[last_].numel(),
                    model_.name() + ": backward() of layers ending at " +
                        model_.layer(last_ - 1).name + " needs the gradient of its output " +
                        shape_string(s.act[last_].shape()));
  }
  const Tensor d_out = has_loss() ? s.grad[last_] : dy->reshaped(model_.activation_shape(last_, n));
  for (int l = last_ - 1; l >= first_; --l) {
    if (l + 1 < last_ && !model_.needs_input_grad(l + 1)) break;  // no gradient reaches layer l
    const auto at = static_cast<std::size_t>(l);
    const LayerSpec& spec = model_.layer(l);
    const Tensor& dout = l == last_ - 1 ? d_out : s.grad[at + 1];
    // A stage starting past layer 0 always returns its input's gradient (the pipeline sends it).
    Tensor* din = (l > 0 && l == first_) || model_.needs_input_grad(l) ? &s.grad[at] : nullptr;
    const int t = model_.first_tensor(l);
    switch (spec.op) {
      case LayerOp::kConvReluPool: {
        Tensor gw = tensor_in(grads, t), gb = tensor_in(grads, t + 1);
        s.conv_relu_pool[at]->backward(s.act[at], tensor_in(params_, t), dout, din, gw, gb);
        break;
      }
      case LayerOp::kLinear: {
        Tensor gw = tensor_in(grads, t), gb = tensor_in(grads, t + 1);
        const int64_t in = shape_numel(model_.activation(l));
        Tensor din_flat = din ? din->reshaped({n, in}) : Tensor();
        s.linear[at]->backward(s.act[at].reshaped({n, in}), tensor_in(params_, t), dout,
                               din ? &din_flat : nullptr, gw, gb);
        break;
      }
      case LayerOp::kConv: {
        Tensor gw = tensor_in(grads, t), gb = tensor_in(grads, t + 1);
        const Tensor* d = &dout;
        if (spec.relu) {
          s.relu[at]->backward(s.act[at + 1], dout, s.grad[at + 1]);
          d = &s.grad[at + 1];
        }
        s.conv[at]->backward(s.act[at], tensor_in(params_, t), *d, din, gw, gb);
        break;
      }
      case LayerOp::kPool:
        if (din) s.pool[at]->backward(dout, *din);
        break;
      case LayerOp::kDropout:
        if (din) s.dropout[at]->backward(dout, *din);
        break;
      case LayerOp::kResize:
        break;  // before every layer with parameters (the Model checks): no gradient needed
    }
    if (on_ready)
      for (int i = model_.first_tensor(l + 1) - 1; i >= t; --i) on_ready(i);
  }
  static const Tensor none;
  return first_ > 0 ? s.grad[static_cast<std::size_t>(first_)] : none;
}

ModelReplica::ModelReplica(std::shared_ptr<const Model> model, Device& device, int slots)
    : model_(std::move(model)),
      device_(device),
      params_(Tensor::zeros(device, {model_->parameters()})),
      grads_(Tensor::zeros(device, {model_->parameters()})),
      layers_(std::make_unique<ModelStages>(*model_, device, 0, model_->layers(), params_, slots)) {
}

ModelReplica::~ModelReplica() = default;

Tensor ModelReplica::param(int i) const {
  const ParamInfo& p = model_->tensors().at(static_cast<std::size_t>(i));
  return params_.view(p.offset, p.shape);
}

Tensor ModelReplica::grad(int i) const {
  const ParamInfo& p = model_->tensors().at(static_cast<std::size_t>(i));
  return grads_.view(p.offset, p.shape);
}

void ModelReplica::forward(const Tensor& x, const Tensor& labels, Tensor& stats, bool training,
                           const PassKey& key, int slot) {
  const Shape want = model_->activation_shape(0, x.ndim() >= 1 ? x.dim(0) : 0);
  PARALAB_REQUIRE(x.shape() == want && x.dim(0) >= 1,
                  model_->name() + ": input " + shape_string(x.shape()) + " is not (N," +
                      shape_string(model_->activation(0)).substr(1));
  PARALAB_REQUIRE(labels.numel() == x.dim(0), model_->name() + ": " +
                                                  std::to_string(labels.numel()) + " labels for " +
                                                  std::to_string(x.dim(0)) + " images");
  PARALAB_REQUIRE(slot >= 0 && slot < layers_->slots(), model_->name() + ": slot " +
                                                            std::to_string(slot) + " of " +
                                                            std::to_string(layers_->slots()));
  logits_ = layers_->forward(slot, x, training, key);
  layers_->loss(slot, labels, stats, training);
  // An evaluation in another slot leaves the training pass's state for backward.
  if (training)
    trained_slot_ = slot;
  else if (slot == trained_slot_)
    trained_slot_ = -1;
}

void ModelReplica::backward(const std::function<void(int)>& on_ready) {
  PARALAB_REQUIRE(trained_slot_ >= 0, model_->name() + ": backward() without a training forward()");
  layers_->backward(trained_slot_, nullptr, grads_, on_ready);
}

}  // namespace paralab
