#include "strategies/channel_split.h"

#include <array>
#include <chrono>

#include "core/error.h"
#include "core/lenet.h"
#include "core/ops.h"
#include "strategies/collectives/collectives.h"
#include "strategies/device_data.h"
#include "strategies/spmd_group.h"
#include "strategies/timing.h"

namespace paralab {

namespace {

using nlohmann::json;

// Output channels (units) of conv1, conv2, fc1, fc2 and the elements per channel of each output.
constexpr std::array<int64_t, kLeNetLayers> kChannels = {20, 50, 128, 10};
constexpr std::array<int64_t, kLeNetLayers> kPerChannel = {13 * 13, 4 * 4, 1, 1};

struct Options {
  std::string pairing = "none";
  std::string allreduce = "ring";
};

// The part of a parameter tensor, viewed as a (rows, cols) matrix, that one device holds.
struct Block {
  int64_t r0, r1, c0, c1;
};

// The collectives of one training iteration, in floats per example: what the analytic byte
// count is made of (every collective below moves these, and nothing else moves).
struct CommPlan {
  std::vector<std::pair<std::string, int64_t>> allgather, reduce_scatter, allreduce;

  // Bytes all devices send per iteration of n examples: a ring all-gather or reduce-scatter of
  // B bytes makes each segment travel k-1 hops, (k-1)B in all; every allreduce here (naive,
  // ring, tree) moves 2(k-1)B.
  int64_t bytes(int64_t n, int k) const {
    int64_t once = 0, twice = 0;
    for (const auto& c : allgather) once += c.second;
    for (const auto& c : reduce_scatter) once += c.second;
    for (const auto& c : allreduce) twice += c.second;
    return static_cast<int64_t>(sizeof(float)) * n * (k - 1) * (once + 2 * twice);
  }
};

CommPlan comm_plan(const std::string& pairing) {
  CommPlan p;
  if (pairing == "megatron") {
    p.allgather = {{"conv1 output", 20 * 169}, {"fc2 output", 10}};
    p.allreduce = {{"fc1 output (partial sums)", 128}, {"fc1 output gradient", 128}};
    p.reduce_scatter = {{"conv2 input gradient", 20 * 169}};
  } else {
    p.allgather = {
        {"conv1 output", 20 * 169}, {"conv2 output", 800}, {"fc1 output", 128}, {"fc2 output", 10}};
    p.reduce_scatter = {
        {"fc2 input gradient", 128}, {"fc1 input gradient", 800}, {"conv2 input gradient", 3380}};
  }
  return p;
}

Shape shard_shape(const Shape& full, const Block& b) {
  if (full.size() == 4) return {b.r1 - b.r0, full[1], full[2], full[3]};
  if (full.size() == 2) return {b.r1 - b.r0, b.c1 - b.c0};
  return {b.r1 - b.r0};
}

class ChannelSplit final : public Strategy {
 public:
  explicit ChannelSplit(Options o)
      : o_(std::move(o)),
        plan_(comm_plan(o_.pairing)),
        allreduce_(make_allreduce(o_.allreduce, {})) {}

  bool supports_mpi() const override { return true; }

  void setup(const StrategySetup& s) override {
    group_ = make_group(s.devices, s.mpi);
    const int k = group_->size();
    for (int l = 0; l < kLeNetLayers; ++l)
      if (kChannels[l] < k)
        throw Error("channel_split: " + std::to_string(k) + " devices, but " + lenet_layer_name(l) +
                    " has only " + std::to_string(kChannels[l]) +
                    " output channels to split (at most " + std::to_string(kChannels[l]) +
                    " devices)");
    for (int l = 0; l < kLeNetLayers; ++l) bounds_[l] = equal_segments(kChannels[l], k);
    if (o_.pairing == "megatron") allreduce_->prepare(s.devices);
    ranks_ = std::vector<Rank>(static_cast<std::size_t>(k));
    eval_batch_ = s.eval_batch;
    test_count_ = s.test->count;
    run([&](int r) {
      Rank& me = ranks_[r];
      Device& dev = group_->device(r);
      me.rank = r;
      me.dev = &dev;
      me.t = &group_->transport(r);
      me.blocks = blocks(r);
      const std::vector<float> mine = extract(s.initial_parameters, me.blocks);
      me.params = Tensor::from_host(dev, {static_cast<int64_t>(mine.size())}, mine);
      me.grads = Tensor::zeros(dev, me.params.shape());
      int64_t offset = 0;
      for (int i = 0; i < kLeNetTensors; ++i) {
        const Shape shape = shard_shape(lenet_layout()[i].shape, me.blocks[i]);
        me.w[i] = me.params.view(offset, shape);
        me.g[i] = me.grads.view(offset, shape);
        offset += shape_numel(shape);
      }
      me.zero_bias = Tensor::zeros(dev, {128});
      Ops& ops = dev.ops();
      me.conv1 = ops.make_conv_relu_pool();
      me.conv2 = ops.make_conv_relu_pool();
      me.fc1 = ops.make_linear();
      me.fc2 = ops.make_linear();
      me.relu = ops.make_relu();
      me.xent = ops.make_softmax_xent();
      me.data = DeviceData(dev, *s.train, *s.test);
      me.stats = Tensor::zeros(dev, {2});
    });
  }

