#include "strategies/channel_split.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/model.h"
#include "core/ops.h"
#include "strategies/collectives/collectives.h"
#include "strategies/deferred_steps.h"
#include "strategies/device_data.h"
#include "strategies/spmd_group.h"
#include "strategies/step_graphs.h"
#include "strategies/timing.h"

namespace paralab {

namespace {

using nlohmann::json;

struct Options {
  std::string pairing = "none";
  std::string allreduce = "ring";
  bool cuda_graphs = true;
  std::string read_back = "step";  // "epoch": graph launches queued, read once per epoch
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

// What a layer's input gradient is on each device, as its backward leaves it: a partial sum
// of the whole gradient (an output-split layer: only its channels' contribution), the same
// whole gradient everywhere, or the exact gradient of this device's channel shard.
enum class Grad { kPartial, kReplicated, kSharded };

Shape shard_shape(const Shape& full, const Block& b) {
  if (full.size() == 4) return {b.r1 - b.r0, full[1], full[2], full[3]};
  if (full.size() == 2) return {b.r1 - b.r0, b.c1 - b.c0};
  return {b.r1 - b.r0};
}

// The marks between a rank's phases in one step, and around each of its communication steps.
struct StepMarks {
  TimeMark start, forward_end, backward_end, end;
  std::vector<std::pair<TimeMark, TimeMark>> comm;
  std::size_t forward_steps = 0;  // comm's first entries, the forward pass's
};

class ChannelSplit final : public Strategy {
 public:
  explicit ChannelSplit(Options o) : o_(std::move(o)) {}

  std::string mpi_unsupported() const override {
    return o_.read_back == "epoch"
               ? "with read_back \"epoch\" needs every rank in one process (each process would "
                 "read its own ranks' steps); under mpirun use \"step\""
               : "";
  }

  void setup(const StrategySetup& s) override {
    group_ = make_group(s.devices, s.mpi);
    if (o_.read_back == "epoch" && static_cast<int>(group_->local_ranks().size()) != group_->size())
      throw Error("channel_split " + mpi_unsupported());
    model_ = s.model ? s.model : default_model();
    seed_ = s.seed;
    plan(*model_, group_->size());
    // Pieces as data_parallel cuts them (auto_chunk_bytes): whole messages between virtual
    // devices of one GPU, where cutting pipelines nothing and multiplies the messages.
    chunk_bytes_ = auto_chunk_bytes(s.devices);
    allreduce_ = make_allreduce(o_.allreduce, {chunk_bytes_});
    if (o_.pairing == "megatron" && !plan_.allreduce.empty()) allreduce_->prepare(s.devices);
    const int k = group_->size();
    ranks_ = std::vector<Rank>(static_cast<std::size_t>(k));
    eval_batch_ = s.eval_batch;
    test_count_ = s.test->count;
    const Model& model = *model_;
    const auto T = model.tensors().size();
    graphs_ = plan_graphs(s.devices);
    // Where the step can be a graph, evaluations and steps of another batch run in buffers and
    // ops of their own, so that one capture serves the run (StepGraph).
    apart_ = graphs_.empty();
    run([&](int r) {
      Rank& me = ranks_[r];
      Device& dev = group_->device(r);
      me.rank = r;
      me.dev = &dev;
      me.t = &group_->transport(r);
      me.t->set_receive_timing(s.communication_split);
      me.blocks = blocks(r);
      const std::vector<float> mine = extract(s.initial_parameters, me.blocks);
      me.params = Tensor::from_host(dev, {static_cast<int64_t>(mine.size())}, mine);
      me.grads = Tensor::zeros(dev, me.params.shape());
      me.w.resize(T);
      me.g.resize(T);
      int64_t offset = 0;
      for (std::size_t i = 0; i < T; ++i) {
        const Shape shape = shard_shape(model.tensors()[i].shape, me.blocks[i]);
        me.w[i] = me.params.view(offset, shape);
        me.g[i] = me.grads.view(offset, shape);
        offset += shape_numel(shape);
      }
      me.zero_bias.resize(static_cast<std::size_t>(model.layers()));
      for (int l = 0; l < model.layers(); ++l)
        if (model.layer(l).op == LayerOp::kLinear &&
            mode_[static_cast<std::size_t>(l)] == SplitMode::kInput)
          me.zero_bias[static_cast<std::size_t>(l)] = Tensor::zeros(dev, {model.layer(l).out});
      make_ops(dev, me);
      if (apart_)
        for (PassState& p : me.spare) make_ops(dev, p);
      me.data = DeviceData(dev, *s.train, *s.test);
      me.stats = Tensor::zeros(dev, {2});
      me.step = Tensor::zeros(dev, {1});
      me.deferred = DeferredSteps(dev);
    });
  }

  void check_batch(int64_t count) const override {
    if (count < 1) throw Error("channel_split: an empty global batch");
  }

  void check_plan(const Model& model, int devices, std::span<const int64_t> batches) override {
    // The plan of setup() on this strategy, which is not set up and is not used after.
    plan(model, devices);
    for (const int64_t count : batches) check_batch(count);
  }

  void begin_epoch(std::span<const int32_t> order) override {
    ++epoch_;
    run([&](int r) {
      ranks_[r].order =
          Tensor::from_host(*ranks_[r].dev, {static_cast<int64_t>(order.size())}, order);
    });
  }

