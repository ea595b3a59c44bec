// Models as data (core/model.h): the registry, LeNet's and AlexNet's descriptions, and a third
// model defined only here ("tiny") trained by EVERY strategy and checked step by step against a
// single device (tests/strategy_harness.h), whose own step is checked against the
// double-precision reference composed from its layer list: a new model needs no change in
// strategies/.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/lenet.h"
#include "core/model.h"
#include "tests/reference/reference.h"
#include "tests/strategy_harness.h"

namespace paralab {
namespace {

// Two fused conv stages and three linear layers, the middle one split by its input (paired
// with the output-split layer before it under channel_split's Megatron pairing):
//   (1,28,28) -> conv 5x5 6 (6,12,12) -> conv 3x3 8 (8,5,5) -> fc 200->24 -> fc 24->16 -> fc 16->10
const json kTinyLayers = {
    {"layers",
     {{{"op", "conv_relu_pool"}, {"name", "c1"}, {"out", 6}, {"kernel", 5}},
      {{"op", "conv_relu_pool"}, {"name", "c2"}, {"out", 8}, {"kernel", 3}},
      {{"op", "linear"}, {"name", "f1"}, {"out", 24}, {"relu", true}},
      {{"op", "linear"}, {"name", "f2"}, {"out", 16}, {"relu", true}, {"split", "input"}},
      {{"op", "linear"}, {"name", "f3"}, {"out", 10}}}},
    {"name", "tiny"}};

std::shared_ptr<const Model> tiny() {
  static const bool registered = [] {
    register_model("tiny", [](const json& options) {
      if (!options.empty()) throw Error("tiny has no options");
      return make_model(kTinyLayers, "tiny");
    });
    return true;
  }();
  (void)registered;
  return make_model("tiny");
}

TEST(Models, RegistryListsTheKnownNamesOnAMiss) {
  tiny();
  EXPECT_EQ(error_of([] { make_model("resnet"); }),
            "model: unknown model 'resnet' (known: alexnet, lenet, tiny)");
  EXPECT_EQ(error_of([] {
              make_model(json{{"layers", {{{"op", "attention"}}}}});
            }),
            "model.layers.0: unknown op 'attention' (known: conv, conv_relu_pool, dropout, "
            "linear, pool, resize)");
  EXPECT_EQ(error_of([] {
              make_model(json{{"name", "alexnet"}, {"depth", 3}});
            }),
            "model: alexnet: unknown option 'depth' (known: dropout, init, init_scale, "
            "input_size, resize, width)");
  EXPECT_EQ(error_of([] {
              make_model(json{{"name", "alexnet"}, {"init", "he"}});
            }),
            "model: alexnet.init: must be \"normal\" or \"xavier_uniform\"");
  EXPECT_EQ(error_of([] {
              make_model(json{{"layers", {{{"op", "linear"}, {"out", 10}}}}, {"init_scale", 2}});
            }),
            "model.init_scale: only with \"init\": \"normal\"");
  // conv_relu_pool's fused ReLU and pooling need the whole pre-activation.
  EXPECT_NE(
      error_of([] {
        make_model(json{{"layers",
                         {{{"op", "conv_relu_pool"}, {"out", 2}, {"kernel", 3}},
                          {{"op", "conv_relu_pool"}, {"out", 2}, {"kernel", 3}, {"split", "input"}},
                          {{"op", "linear"}, {"out", 10}}}}});
      }).find("only a linear layer can be split by its input"),
      std::string::npos);
}

TEST(Models, LeNetIsTheBooksNetwork) {
  const auto m = make_model("lenet");
  EXPECT_EQ(m->parameters(), 129068);
  EXPECT_EQ(m->layers(), 4);
  // 2.25 M multiply-adds per image forward, conv2 about 90 % of them.
  EXPECT_EQ(m->forward_macs(), 20 * 26 * 26 * 9 + 50 * 9 * 9 * 500 + 800 * 128 + 128 * 10);
  EXPECT_EQ(m->forward_macs(1), 2025000);
  EXPECT_EQ(m->activation_shape(2, 5), (Shape{5, 50, 4, 4}));
  EXPECT_EQ(m->layer_offset(2), 20 * 9 + 20 + 50 * 500 + 50);
  EXPECT_EQ(default_model()->describe(), m->describe());
  EXPECT_EQ(lenet_initial_parameters(4), m->initial_parameters(4));
}

TEST(Models, DescriptionRoundTripsThroughJson) {
  for (const auto& m : {make_model("lenet"), tiny()}) {
    const auto again = make_model(m->describe());
    ASSERT_EQ(again->tensors().size(), m->tensors().size()) << m->name();
    for (std::size_t i = 0; i < m->tensors().size(); ++i) {
      EXPECT_EQ(again->tensors()[i].shape, m->tensors()[i].shape);
      EXPECT_EQ(again->tensors()[i].offset, m->tensors()[i].offset);
    }
    EXPECT_EQ(again->describe()["layers"], m->describe()["layers"]);
    EXPECT_EQ(again->describe()["init"], m->describe()["init"]);
    EXPECT_EQ(again->initial_parameters(5), m->initial_parameters(5));
  }
}

// ---- the double-precision reference of a model made of conv_relu_pool and linear layers ----

struct RefStep {
  double loss = 0;
  std::vector<double> grads;  // flat, like the model's parameters
};

RefStep reference_step(const Model& m, const std::vector<float>& params,
                       const std::vector<double>& images, const std::vector<int>& labels) {
  const int n = static_cast<int>(labels.size());
  auto tensor = [&](int i) {
    const ParamInfo& p = m.tensors()[static_cast<std::size_t>(i)];
    return std::vector<double>(params.begin() + p.offset,
                               params.begin() + p.offset + shape_numel(p.shape));
  };
  const int L = m.layers();
  std::vector<std::vector<double>> act(static_cast<std::size_t>(L + 1)),
      pre(static_cast<std::size_t>(L));
  act[0] = images;
  for (int l = 0; l < L; ++l) {
    const LayerSpec& s = m.layer(l);
    const Shape& in = m.activation(l);
    const int t = m.first_tensor(l);
    const auto at = static_cast<std::size_t>(l);
    if (s.op == LayerOp::kConvReluPool) {
      const std::vector<double> zero(
          static_cast<std::size_t>(n * shape_numel(m.activation(l + 1))));
      act[at + 1] =
          ref::conv_relu_pool(act[at], tensor(t), tensor(t + 1), zero, n, static_cast<int>(in[0]),
                              static_cast<int>(in[1]), static_cast<int>(in[2]),
                              static_cast<int>(s.out), s.kernel, s.kernel)
              .y;
    } else {
      pre[at] = ref::linear_forward(act[at], tensor(t), tensor(t + 1), n,
                                    static_cast<int>(shape_numel(in)), static_cast<int>(s.out));
      act[at + 1] = s.relu ? ref::relu_forward(pre[at]) : pre[at];
    }
  }
  RefStep r;
  r.grads.assign(static_cast<std::size_t>(m.parameters()), 0.0);
  std::vector<double> dy;
  int correct = 0;
  r.loss = ref::softmax_xent(act[static_cast<std::size_t>(L)], labels, n,
                             static_cast<int>(m.classes()), dy, correct);
  for (int l = L - 1; l >= 0; --l) {
    const LayerSpec& s = m.layer(l);
    const Shape& in = m.activation(l);
    const int t = m.first_tensor(l);
    const auto at = static_cast<std::size_t>(l);
    std::vector<double> dx, dw, db;
    if (s.op == LayerOp::kConvReluPool) {
      auto st =
          ref::conv_relu_pool(act[at], tensor(t), tensor(t + 1), dy, n, static_cast<int>(in[0]),
                              static_cast<int>(in[1]), static_cast<int>(in[2]),
                              static_cast<int>(s.out), s.kernel, s.kernel);
      dx = std::move(st.dx);
      dw = std::move(st.dw);
      db = std::move(st.db);
    } else {
      const std::vector<double> dz = s.relu ? ref::relu_backward(pre[at], dy) : dy;
      ref::linear_backward(act[at], tensor(t), dz, n, static_cast<int>(shape_numel(in)),
                           static_cast<int>(s.out), dx, dw, db);
    }
    std::copy(dw.begin(), dw.end(),
              r.grads.begin() + m.tensors()[static_cast<std::size_t>(t)].offset);
    std::copy(db.begin(), db.end(),
              r.grads.begin() + m.tensors()[static_cast<std::size_t>(t + 1)].offset);
    dy = std::move(dx);
  }
  return r;
}

TEST(Models, TinyModelOnOneDeviceMatchesTheReference) {
  const auto m = tiny();
  auto devices = make_devices("cpu", 1, {});
  Device& dev = *devices[0];
  const int n = 6;
  Rng rng(5);
  std::vector<float> images(static_cast<std::size_t>(n * 784));
  for (float& v : images) v = static_cast<float>(rng.uniform());
  std::vector<int32_t> labels(n);
  for (auto& y : labels) y = static_cast<int32_t>(rng.below(10));
  const std::vector<float> params = m->initial_parameters(7, 0.1);
  ModelReplica replica(m, dev);
  replica.params().copy_from_host(params);
  const Tensor x = Tensor::from_host(dev, {n, 1, 28, 28}, images);
  const Tensor y = Tensor::from_host(dev, {n}, labels);
  Tensor stats = Tensor::zeros(dev, {2});
  std::vector<int> order;
  replica.forward(x, y, stats, true);
  replica.backward([&](int i) { order.push_back(i); });
  const RefStep want = reference_step(*m, params, std::vector<double>(images.begin(), images.end()),
                                      std::vector<int>(labels.begin(), labels.end()));
  EXPECT_NEAR(stats.to_host_f32()[0], want.loss, 1e-5 * want.loss);
  const std::vector<float> got = replica.grads().to_host_f32();
  std::vector<float> ref(want.grads.begin(), want.grads.end());
  // float32 against double over sums of at most 6 x 200 terms: 1e-4 of each tensor's largest
  // gradient; a wrong layer or a missing term is off by its whole size.
  EXPECT_TRUE(close_per_tensor(got, ref, 1e-4, 1e-4, m.get()));
  // on_ready: every tensor once, last first.
  EXPECT_EQ(order, (std::vector<int>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
}

TEST(Models, TinyModelTracksSingleDeviceWithEveryStrategy) {
  const auto m = tiny();
  struct Case {
    const char* strategy;
    int devices;
    json options;
  };
  const std::vector<Case> cases = {
      {"data_parallel", 2, {{"allreduce", "ring"}}},
      {"data_parallel", 3, {{"allreduce", "tree"}, {"grouping", "per_tensor"}, {"overlap", true}}},
      {"layer_split", 2, {{"split", {3}}, {"microbatches", 4}}},
      {"layer_split", 3, {{"split", "auto"}, {"microbatches", 2}, {"schedule", "1f1b"}}},
      {"layer_split", 5, {{"microbatches", 3}}},
      {"channel_split", 2, {{"pairing", "none"}}},
      {"channel_split", 3, {{"pairing", "megatron"}}},
      {"channel_split", 4, {{"pairing", "megatron"}, {"allreduce", "naive"}}},
  };
  for (const Case& c : cases)
    EXPECT_TRUE(tracks_single(c.strategy, c.devices, c.options, 4, 24, "cpu", m))
        << c.strategy << " x" << c.devices << " " << c.options.dump();
}

// A pool and a dropout told to run whole ("split": "replicated") after an output-split conv:
// channel_split gathers the conv's output for them. They read this device's channels instead,
// and the run failed ("dropout forward: x (32,2,26,26) and y (32,4,26,26)").
TEST(Models, ReplicatedPoolAndDropoutAfterAnOutputSplitLayerTrackSingleDevice) {
  const auto m = make_model(json{{"layers",
                                  {{{"op", "conv"}, {"out", 4}, {"kernel", 3}, {"relu", true}},
                                   {{"op", "dropout"}, {"p", 0.25}, {"split", "replicated"}},
                                   {{"op", "pool"}, {"kernel", 2}, {"split", "replicated"}},
                                   {{"op", "linear"}, {"out", 10}}}}},
                            "replicated");
  for (const char* pairing : {"none", "megatron"})
    EXPECT_TRUE(tracks_single("channel_split", 2, {{"pairing", pairing}}, 3, 16, "cpu", m))
        << pairing;
}

TEST(Models, ChannelSplitBytesFollowTheTinyModelsSplitModes) {
  const auto m = tiny();
  Session s("channel_split", 2, {{"pairing", "megatron"}}, m->initial_parameters(1), 8, "cpu", m);
  const StepResult r = s.step(0, 0.1f);
  // Gathers: c1's output 6*12*12 before c2, c2's 8*5*5 before f1, f3's 10 logits; allreduces:
  // f2's 16 partial sums forward and f2's output gradient (f3 reads f2's whole output)
  // backward; reduce-scatters: f1's input gradient 200 and c2's 864. f2 reads f1's shards: no
  // gather of f1's output and no reduce-scatter of f2's input gradient.
  const int64_t once = 864 + 200 + 10 + 200 + 864, twice = 16 + 16;
  EXPECT_EQ(r.detail["bytes_expected"].get<int64_t>(), 4 * 8 * (2 - 1) * (once + 2 * twice));
  EXPECT_EQ(r.detail["bytes_sent"], r.detail["bytes_expected"]);
  EXPECT_EQ(s->report()["output_channels"]["f1"], json::array({12, 12}));
}

}  // namespace
}  // namespace paralab

namespace paralab {
namespace {

TEST(Models, AlexNetIsTheBooksNetwork) {
  const auto m = make_model("alexnet");
  // d2l's AlexNet for Fashion-MNIST: 46,764,746 parameters, 6400 features after the last pool.
  EXPECT_EQ(m->parameters(), 46764746);
  EXPECT_EQ(m->activation(9), (Shape{256, 5, 5}));
  EXPECT_EQ(m->forward_macs(), 96LL * 54 * 54 * 121 + 256LL * 26 * 26 * 96 * 25 +
                                   384LL * 12 * 12 * 256 * 9 + 384LL * 12 * 12 * 384 * 9 +
                                   256LL * 12 * 12 * 384 * 9 + 6400LL * 4096 + 4096LL * 4096 +
                                   4096LL * 10);
  EXPECT_TRUE(m->has_dropout());
}

// The book initialises AlexNet with xavier_uniform_ (d2l's train_ch6), not LeNet's N(0, 0.01^2):
// each weight tensor within +-sqrt(6 / (fan_in + fan_out)), spread uniformly, biases 0.
TEST(Models, AlexNetStartsFromXavierUniform) {
  const auto m = make_model(json{{"name", "alexnet"}, {"input_size", 67}, {"width", 0.0625}});
  EXPECT_EQ(m->init().kind, InitRule::Kind::XavierUniform);
  const std::vector<float> w = m->initial_parameters(3);
  for (const ParamInfo& p : m->tensors()) {
    const Shape& s = p.shape;
    double bound = 0;
    if (p.weight)
      bound = s.size() == 4 ? std::sqrt(6.0 / double(s[1] * s[2] * s[3] + s[0] * s[2] * s[3]))
                            : std::sqrt(6.0 / double(s[0] + s[1]));
    double sum_sq = 0, largest = 0;
    for (int64_t j = 0; j < shape_numel(s); ++j) {
      const double v = w[static_cast<std::size_t>(p.offset + j)];
      sum_sq += v * v;
      largest = std::max(largest, std::abs(v));
    }
    if (!p.weight) {
      EXPECT_EQ(largest, 0.0) << p.name;
      continue;
    }
    EXPECT_LE(largest, bound) << p.name;
    EXPECT_GT(largest, 0.9 * bound) << p.name;
    // U(-a, a) has standard deviation a / sqrt(3).
    EXPECT_NEAR(std::sqrt(sum_sq / double(shape_numel(s))), bound / std::sqrt(3.0), 0.15 * bound)
        << p.name;
  }
  EXPECT_EQ(m->describe()["init"], (json{{"rule", "xavier_uniform"}}));
  // The same seed, the same values; LeNet keeps the book's normal rule.
  EXPECT_EQ(w, m->initial_parameters(3));
  EXPECT_EQ(make_model("lenet")->describe()["init"], (json{{"rule", "normal"}, {"scale", 0.01}}));
  const auto normal = make_model(json{{"name", "alexnet"},
                                      {"input_size", 67},
                                      {"width", 0.0625},
                                      {"init", "normal"},
                                      {"init_scale", 0.05}});
  EXPECT_EQ(normal->initial_parameters(3), normal->initial_parameters(3, 0.05));
}

// AlexNet at a reduced size (input 67, 1/16 of the channels: 6,16,24,24,16, hidden 256) so that
// a 2-core CPU runs every strategy: dropout masks from global indices make every strategy's
// step the single device's.
TEST(Models, ReducedAlexNetTracksSingleDeviceWithEveryStrategy) {
  const auto m = make_model(json{{"name", "alexnet"}, {"input_size", 67}, {"width", 0.0625}});
  struct Case {
    const char* strategy;
    int devices;
    json options;
  };
  const std::vector<Case> cases = {
      {"data_parallel", 2, {{"allreduce", "ring"}}},
      {"layer_split", 2, {{"split", {6}}, {"microbatches", 2}}},
      {"layer_split", 3, {{"microbatches", 4}, {"schedule", "1f1b"}}},
      {"channel_split", 2, {{"pairing", "none"}}},
      {"channel_split", 3, {{"pairing", "megatron"}}},
  };
  for (const Case& c : cases)
    EXPECT_TRUE(tracks_single(c.strategy, c.devices, c.options, 3, 24, "cpu", m))
        << c.strategy << " x" << c.devices << " " << c.options.dump();
}

// The same on CUDA devices (virtual devices of one GPU where there is one GPU): cuDNN's
// convolutions, the own pooling, dropout and resize kernels, under every strategy.
TEST(Models, CudaReducedAlexNetTracksSingleDeviceWithEveryStrategy) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  const auto m = make_model(json{{"name", "alexnet"}, {"input_size", 67}, {"width", 0.0625}});
  const std::vector<std::pair<const char*, json>> cases = {
      {"data_parallel", {{"allreduce", "ring"}}},
      {"layer_split", {{"microbatches", 2}}},
      {"channel_split", {{"pairing", "none"}}},
      {"channel_split", {{"pairing", "megatron"}}},
  };
  for (int k : {2, 4})
    for (const auto& [strategy, options] : cases)
      EXPECT_TRUE(tracks_single(strategy, k, options, 3, 24, "cuda", m))
          << strategy << " x" << k << " " << options.dump();
}

}  // namespace
}  // namespace paralab