  void check_batch(int64_t count) const override {
    if (count < 1) throw Error("channel_split: an empty global batch");
  }

  void begin_epoch(std::span<const int32_t> order) override {
    run([&](int r) {
      ranks_[r].order =
          Tensor::from_host(*ranks_[r].dev, {static_cast<int64_t>(order.size())}, order);
    });
  }

  StepResult train_step(int64_t offset, int64_t count, float lr) override {
    check_batch(count);
    const auto t0 = Clock::now();
    run([&](int r) { rank_step(ranks_[r], offset, count, lr); });
    StepResult out;
    out.times.total_ms = ms_between(t0, Clock::now());
    out.samples = count;
    // Every rank's figures, wherever it ran (between processes, an allgather).
    struct Figures {
      double loss, forward_ms, backward_ms;
      int64_t correct;
      RankTimes times;
    };
    std::vector<Figures> all(ranks_.size());
    for (int r : group_->local_ranks()) {
      const Rank& me = ranks_[r];
      all[r] = {me.loss, me.forward_ms, me.backward_ms, me.correct, me.times};
    }
    group_->share(all);
    int64_t bytes = 0;
    for (const Figures& f : all) {
      out.ranks.push_back(f.times);
      bytes += f.times.bytes_sent;
    }
    const Figures& r0 = all[0];
    out.loss_sum = r0.loss;
    out.correct = r0.correct;
    out.times.forward_ms = r0.forward_ms;
    out.times.backward_ms = r0.backward_ms;
    out.times.communication_ms = r0.times.communication_ms;
    out.times.optimizer_ms = r0.times.optimizer_ms;
    out.detail = {{"bytes_sent", bytes},
                  {"bytes_expected", plan_.bytes(count, static_cast<int>(ranks_.size()))}};
    return out;
  }

  EvalResult evaluate() override {
    run([&](int r) {
      Rank& me = ranks_[r];
      me.loss = 0;
      me.correct = 0;
      for (int64_t a = 0; a < test_count_; a += eval_batch_) {
        const int64_t n = std::min(eval_batch_, test_count_ - a);
        ensure_batch(me, n);
        me.dev->ops().gather(me.data.test_x, me.data.test_y, me.data.test_order, a, n, me.x, me.y);
        forward(me, n, /*training=*/false);
        me.comm_marks.clear();  // evaluation is not timed
        const auto st = me.stats.to_host_f32();
        me.loss += st[0];
        me.correct += static_cast<int64_t>(st[1]);
      }
    });
    // Every rank gathered the whole logits: each holds the loss and the count.
    const Rank& mine = ranks_[static_cast<std::size_t>(group_->local_ranks().front())];
    return {mine.loss, mine.correct, test_count_};
  }

  std::vector<float> parameters() override { return assemble(&Rank::params); }
  std::vector<float> gradients() override { return assemble(&Rank::grads); }

  json options() const override { return {{"pairing", o_.pairing}, {"allreduce", o_.allreduce}}; }

