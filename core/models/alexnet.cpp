// The book's AlexNet for Fashion-MNIST (d2l, "Deep Convolutional Neural Networks"):
//   resize 28 -> 224, conv 11x11/4 pad 1 1->96, ReLU, maxpool 3/2,
//   conv 5x5 pad 2 96->256, ReLU, maxpool 3/2,
//   conv 3x3 pad 1 256->384, ReLU, conv 3x3 pad 1 384->384, ReLU, conv 3x3 pad 1 384->256, ReLU,
//   maxpool 3/2, flatten (6400), FC 6400->4096, ReLU, dropout 0.5, FC 4096->4096, ReLU,
//   dropout 0.5, FC 4096->10. The book trains it with lr 0.01 and batch 128.
//
// Options (for tests and small machines; the defaults are the book's):
//   "input_size": 224    the side the 28x28 images are resized to (>= 65: three 3/2 poolings
//                        must fit; 28 drops the resize layer)
//   "width": 1.0         scales every channel count and hidden width (rounded, at least 1)
//   "dropout": 0.5       both dropout layers' probability
//   "resize": "bilinear" nearest | bilinear
//   "init": "xavier_uniform"  the book's (d2l's train_ch6 applies xavier_uniform_ to every conv
//                        and linear weight); "normal" with "init_scale" (default 0.01) as LeNet's
// For channel_split's Megatron pairing, fc2 is split by its input (fc1's units on each device).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/models/builtin.h"

namespace paralab {

using nlohmann::json;

std::shared_ptr<const Model> make_alexnet(const nlohmann::json& options) {
  int64_t size = 224;
  double width = 1.0, p = 0.5;
  bool bilinear = true;
  json init_name = "xavier_uniform", init_scale;
  for (const auto& [key, v] : options.items()) {
    if (key == "input_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1)
        throw Error("alexnet.input_size: must be an integer >= 1");
      size = v.get<int64_t>();
    } else if (key == "width") {
      if (!v.is_number() || !(v.get<double>() > 0))
        throw Error("alexnet.width: must be a number > 0");
      width = v.get<double>();
    } else if (key == "dropout") {
      if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() < 1))
        throw Error("alexnet.dropout: must be a number in [0, 1)");
      p = v.get<double>();
    } else if (key == "resize") {
      if (v != "nearest" && v != "bilinear")
        throw Error("alexnet.resize: must be nearest or bilinear");
      bilinear = v == "bilinear";
    } else if (key == "init") {
      init_name = v;
    } else if (key == "init_scale") {
      init_scale = v;
    } else {
      throw Error("alexnet: unknown option '" + key +
                  "' (known: dropout, init, init_scale, input_size, resize, width)");
    }
  }
  const InitRule init = InitRule::from_json(init_name, init_scale, "alexnet.init");
  auto ch = [&](int64_t c) {
    return std::max<int64_t>(1, std::llround(static_cast<double>(c) * width));
  };
  std::vector<LayerSpec> l;
  if (size != 28)
    l.push_back({.name = "resize",
                 .op = LayerOp::kResize,
                 .size = size,
                 .bilinear = bilinear,
                 .split = SplitMode::kReplicated});
  auto conv = [&](const char* name, int64_t out, int k, int s, int pad) {
    l.push_back({.name = name,
                 .op = LayerOp::kConv,
                 .out = ch(out),
                 .kernel = k,
                 .stride = s,
                 .padding = pad,
                 .relu = true});
  };
  auto pool = [&](const char* name) {
    l.push_back({.name = name,
                 .op = LayerOp::kPool,
                 .kernel = 3,
                 .stride = 2,
                 .max_pool = true,
                 .split = SplitMode::kChannelwise});
  };
  auto fc = [&](const char* name, int64_t out, bool relu, SplitMode split) {
    l.push_back({.name = name, .op = LayerOp::kLinear, .out = out, .relu = relu, .split = split});
  };
  auto dropout = [&](const char* name) {
    l.push_back({.name = name, .op = LayerOp::kDropout, .p = p, .split = SplitMode::kChannelwise});
  };
  conv("conv1", 96, 11, 4, 1);
  pool("pool1");
  conv("conv2", 256, 5, 1, 2);
  pool("pool2");
  conv("conv3", 384, 3, 1, 1);
  conv("conv4", 384, 3, 1, 1);
  conv("conv5", 256, 3, 1, 1);
  pool("pool3");
  fc("fc1", ch(4096), true, SplitMode::kOutput);
  dropout("dropout1");
  fc("fc2", ch(4096), true, SplitMode::kInput);
  dropout("dropout2");
  fc("fc3", 10, false, SplitMode::kOutput);
  nlohmann::json config = {{"name", "alexnet"},
                           {"input_size", size},
                           {"width", width},
                           {"dropout", p},
                           {"resize", bilinear ? "bilinear" : "nearest"},
                           {"init", init_name}};
  if (!init_scale.is_null()) config["init_scale"] = init_scale;
  return std::make_shared<Model>("alexnet", Shape{1, 28, 28}, std::move(l), config, init);
}

}  // namespace paralab