  StepResult train_step(int64_t offset, int64_t count, float lr) override {
    check_batch(count);
    const auto t0 = Clock::now();
    key_ = {dropout_seed(seed_, epoch_), offset};
    run_step_falling_back(
        *group_, graphs_, capture_, [this](const auto& fn) { run(fn); },
        [&](int r, bool graphed) {
          ranks_[r].queued = false;
          if (graphed)
            graph_step(ranks_[r], offset, count, lr);
          else
            rank_step(ranks_[r], ranks_[r].order, offset, count, lr);
        },
        [](int) {});
    StepResult out;
    out.times.total_ms = ms_between(t0, Clock::now());
    out.samples = count;
    drop_graphs_if_capture_failed(ranks_, graphs_, capture_);
    if (ranks_[mine()].queued) {  // every rank queued its launch: read at collect()
      out.pending = true;
      return out;
    }
    return read_figures(std::move(out), count);
  }

  // The queued steps (read_back "epoch"): each rank waits for its device once and reads its
  // steps; a step's loss and correct count are rank 0's (every rank computes the same from the
  // gathered logits), its time the slowest rank's (from the end of the step before on that
  // rank's queue), the bytes every rank's launch sent. The last of them, where it was the
  // graph's last launch, also gets every device's phases: the graph's marks hold that launch's
  // times.
  std::vector<StepResult> collect() override {
    int64_t bytes = 0;
    for (const Rank& me : ranks_) bytes += me.graph.bytes();
    return collect_queued_steps(
        ranks_, [this](const auto& fn) { run(fn); }, "channel_split",
        [&](StepResult& s) {
          s.detail["bytes_sent"] = bytes;
          s.detail["bytes_expected"] = plan_.bytes(s.samples, static_cast<int>(ranks_.size()));
        },
        [this](int r, const StepResult& last) {
          finish_step(ranks_[r], ranks_[r].graph.marks(), last.samples);
        },
        [this](const StepResult& last) { return read_figures(last, last.samples); });
  }