  json report() const override {
    if (ranks_.empty()) return nullptr;
    const int k = static_cast<int>(ranks_.size());
    json channels = json::object();
    for (int l = 0; l < kLeNetLayers; ++l) {
      json counts = json::array();
      for (int r = 0; r < k; ++r) counts.push_back(bounds_[l][r + 1] - bounds_[l][r]);
      channels[lenet_layer_name(l)] = counts;
    }
    auto list = [](const std::vector<std::pair<std::string, int64_t>>& v) {
      json a = json::array();
      for (const auto& [what, floats] : v)
        a.push_back({{"what", what}, {"floats_per_example", floats}});
      return a;
    };
    json params = json::array();
    for (int r = 0; r < k; ++r) {
      int64_t n = 0;
      for (const Block& b : blocks(r)) n += (b.r1 - b.r0) * (b.c1 - b.c0);
      params.push_back(n);
    }
    return {{"pairing", o_.pairing},
            {"output_channels", channels},
            {"parameters_per_device", params},
            {"allgather", list(plan_.allgather)},
            {"reduce_scatter", list(plan_.reduce_scatter)},
            {"allreduce", list(plan_.allreduce)},
            {"bytes_per_example", plan_.bytes(1, k)}};
  }

 private:
  struct Rank {
    int rank = 0;
    Device* dev = nullptr;
    Transport* t = nullptr;
    std::array<Block, kLeNetTensors> blocks{};
    Tensor params, grads, zero_bias;
    std::array<Tensor, kLeNetTensors> w, g;  // this device's part of each tensor, and gradient
    std::unique_ptr<ConvReluPool> conv1, conv2;
    std::unique_ptr<Linear> fc1, fc2;
    std::unique_ptr<Relu> relu;
    std::unique_ptr<SoftmaxXent> xent;
    DeviceData data;
    Tensor order, stats;
    // Batch buffers. Packed buffers hold a layer's output (or input gradient) device-major, so
    // that each device's channels are one contiguous segment for the collectives; *_own are
    // views of this device's segment; the others are whole NCHW activations.
    int64_t n = -1;
    Tensor x, y;
    Tensor packed1, own1, act1, packed2, own2, act2, packed3, own3, act3;
    Tensor packed4, own4, logits, dlogits, dlogits_own, dact3;
    Tensor dpacked3, down3, dact2, dpacked2, down2, dact1, dpacked1, down1;
    double loss = 0, forward_ms = 0, backward_ms = 0;
    std::vector<std::pair<TimeMark, TimeMark>> comm_marks;  // this step's communication
    int64_t correct = 0;
    RankTimes times;
  };

  void run(const std::function<void(int)>& fn) {
    group_->run([&](int r, Transport&) { fn(r); });
  }

  int64_t first_channel(int layer, int r) const { return bounds_[layer][r]; }
  int64_t channels(int layer, int r) const { return bounds_[layer][r + 1] - bounds_[layer][r]; }

  std::array<Block, kLeNetTensors> blocks(int r) const {
    auto seg = [&](int l) { return std::pair{bounds_[l][r], bounds_[l][r + 1]}; };
    const auto [a1, e1] = seg(0);
    const auto [a2, e2] = seg(1);
    const auto [a3, e3] = seg(2);
    const auto [a4, e4] = seg(3);
    std::array<Block, kLeNetTensors> b{};
    b[0] = {a1, e1, 0, 9};
    b[1] = {a1, e1, 0, 1};
    b[2] = {a2, e2, 0, 500};
    b[3] = {a2, e2, 0, 1};
    if (o_.pairing == "megatron") {
      b[4] = {16 * a2, 16 * e2, 0, 128};  // the rows of W3 that read this device's channels
      b[5] = {0, 128, 0, 1};              // b3 on every device (added by device 0 only)
    } else {
      b[4] = {0, 800, a3, e3};
      b[5] = {a3, e3, 0, 1};
    }
    b[6] = {0, 128, a4, e4};
    b[7] = {a4, e4, 0, 1};
    return b;
  }

  static std::vector<float> extract(const std::vector<float>& full,
                                    const std::array<Block, kLeNetTensors>& blocks) {
    std::vector<float> out;
    for (int i = 0; i < kLeNetTensors; ++i) {
      const ParamInfo& p = lenet_layout()[i];
      const int64_t cols = shape_numel(p.shape) / p.shape[0];
      const Block& b = blocks[i];
      for (int64_t row = b.r0; row < b.r1; ++row) {
        const auto* src = full.data() + p.offset + row * cols;
        out.insert(out.end(), src + b.c0, src + b.c1);
      }
    }
    return out;
  }

  // The whole model from every rank's blocks: in this process only (tests; bench_runner does not
  // ask for it).
  std::vector<float> assemble(Tensor Rank::*field) {
    PARALAB_REQUIRE(group_->local_ranks().size() == ranks_.size(),
                    "channel_split: the model's blocks live in several processes");
    std::vector<float> full(static_cast<std::size_t>(kLeNetParameters));
    for (Rank& me : ranks_) {
      const std::vector<float> part = (me.*field).to_host_f32();
      std::size_t at = 0;
      for (int i = 0; i < kLeNetTensors; ++i) {
        const ParamInfo& p = lenet_layout()[i];
        const int64_t cols = shape_numel(p.shape) / p.shape[0];
        const Block& b = me.blocks[i];
        for (int64_t row = b.r0; row < b.r1; ++row) {
          std::copy(part.begin() + static_cast<std::ptrdiff_t>(at),
                    part.begin() + static_cast<std::ptrdiff_t>(at + (b.c1 - b.c0)),
                    full.begin() + p.offset + row * cols + b.c0);
          at += static_cast<std::size_t>(b.c1 - b.c0);
        }
      }
    }
    return full;
  }

  // Element boundaries of a packed buffer of layer l's output for n examples.
  std::vector<int64_t> packed_bounds(int l, int64_t n) const {
    std::vector<int64_t> b;
    for (int64_t c : bounds_[l]) b.push_back(c * n * kPerChannel[l]);
    return b;
  }

  // NCHW <-> device-major, one 2-D copy per device's channel block.
  void repack(Device& dev, int l, int64_t n, const Tensor& from, Tensor& to, bool to_packed) {
    const int k = static_cast<int>(ranks_.size());
    const std::size_t f = sizeof(float), s = static_cast<std::size_t>(kPerChannel[l]);
    const std::size_t full_pitch = static_cast<std::size_t>(kChannels[l]) * s * f;
    for (int j = 0; j < k; ++j) {
      const std::size_t c = static_cast<std::size_t>(first_channel(l, j));
      const std::size_t width = static_cast<std::size_t>(channels(l, j)) * s * f;
      char* packed = static_cast<char*>((to_packed ? to : from).raw()) +
                     c * static_cast<std::size_t>(n) * s * f;
      char* nchw = static_cast<char*>((to_packed ? from : to).raw()) + c * s * f;
      if (to_packed)
        dev.copy_2d(packed, width, nchw, full_pitch, width, static_cast<std::size_t>(n));
      else
        dev.copy_2d(nchw, full_pitch, packed, width, width, static_cast<std::size_t>(n));
    }
  }

  void ensure_batch(Rank& me, int64_t n) {
    if (me.n == n) return;
    Device& dev = *me.dev;
    const int r = me.rank;
    auto own = [&](const Tensor& packed, int l, Shape tail) {
      Shape shape = {n, channels(l, r)};
      shape.insert(shape.end(), tail.begin(), tail.end());
      return packed.view(first_channel(l, r) * n * kPerChannel[l], shape);
    };
    me.x = Tensor::empty(dev, lenet_activation_shape(0, n));
    me.y = Tensor::empty(dev, {n}, DType::I32);
    me.packed1 = Tensor::empty(dev, {n * 20 * 169});
    me.own1 = own(me.packed1, 0, {13, 13});
    me.act1 = Tensor::empty(dev, lenet_activation_shape(1, n));
    me.packed2 = Tensor::empty(dev, {n * 800});
    me.own2 = own(me.packed2, 1, {4, 4});
    me.act2 = Tensor::empty(dev, lenet_activation_shape(2, n));
    me.packed3 = Tensor::empty(dev, {n * 128});
    me.own3 = own(me.packed3, 2, {});
    me.act3 = Tensor::empty(dev, {n, 128});
    me.packed4 = Tensor::empty(dev, {n * 10});
    me.own4 = own(me.packed4, 3, {});
    me.logits = Tensor::empty(dev, {n, kClasses});
    me.dlogits = Tensor::empty(dev, {n, kClasses});
    me.dlogits_own = Tensor::empty(dev, {n, channels(3, r)});
    me.dact3 = Tensor::empty(dev, {n, 128});
    me.dpacked3 = Tensor::empty(dev, {n * 128});
    me.down3 = own(me.dpacked3, 2, {});
    me.dact2 = Tensor::empty(dev, lenet_activation_shape(2, n));
    me.dpacked2 = Tensor::empty(dev, {n * 800});
    me.down2 = o_.pairing == "megatron" ? Tensor::empty(dev, {n, channels(1, r), 4, 4})
                                        : own(me.dpacked2, 1, {4, 4});
    me.dact1 = Tensor::empty(dev, lenet_activation_shape(1, n));
    me.dpacked1 = Tensor::empty(dev, {n * 20 * 169});
    me.down1 = own(me.dpacked1, 0, {13, 13});
    me.n = n;
  }