  EvalResult evaluate() override {
    run([&](int r) {
      Rank& me = ranks_[r];
      // In buffers and ops of its own where the step may be a graph, which outlives it.
      const SwapIn in(me, apart_ ? &me.spare[kEvalPass] : nullptr);
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

  json options() const override {
    return {{"pairing", o_.pairing},
            {"allreduce", o_.allreduce},
            {"cuda_graphs", o_.cuda_graphs},
            {"read_back", o_.read_back}};
  }

  json report() const override {
    if (ranks_.empty()) return nullptr;
    const int k = static_cast<int>(ranks_.size());
    json channels = json::object(), modes = json::object();
    for (int l = 0; l < model_->layers(); ++l) {
      const auto at = static_cast<std::size_t>(l);
      modes[model_->layer(l).name] = mode_[at] == SplitMode::kOutput        ? "output"
                                     : mode_[at] == SplitMode::kInput       ? "input"
                                     : mode_[at] == SplitMode::kChannelwise ? "channelwise"
                                                                            : "replicated";
      if (mode_[at] != SplitMode::kOutput || !sharded_[at + 1]) continue;
      json counts = json::array();
      for (int r = 0; r < k; ++r) counts.push_back(channels_of(l + 1, r));
      channels[model_->layer(l).name] = counts;
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
    json out = {{"pairing", o_.pairing},
                {"layer_split_modes", modes},
                {"output_channels", channels},
                {"parameters_per_device", params},
                {"allgather", list(plan_.allgather)},
                {"reduce_scatter", list(plan_.reduce_scatter)},
                {"allreduce", list(plan_.allreduce)},
                {"bytes_per_example", plan_.bytes(1, k)},
                {"chunk_bytes", chunk_bytes_}};
    if (group_->moves_steps_whole()) out["step_moves"] = group_->step_moves();
    if (o_.cuda_graphs)
      report_graphs(out, graphs_, capture_.get(), k, ranks_[mine()].graph.captures(),
                    ranks_[mine()].graph.replays(), ranks_[mine()].graph.described());
    return out;
  }

 private:
  // The figures of the step every rank has read (finish_step): loss and correct count and the
  // phases from rank 0, each rank's times and the bytes moved. Between processes, gathered.
  StepResult read_figures(StepResult out, int64_t count) {
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
    if (graphs_.empty()) out.detail["cuda_graph_replay"] = ranks_[mine()].graph.replayed() ? 1 : 0;
    return out;
  }

  // What a pass works in: per layer, the op objects it needs (null elsewhere; an op keeps what
  // its backward needs), and the batch buffers per activation boundary b. A sharded activation
  // lives in packed[b] device-major, so that each device's channels are one contiguous segment
  // for the collectives; own[b] views this device's segment; full[b] is the whole NCHW
  // activation (gathered, or computed whole). Gradients: dfull[b] whole (partial or
  // replicated), dpacked and its own view for a reduce-scatter, dshard[b] this device's channels
  // alone. A rank's own are its training steps'.
  struct PassState {
    std::vector<std::unique_ptr<ConvReluPool>> conv_relu_pool;
    std::vector<std::unique_ptr<Conv2d>> conv;
    std::vector<std::unique_ptr<Pool2d>> pool;
    std::vector<std::unique_ptr<Linear>> linear;
    std::vector<std::unique_ptr<Relu>> relu;
    std::vector<std::unique_ptr<Dropout>> dropout;
    std::vector<std::unique_ptr<Resize>> resize;
    std::unique_ptr<SoftmaxXent> xent;
    int64_t n = -1;
    Tensor x, y;
    std::vector<Tensor> packed, own, full, dfull, dpacked, down, dshard;
  };
  // Where the step can be a graph (apart_), evaluations (kEvalPass) and steps of
  // another batch (kOtherPass) swap a state of their own in for their pass: what the graph
  // holds stays where it is (moving ops and tensors moves no memory).
  static constexpr std::size_t kEvalPass = 0, kOtherPass = 1;
  struct Rank : PassState {
    int rank = 0;
    Device* dev = nullptr;
    Transport* t = nullptr;
    std::vector<Block> blocks;
    Tensor params, grads;
    std::vector<Tensor> w, g;  // this device's part of each tensor, and its gradient
    // An input-split layer's zero bias (its bias is added by device 0 only).
    std::vector<Tensor> zero_bias;
    std::array<PassState, 2> spare;  // kEvalPass, kOtherPass (their ops made where used)
    DeviceData data;
    Tensor order, stats;
    double loss = 0, forward_ms = 0, backward_ms = 0;
    std::vector<std::pair<TimeMark, TimeMark>> comm_marks;  // this step's communication
    int64_t correct = 0;
    RankTimes times;
    // CUDA graphs (one over the group): this rank's part (StepGraph; keyed by the batch), and
    // the step's example indices and SGD step, set before each launch.
    StepGraph<StepMarks> graph;
    Tensor step_indices, step;
    // read_back "epoch": the launched steps' figures, read at collect(); queued: this step's.
    DeferredSteps deferred;
    bool queued = false;
  };

  // Swaps `state` in as the rank's pass state while it lives, and back after, even on an error
  // (null: nothing).
  class SwapIn {
   public:
    SwapIn(Rank& me, PassState* state) : me_(me), state_(state) {
      if (state_) std::swap(static_cast<PassState&>(me_), *state_);
    }
    ~SwapIn() {
      if (state_) std::swap(static_cast<PassState&>(me_), *state_);
    }
    SwapIn(const SwapIn&) = delete;
    SwapIn& operator=(const SwapIn&) = delete;

   private:
    Rank& me_;
    PassState* state_;
  };

  // The op objects of every layer into `p`.
  void make_ops(Device& dev, PassState& p) const {
    Ops& ops = dev.ops();
    const Model& model = *model_;
    const auto L = static_cast<std::size_t>(model.layers());
    p.conv_relu_pool.resize(L);
    p.conv.resize(L);
    p.pool.resize(L);
    p.linear.resize(L);
    p.relu.resize(L);
    p.dropout.resize(L);
    p.resize.resize(L);
    for (int l = 0; l < model.layers(); ++l) {
      const LayerSpec& spec = model.layer(l);
      const auto at = static_cast<std::size_t>(l);
      switch (spec.op) {
        case LayerOp::kConvReluPool:
          p.conv_relu_pool[at] = ops.make_conv_relu_pool();
          break;
        case LayerOp::kLinear:
          p.linear[at] = ops.make_linear();
          if (spec.relu) p.relu[at] = ops.make_relu();
          break;
        case LayerOp::kConv:
          p.conv[at] = ops.make_conv2d(conv_params(spec));
          if (spec.relu) p.relu[at] = ops.make_relu();
          break;
        case LayerOp::kPool:
          p.pool[at] = ops.make_pool2d(pool_params(spec));
          break;
        case LayerOp::kDropout:
          p.dropout[at] = ops.make_dropout();
          break;
        case LayerOp::kResize:
          p.resize[at] =
              ops.make_resize(spec.bilinear ? ResizeMode::Bilinear : ResizeMode::Nearest);
          break;
      }
    }
    p.xent = ops.make_softmax_xent();
  }

  void run(const std::function<void(int)>& fn) {
    group_->run([&](int r, Transport&) { fn(r); });
  }
  std::size_t mine() const { return static_cast<std::size_t>(group_->local_ranks().front()); }

  // Empty when the step is one CUDA graph over the group; otherwise why not.
  std::string plan_graphs(const std::vector<Device*>& devices) {
    capture_.reset();
    if (!o_.cuda_graphs) return "cuda_graphs is false";
    for (const Device* d : devices)
      if (!d->supports_capture()) return d->name() + " cannot capture work (CUDA only)";
    if (model_->has_dropout()) return "the model's dropout masks change every step";
    return plan_group_graph("the all-gathers and reduce-scatters between the devices", *group_,
                            devices, &capture_);
  }

  // Channel shard bounds and elements per channel of activation b (sharded boundaries only).
  int64_t first_channel(int b, int r) const { return bounds_[b][r]; }
  int64_t channels_of(int b, int r) const { return bounds_[b][r + 1] - bounds_[b][r]; }

  // Where every activation and gradient lives, and the collectives that move them, from the
  // model's per-layer split modes (pairing "none": input-split layers split by output instead).
  //   forward: an activation left in shards is all-gathered before a layer that needs it
  //   whole (output-split and replicated layers, the loss); an input-split layer's partial
  //   outputs are summed by an allreduce.
  //   backward, at each boundary, the conjugate: a partial gradient of a sharded activation is
  //   reduce-scattered, of a whole one allreduced; a replicated gradient of a sharded
  //   activation is sliced (no communication).
  void plan(const Model& m, int k) {
    const int L = m.layers();
    const auto n = static_cast<std::size_t>(L);
    mode_.assign(n, SplitMode::kOutput);
    sharded_.assign(n + 1, false);
    gather_.assign(n + 1, false);
    grad_in_.assign(n + 1, Grad::kReplicated);
    bounds_.assign(n + 1, {});
    per_channel_.assign(n + 1, 1);
    plan_ = CommPlan{};
    for (int l = 0; l < L; ++l) {
      const auto at = static_cast<std::size_t>(l);
      const LayerSpec& spec = m.layer(l);
      SplitMode mode = spec.split;
      if (mode == SplitMode::kInput && o_.pairing != "megatron") mode = SplitMode::kOutput;
      mode_[at] = mode;
      if (mode == SplitMode::kInput && !sharded_[at])
        throw Error("channel_split: " + spec.name + " is split by its input, but " +
                    (l ? m.layer(l - 1).name : std::string("the input")) +
                    " leaves no channel shards for it");
      const bool needs_full = mode == SplitMode::kOutput || mode == SplitMode::kReplicated;
      if (needs_full && sharded_[at]) gather_[at] = true;
      sharded_[at + 1] =
          mode == SplitMode::kOutput || (mode == SplitMode::kChannelwise && sharded_[at]);
      const Shape& a = m.activation(l + 1);
      per_channel_[at + 1] = shape_numel(a) / a[0];
      if (mode == SplitMode::kOutput) {
        if (a[0] < k)
          throw Error("channel_split: " + std::to_string(k) + " devices, but " + spec.name +
                      " has only " + std::to_string(a[0]) + " output channels to split (at most " +
                      std::to_string(a[0]) + " devices)");
      }
      if (sharded_[at + 1]) bounds_[at + 1] = equal_segments(a[0], k);
    }
    gather_[n] = sharded_[n];  // the loss needs the whole logits
    auto floats = [&](int b) { return shape_numel(m.activation(b)); };
    for (int b = 1; b <= L; ++b) {
      if (gather_[static_cast<std::size_t>(b)])
        plan_.allgather.emplace_back(m.layer(b - 1).name + " output", floats(b));
      if (b < L && mode_[static_cast<std::size_t>(b)] == SplitMode::kInput)
        plan_.allreduce.emplace_back(m.layer(b).name + " output (partial sums)", floats(b + 1));
    }
    // Backward: the gradient each layer leaves at its input, and how the producer gets it,
    // down to the first layer whose input gradient no layer needs.
    Grad g = Grad::kReplicated;  // the loss's, on every device
    for (int b = L; b >= 1; --b) {
      const auto at = static_cast<std::size_t>(b);
      if (b < L && !m.needs_input_grad(b)) break;
      grad_in_[at] = g;
      Grad resolved = g;
      if (sharded_[at]) {
        if (g == Grad::kPartial)
          plan_.reduce_scatter.emplace_back(
              (b < L ? m.layer(b).name : std::string("loss")) + " input gradient", floats(b));
        resolved = Grad::kSharded;
      } else if (g == Grad::kPartial) {
        plan_.allreduce.emplace_back(m.layer(b - 1).name + " output gradient", floats(b));
        resolved = Grad::kReplicated;
      }
      // Layer b-1's input gradient.
      const SplitMode mode = mode_[at - 1];
      if (mode == SplitMode::kOutput)
        g = Grad::kPartial;
      else if (mode == SplitMode::kInput)
        g = Grad::kSharded;
      else if (mode == SplitMode::kChannelwise)
        g = resolved;
      else
        g = Grad::kReplicated;
    }
  }

  std::vector<Block> blocks(int r) const {
    const Model& m = *model_;
    std::vector<Block> b;
    for (int l = 0; l < m.layers(); ++l) {
      if (!m.has_params(l)) continue;
      const auto at = static_cast<std::size_t>(l);
      const ParamInfo& w = m.tensors()[static_cast<std::size_t>(m.first_tensor(l))];
      const int64_t rows = w.shape[0], cols = shape_numel(w.shape) / rows;
      const int64_t out = m.layer(l).out;
      const bool linear = m.layer(l).op == LayerOp::kLinear;
      switch (mode_[at]) {
        case SplitMode::kOutput: {
          const int64_t a = first_channel(l + 1, r), e = a + channels_of(l + 1, r);
          if (linear)
            b.push_back({0, rows, a, e});  // W (in,out): this device's columns
          else
            b.push_back({a, e, 0, cols});  // W (K,C,R,S): this device's filters
          b.push_back({a, e, 0, 1});
          break;
        }
        case SplitMode::kInput: {
          // The rows of W that read this device's channels of the input.
          const int64_t p = per_channel_[at];
          b.push_back(
              {first_channel(l, r) * p, (first_channel(l, r) + channels_of(l, r)) * p, 0, cols});
          b.push_back({0, out, 0, 1});  // the bias on every device (added by device 0 only)
          break;
        }
        default:
          b.push_back({0, rows, 0, cols});
          b.push_back({0, out, 0, 1});
      }
    }
    return b;
  }

  std::vector<float> extract(const std::vector<float>& full, const std::vector<Block>& blocks) {
    std::vector<float> out;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const ParamInfo& p = model_->tensors()[i];
      const int64_t cols = shape_numel(p.shape) / p.shape[0];
      const Block& b = blocks[i];
      for (int64_t row = b.r0; row < b.r1; ++row) {
        const auto* src = full.data() + p.offset + row * cols;
        out.insert(out.end(), src + b.c0, src + b.c1);
      }
    }
    return out;
  }

  // The whole model from every rank's blocks. Under mpirun each process holds its own rank's
  // blocks: this is a collective then (every rank calls it), each rank contributing its part.
  std::vector<float> assemble(Tensor Rank::*field) {
    std::vector<std::vector<float>> parts(ranks_.size());
    for (int r : group_->local_ranks()) parts[r] = (ranks_[r].*field).to_host_f32();
    group_->share_lists(parts);
    std::vector<float> full(static_cast<std::size_t>(model_->parameters()));
    for (std::size_t r = 0; r < parts.size(); ++r) {
      const std::vector<Block> rank_blocks = blocks(static_cast<int>(r));
      std::size_t at = 0;
      for (std::size_t i = 0; i < rank_blocks.size(); ++i) {
        const ParamInfo& p = model_->tensors()[i];
        const int64_t cols = shape_numel(p.shape) / p.shape[0];
        const Block& b = rank_blocks[i];
        for (int64_t row = b.r0; row < b.r1; ++row) {
          PARALAB_REQUIRE(at + static_cast<std::size_t>(b.c1 - b.c0) <= parts[r].size(),
                          "channel_split: rank " + std::to_string(r) + "'s part is too short");
          std::copy(parts[r].begin() + static_cast<std::ptrdiff_t>(at),
                    parts[r].begin() + static_cast<std::ptrdiff_t>(at + (b.c1 - b.c0)),
                    full.begin() + p.offset + row * cols + b.c0);
          at += static_cast<std::size_t>(b.c1 - b.c0);
        }
      }
    }
    return full;
  }

  // Element boundaries of a packed buffer of activation b for n examples.
  std::vector<int64_t> packed_bounds(int b, int64_t n) const {
    std::vector<int64_t> out;
    for (int64_t c : bounds_[b]) out.push_back(c * n * per_channel_[b]);
    return out;
  }

  // NCHW <-> device-major, one 2-D copy per device's channel block.
  void repack(Device& dev, int b, int64_t n, const Tensor& from, Tensor& to, bool to_packed) {
    const int k = static_cast<int>(ranks_.size());
    const std::size_t f = sizeof(float), s = static_cast<std::size_t>(per_channel_[b]);
    const std::size_t full_pitch = static_cast<std::size_t>(bounds_[b].back()) * s * f;
    for (int j = 0; j < k; ++j) {
      const std::size_t c = static_cast<std::size_t>(first_channel(b, j));
      const std::size_t width = static_cast<std::size_t>(channels_of(b, j)) * s * f;
      char* packed = static_cast<char*>((to_packed ? to : from).raw()) +
                     c * static_cast<std::size_t>(n) * s * f;
      char* nchw = static_cast<char*>((to_packed ? from : to).raw()) + c * s * f;
      if (to_packed)
        dev.copy_2d(packed, width, nchw, full_pitch, width, static_cast<std::size_t>(n));
      else
        dev.copy_2d(nchw, full_pitch, packed, width, width, static_cast<std::size_t>(n));
    }
  }

  // This device's channels of activation b: (n, c, tail...).
  Shape own_shape(int b, int r, int64_t n) const {
    Shape shape = model_->activation_shape(b, n);
    shape[1] = channels_of(b, r);
    return shape;
  }

  void ensure_batch(Rank& me, int64_t n) {
    if (me.n == n) return;
    Device& dev = *me.dev;
    const int r = me.rank, L = model_->layers();
    const auto size = static_cast<std::size_t>(L + 1);
    for (auto* v : {&me.packed, &me.own, &me.full, &me.dfull, &me.dpacked, &me.down, &me.dshard})
      v->assign(size, Tensor());
    me.x = Tensor::empty(dev, model_->activation_shape(0, n));
    me.y = Tensor::empty(dev, {n}, DType::I32);
    for (int b = 1; b <= L; ++b) {
      const auto at = static_cast<std::size_t>(b);
      const Shape whole = model_->activation_shape(b, n);
      const int64_t offset = sharded_[at] ? first_channel(b, r) * n * per_channel_[at] : 0;
      if (sharded_[at]) {
        me.packed[at] = Tensor::empty(dev, {shape_numel(whole)});
        me.own[at] = me.packed[at].view(offset, own_shape(b, r, n));
        if (gather_[at]) me.full[at] = Tensor::empty(dev, whole);
      } else {
        me.full[at] = Tensor::empty(dev, whole);
      }
      if (grad_in_[at] != Grad::kSharded) me.dfull[at] = Tensor::empty(dev, whole);
      if (sharded_[at]) {
        if (grad_in_[at] == Grad::kPartial) {
          me.dpacked[at] = Tensor::empty(dev, {shape_numel(whole)});
          me.down[at] = me.dpacked[at].view(offset, own_shape(b, r, n));
        } else {
          me.dshard[at] = Tensor::empty(dev, own_shape(b, r, n));
          me.down[at] = me.dshard[at];
        }
      }
    }
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

  // Time in the communication steps [from, to) of `marks` (after a synchronisation).
  double comm_ms(Rank& me, const std::vector<std::pair<TimeMark, TimeMark>>& marks,
                 std::size_t from, std::size_t to) {
    double ms = 0;
    for (std::size_t i = from; i < to; ++i)
      ms += me.dev->elapsed_ms(marks[i].first, marks[i].second);
    return ms;
  }

  // All-gathers activation b: every device's channels into packed[b], then into NCHW full[b].
  void gather_output(Rank& me, int b, int64_t n) {
    const auto at = static_cast<std::size_t>(b);
    comm(me, [&] {
      allgather_ring(*me.t, me.packed[at], packed_bounds(b, n), chunk_bytes_);
      repack(*me.dev, b, n, me.packed[at], me.full[at], /*to_packed=*/false);
    });
  }

  // Sums the devices' partial gradients of activation b; each keeps its own channels' sum.
  void reduce_scatter_grad(Rank& me, int b, int64_t n) {
    const auto at = static_cast<std::size_t>(b);
    comm(me, [&] {
      repack(*me.dev, b, n, me.dfull[at], me.dpacked[at], /*to_packed=*/true);
      reduce_scatter_ring(*me.t, me.dpacked[at], packed_bounds(b, n), chunk_bytes_);
    });
  }

  // Activation b as layer b reads it: whole, or this device's channels.
  const Tensor& whole(Rank& me, int b) {
    return b == 0 ? me.x : me.full[static_cast<std::size_t>(b)];
  }
  // Whether layer b (a pool or dropout) works on this device's channels of activation b: a
  // channelwise layer on a sharded activation. A replicated one reads the whole activation,
  // which plan() gathers for it (it read the shard, and failed on the whole-sized output).
  bool reads_shard(int b) const {
    const auto at = static_cast<std::size_t>(b);
    return sharded_[at] && mode_[at] == SplitMode::kChannelwise;
  }
  // A pool's or dropout's input: this device's shard, or the whole activation.
  const Tensor& input(Rank& me, int b) {
    return reads_shard(b) ? me.own[static_cast<std::size_t>(b)] : whole(me, b);
  }
  // Dropout's mask over the features of activation b it reads (GLOBAL example and feature
  // indices: the same mask as one device's).
  DropoutKey dropout_key(Rank& me, int b) const {
    const auto at = static_cast<std::size_t>(b);
    return {dropout_layer_seed(key_.seed, b), key_.example_offset,
            reads_shard(b) ? first_channel(b, me.rank) * per_channel_[at] : 0};
  }
  Tensor& output(Rank& me, int b) {
    const auto at = static_cast<std::size_t>(b);
    return sharded_[at] ? me.own[at] : me.full[at];
  }

  void forward(Rank& me, int64_t n, bool training) {
    const Model& m = *model_;
    for (int l = 0; l < m.layers(); ++l) {
      const auto at = static_cast<std::size_t>(l);
      const LayerSpec& spec = m.layer(l);
      if (gather_[at]) gather_output(me, l, n);
      const int t = m.first_tensor(l);
      Tensor& out = output(me, l + 1);
      switch (spec.op) {
        case LayerOp::kConvReluPool:
          me.conv_relu_pool[at]->forward(whole(me, l), me.w[t], me.w[t + 1], out, training);
          break;
        case LayerOp::kLinear:
          if (mode_[at] == SplitMode::kInput) {
            const Tensor& bias = me.rank == 0 ? me.w[t + 1] : me.zero_bias[at];
            me.linear[at]->forward(
                me.own[at].reshaped({n, channels_of(l, me.rank) * per_channel_[at]}), me.w[t], bias,
                out);
            comm(me, [&] { allreduce_->run(*me.t, out); });
          } else {
            me.linear[at]->forward(whole(me, l).reshaped({n, shape_numel(m.activation(l))}),
                                   me.w[t], me.w[t + 1], out);
          }
          if (spec.relu) me.relu[at]->forward(out, out);
          break;
        case LayerOp::kConv:
          me.conv[at]->forward(whole(me, l), me.w[t], me.w[t + 1], out);
          if (spec.relu) me.relu[at]->forward(out, out);
          break;
        case LayerOp::kPool:
          me.pool[at]->forward(input(me, l), out, training);
          break;
        case LayerOp::kDropout:
          me.dropout[at]->forward(input(me, l), out, static_cast<float>(spec.p), dropout_key(me, l),
                                  training);
          break;
        case LayerOp::kResize:
          me.resize[at]->forward(whole(me, l), out);
          break;
      }
    }
    const int L = m.layers();
    if (gather_[static_cast<std::size_t>(L)]) gather_output(me, L, n);
    me.xent->forward_backward(
        whole(me, L), me.y, training ? &me.dfull[static_cast<std::size_t>(L)] : nullptr, me.stats);
  }

  void backward(Rank& me, int64_t n) {
    const Model& m = *model_;
    const std::size_t f = sizeof(float);
    for (int l = m.layers() - 1; l >= 0; --l) {
      const int b = l + 1;
      if (b < m.layers() && !m.needs_input_grad(b)) break;  // no gradient reaches layer l
      const auto at = static_cast<std::size_t>(l), bt = static_cast<std::size_t>(b);
      // The gradient of layer l's output, in the form layer l produced its output.
      if (sharded_[bt]) {
        if (grad_in_[bt] == Grad::kPartial) {
          reduce_scatter_grad(me, b, n);
        } else if (grad_in_[bt] == Grad::kReplicated) {
          const std::size_t p = static_cast<std::size_t>(per_channel_[bt]);
          const std::size_t mine = static_cast<std::size_t>(channels_of(b, me.rank)) * p * f;
          me.dev->copy_2d(me.down[bt].raw(), mine,
                          static_cast<char*>(me.dfull[bt].raw()) +
                              static_cast<std::size_t>(first_channel(b, me.rank)) * p * f,
                          static_cast<std::size_t>(bounds_[bt].back()) * p * f, mine,
                          static_cast<std::size_t>(n));
        }
      } else if (grad_in_[bt] == Grad::kPartial) {
        comm(me, [&] { allreduce_->run(*me.t, me.dfull[bt]); });
      }
      Tensor& dy = sharded_[bt] ? me.down[bt] : me.dfull[bt];
      // Where layer l's input gradient goes.
      Tensor* dx = nullptr;
      if (m.needs_input_grad(l)) dx = grad_in_[at] == Grad::kSharded ? &me.down[at] : &me.dfull[at];
      const LayerSpec& spec = m.layer(l);
      const int t = m.first_tensor(l);
      switch (spec.op) {
        case LayerOp::kConvReluPool:
          me.conv_relu_pool[at]->backward(whole(me, l), me.w[t], dy, dx, me.g[t], me.g[t + 1]);
          break;
        case LayerOp::kLinear: {
          if (spec.relu) me.relu[at]->backward(output(me, b), dy, dy);
          const bool input_split = mode_[at] == SplitMode::kInput;
          const int64_t in = input_split ? channels_of(l, me.rank) * per_channel_[at]
                                         : shape_numel(m.activation(l));
          const Tensor x = (input_split ? me.own[at] : whole(me, l)).reshaped({n, in});
          Tensor dx_flat = dx ? dx->reshaped({n, in}) : Tensor();
          me.linear[at]->backward(x, me.w[t], dy, dx ? &dx_flat : nullptr, me.g[t], me.g[t + 1]);
          break;
        }
        case LayerOp::kConv:
          if (spec.relu) me.relu[at]->backward(output(me, b), dy, dy);
          me.conv[at]->backward(whole(me, l), me.w[t], dy, dx, me.g[t], me.g[t + 1]);
          break;
        case LayerOp::kPool:
          if (dx) me.pool[at]->backward(dy, *dx);
          break;
        case LayerOp::kDropout:
          if (dx) me.dropout[at]->backward(dy, *dx);
          break;
        case LayerOp::kResize:
          break;  // before every layer with parameters: no gradient needed
      }
    }
  }

  // The step captured once per run (StepGraph: after an eager step has sized the buffers; a
  // shorter batch runs eagerly in a pass state of its own), then launched with its example
  // indices and SGD step set before each launch.
  // With read_back "epoch" a launch (the capturing step's too) is queued without waiting: rank 0
  // copies its loss and correct count to the step's slot, every rank marks the step's end on its
  // queue (after the graph), and the step's figures are read at collect(); its phases are not
  // (a replay's marks are the last replay's: only the last queued step's are read), its time is.
  void graph_step(Rank& me, int64_t offset, int64_t count, float lr) {
    Transport& t = *me.t;
    Device& dev = *me.dev;
    const auto next = me.graph.next(count);
    if (next == StepGraph<StepMarks>::Next::Apart) {  // another batch: eager, the graph kept
      const SwapIn in(me, &me.spare[kOtherPass]);
      rank_step(me, me.order, offset, count, lr);
      return;
    }
    // A launch read once per epoch starts here on the device (its inputs' copy included).
    const bool defer = o_.read_back == "epoch" && next != StepGraph<StepMarks>::Next::Eager;
    const TimeMark start = defer ? dev.mark() : TimeMark{};
    copy_step_input(dev, me.step_indices, me.order, offset, count);
    if (next == StepGraph<StepMarks>::Next::Eager) {  // allocations
      rank_step(me, me.step_indices, 0, count, lr);
      return;
    }
    if (next == StepGraph<StepMarks>::Next::Capture &&
        !me.graph.capture(
            capture_.get(), me.rank, t, dev,
            [&] {
              me.comm_marks.clear();
              return enqueue_step(me, me.step_indices, 0, count, 0.0f, &me.step);
            },
            wake_peers(*group_))) {
      rank_step(me, me.step_indices, 0, count, lr);  // no graph: eagerly
      return;
    }
    const auto t0 =
        me.graph.launch(capture_.get(), me.rank, t, dev, me.step, lr / static_cast<float>(count));
    if (defer) {
      QueuedStep q;
      q.stats = 0;
      if (me.rank == 0) {  // the loss, the same on every rank: rank 0's
        me.deferred.save_stats(me.stats);
        q.stats = 1;
        q.samples = count;
      }
      q.start = start;
      q.end = dev.mark();
      // A step that captured counts the capture in its time, from its own start.
      q.from_previous = next != StepGraph<StepMarks>::Next::Capture;
      q.detail = {{"cuda_graph_replay", 1}};
      me.deferred.add(std::move(q));
      me.queued = true;
      return;
    }
    finish_step(me, me.graph.marks(), count);
    me.times.bytes_sent = me.graph.bytes();
    t.barrier();
    me.times.total_ms = ms_between(t0, Clock::now());
  }

  // Queues one step (order[offset, offset+count) are the batch's examples) and returns its
  // marks; the SGD step is `step` (a device scalar: what a graph replays) or else `lr_step`.
  StepMarks enqueue_step(Rank& me, const Tensor& order, int64_t offset, int64_t count,
                         float lr_step, const Tensor* step) {
    Device& dev = *me.dev;
    StepMarks m;
    m.start = dev.mark();
    dev.ops().gather(me.data.train_x, me.data.train_y, order, offset, count, me.x, me.y);
    forward(me, count, /*training=*/true);
    m.forward_end = dev.mark();
    m.forward_steps = me.comm_marks.size();
    backward(me, count);
    m.backward_end = dev.mark();
    if (step)
      dev.ops().sgd(me.params, me.grads, *step);
    else
      dev.ops().sgd(me.params, me.grads, lr_step);
    m.end = dev.mark();
    m.comm = me.comm_marks;
    return m;
  }

  // Waits for the step's work and reads its figures and times into the rank.
  void finish_step(Rank& me, const StepMarks& m, int64_t count) {
    Device& dev = *me.dev;
    dev.synchronize();
    const auto st = me.stats.to_host_f32();
    me.loss = st[0];
    me.correct = static_cast<int64_t>(st[1]);
    const double forward_comm = comm_ms(me, m.comm, 0, m.forward_steps);
    const double all_comm = comm_ms(me, m.comm, 0, m.comm.size());
    me.forward_ms = dev.elapsed_ms(m.start, m.forward_end) - forward_comm;
    me.backward_ms = dev.elapsed_ms(m.forward_end, m.backward_end) - (all_comm - forward_comm);
    me.times.compute_ms = dev.elapsed_ms(m.start, m.backward_end) - all_comm;
    me.times.communication_ms = all_comm;
    me.times.exposed_communication_ms = all_comm;
    me.times.optimizer_ms = dev.elapsed_ms(m.backward_end, m.end);
    me.times.bytes_sent = me.t->bytes_sent();
    me.times.samples = count;
    take_receive_times(*me.t, dev, me.times);
  }

  void rank_step(Rank& me, const Tensor& order, int64_t offset, int64_t count, float lr) {
    Transport& t = *me.t;
    // Launches queued before it (read_back "epoch") finish first: their time is not its own.
    if (!me.deferred.empty()) me.dev->synchronize();
    t.barrier();
    t.reset_bytes_sent();
    t.reset_receive_times();
    me.comm_marks.clear();
    const auto t0 = Clock::now();
    ensure_batch(me, count);
    const StepMarks m =
        enqueue_step(me, order, offset, count, lr / static_cast<float>(count), nullptr);
    finish_step(me, m, count);
    t.barrier();
    me.times.total_ms = ms_between(t0, Clock::now());
  }

  Options o_;
  std::shared_ptr<const Model> model_;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  PassKey key_;  // this step's dropout key
  // The plan (plan()), per layer l or activation boundary b: the effective split mode; whether
  // activation b lives in channel shards, is all-gathered before its consumer, and in which
  // form its consumer's backward leaves its gradient; the shards' channel bounds and elements
  // per channel.
  std::vector<SplitMode> mode_;
  std::vector<bool> sharded_, gather_;
  std::vector<Grad> grad_in_;
  std::vector<std::vector<int64_t>> bounds_;
  std::vector<int64_t> per_channel_;
  CommPlan plan_;
  std::unique_ptr<Allreduce> allreduce_;      // made in setup, with the group's piece size
  int64_t chunk_bytes_ = kDefaultChunkBytes;  // the collectives' pieces (setup: auto_chunk_bytes)
  std::unique_ptr<SpmdGroup> group_;
  std::vector<Rank> ranks_;
  bool apart_ = false;  // the ranks' spare pass states exist (where the step can be a graph)
  std::string graphs_ = "not set up";      // empty: the step is one CUDA graph over the group
  std::unique_ptr<GroupCapture> capture_;  // declared after ranks_: goes before them
  int64_t eval_batch_ = 1000, test_count_ = 0;
};

Options parse_options(const json& options, const std::string& path) {
  Options o;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw Error(path + "." + key + ": " + what);
  };
  for (const auto& [key, v] : options.items()) {
    if (read_step_option(path, key, v, o.cuda_graphs, o.read_back)) continue;
    if (key == "pairing" || key == "allreduce") {
      if (!v.is_string()) fail(key, "must be a string");
      (key == "pairing" ? o.pairing : o.allreduce) = v.get<std::string>();
    } else {
      fail(key,
           "unknown option for strategy 'channel_split' (known: pairing, allreduce, cuda_graphs, "
           "read_back)");
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