  // Runs a communication step between two marks in the device's queue, so that it is timed
  // apart from compute without stopping the device (the marks are read at the step's end).
  template <typename Fn>
  void comm(Rank& me, Fn&& fn) {
    const TimeMark a = me.dev->mark();
    fn();
    me.comm_marks.emplace_back(a, me.dev->mark());
  }

  // Time in the communication steps [from, to) of comm_marks (after a synchronisation).
  double comm_ms(Rank& me, std::size_t from, std::size_t to) {
    double ms = 0;
    for (std::size_t i = from; i < to; ++i)
      ms += me.dev->elapsed_ms(me.comm_marks[i].first, me.comm_marks[i].second);
    return ms;
  }

  // All-gathers layer l's output: every device's channels into `packed`, then into NCHW.
  void gather_output(Rank& me, int l, int64_t n, Tensor& packed, Tensor& full) {
    comm(me, [&] {
      allgather_ring(*me.t, packed, packed_bounds(l, n));
      repack(*me.dev, l, n, packed, full, /*to_packed=*/false);
    });
  }

  // Sums the devices' partial gradients of layer l's output; each keeps its own channels' sum.
  void reduce_scatter_grad(Rank& me, int l, int64_t n, const Tensor& partial, Tensor& packed) {
    comm(me, [&] {
      repack(*me.dev, l, n, partial, packed, /*to_packed=*/true);
      reduce_scatter_ring(*me.t, packed, packed_bounds(l, n));
    });
  }

  void forward(Rank& me, int64_t n, bool training) {
    const bool megatron = o_.pairing == "megatron";
    me.conv1->forward(me.x, me.w[0], me.w[1], me.own1, training);
    gather_output(me, 0, n, me.packed1, me.act1);
    me.conv2->forward(me.act1, me.w[2], me.w[3], me.own2, training);
    if (megatron) {
      const Tensor& bias = me.rank == 0 ? me.w[5] : me.zero_bias;
      me.fc1->forward(me.own2.reshaped({n, 16 * channels(1, me.rank)}), me.w[4], bias, me.act3);
      comm(me, [&] { allreduce_->run(*me.t, me.act3); });
      me.relu->forward(me.act3, me.act3);
    } else {
      gather_output(me, 1, n, me.packed2, me.act2);
      me.fc1->forward(me.act2.reshaped({n, 800}), me.w[4], me.w[5], me.own3);
      me.relu->forward(me.own3, me.own3);
      gather_output(me, 2, n, me.packed3, me.act3);
    }
    me.fc2->forward(me.act3, me.w[6], me.w[7], me.own4);
    gather_output(me, 3, n, me.packed4, me.logits);
    me.xent->forward_backward(me.logits, me.y, training ? &me.dlogits : nullptr, me.stats);
  }

  void backward(Rank& me, int64_t n) {
    const bool megatron = o_.pairing == "megatron";
    const std::size_t f = sizeof(float);
    const std::size_t mine = static_cast<std::size_t>(channels(3, me.rank)) * f;
    me.dev->copy_2d(me.dlogits_own.raw(), mine,
                    static_cast<char*>(me.dlogits.raw()) +
                        static_cast<std::size_t>(first_channel(3, me.rank)) * f,
                    kClasses * f, mine, static_cast<std::size_t>(n));
    me.fc2->backward(me.act3, me.w[6], me.dlogits_own, &me.dact3, me.g[6], me.g[7]);
    if (megatron) {
      comm(me, [&] { allreduce_->run(*me.t, me.dact3); });
      me.relu->backward(me.act3, me.dact3, me.dact3);
      Tensor down2 = me.down2.reshaped({n, 16 * channels(1, me.rank)});
      me.fc1->backward(me.own2.reshaped({n, 16 * channels(1, me.rank)}), me.w[4], me.dact3, &down2,
                       me.g[4], me.g[5]);
    } else {
      reduce_scatter_grad(me, 2, n, me.dact3, me.dpacked3);
      me.relu->backward(me.own3, me.down3, me.down3);
      Tensor dflat = me.dact2.reshaped({n, 800});
      me.fc1->backward(me.act2.reshaped({n, 800}), me.w[4], me.down3, &dflat, me.g[4], me.g[5]);
      reduce_scatter_grad(me, 1, n, me.dact2, me.dpacked2);
    }
    me.conv2->backward(me.act1, me.w[2], me.down2, &me.dact1, me.g[2], me.g[3]);
    reduce_scatter_grad(me, 0, n, me.dact1, me.dpacked1);
    me.conv1->backward(me.x, me.w[0], me.down1, nullptr, me.g[0], me.g[1]);
  }

  void rank_step(Rank& me, int64_t offset, int64_t count, float lr) {
    Transport& t = *me.t;
    Device& dev = *me.dev;
    t.barrier();
    t.reset_bytes_sent();
    me.comm_marks.clear();
    const auto t0 = Clock::now();
    ensure_batch(me, count);
    const TimeMark m0 = dev.mark();
    dev.ops().gather(me.data.train_x, me.data.train_y, me.order, offset, count, me.x, me.y);
    forward(me, count, /*training=*/true);
    const TimeMark m1 = dev.mark();
    const std::size_t forward_steps = me.comm_marks.size();
    backward(me, count);
    const TimeMark m2 = dev.mark();
    dev.ops().sgd(me.params, me.grads, lr / static_cast<float>(count));
    const TimeMark m3 = dev.mark();
    dev.synchronize();
    const auto st = me.stats.to_host_f32();
    me.loss = st[0];
    me.correct = static_cast<int64_t>(st[1]);
    const double forward_comm = comm_ms(me, 0, forward_steps);
    const double all_comm = comm_ms(me, 0, me.comm_marks.size());
    me.forward_ms = dev.elapsed_ms(m0, m1) - forward_comm;
    me.backward_ms = dev.elapsed_ms(m1, m2) - (all_comm - forward_comm);
    me.times.compute_ms = dev.elapsed_ms(m0, m2) - all_comm;
    me.times.communication_ms = all_comm;
    me.times.exposed_communication_ms = all_comm;
    me.times.optimizer_ms = dev.elapsed_ms(m2, m3);
    me.times.bytes_sent = t.bytes_sent();
    me.times.samples = count;
    t.barrier();
    me.times.total_ms = ms_between(t0, Clock::now());
  }

  Options o_;
  CommPlan plan_;
  std::unique_ptr<Allreduce> allreduce_;
  std::array<std::vector<int64_t>, kLeNetLayers> bounds_;
  std::unique_ptr<SpmdGroup> group_;
  std::vector<Rank> ranks_;
  int64_t eval_batch_ = 1000, test_count_ = 0;
};

Options parse_options(const json& options, const std::string& path) {
  Options o;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw Error(path + "." + key + ": " + what);
  };
  for (const auto& [key, v] : options.items()) {
    if (key == "pairing" || key == "allreduce") {
      if (!v.is_string()) fail(key, "must be a string");
      (key == "pairing" ? o.pairing : o.allreduce) = v.get<std::string>();
    } else {
      fail(key, "unknown option for strategy 'channel_split' (known: pairing, allreduce)");
    }
  }
  if (o.pairing != "none" && o.pairing != "megatron")
    fail("pairing", "unknown pairing '" + o.pairing + "' (known: megatron, none)");
  try {
    make_allreduce(o.allreduce, {});
  } catch (const Error& e) {
    fail("allreduce", e.what());
  }
  return o;
}

}  // namespace

std::unique_ptr<Strategy> make_channel_split(const json& options, const std::string& path) {
  return std::make_unique<ChannelSplit>(parse_options(options, path));
}

}  // namespace paralab
