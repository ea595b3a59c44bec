#include "strategies/layer_split.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "core/error.h"
#include "core/model.h"
#include "core/ops.h"
#include "core/rng.h"
#include "strategies/deferred_steps.h"
#include "strategies/device_data.h"
#include "strategies/pipeline.h"
#include "strategies/spmd_group.h"
#include "strategies/step_graphs.h"
#include "strategies/timing.h"

namespace paralab {

namespace {

using nlohmann::json;

// (Re)allocates t unless it already has this shape and type.
Tensor& ensure(Tensor& t, Device& device, const Shape& shape, DType dtype = DType::F32) {
  if (!t.defined() || t.shape() != shape || t.dtype() != dtype)
    t = Tensor::empty(device, shape, dtype);
  return t;
}

std::vector<float> layer_slice(const Model& model, const std::vector<float>& flat, int first,
                               int last) {
  return {flat.begin() + model.layer_offset(first), flat.begin() + model.layer_offset(last)};
}

// "conv1, conv2, fc1, fc2"
std::string layer_names(const Model& model) {
  std::string s;
  for (int l = 0; l < model.layers(); ++l) s += (l ? ", " : "") + model.layer(l).name;
  return s;
}

struct Options {
  json split = "auto";
  int microbatches = 1;
  std::string schedule = "gpipe";
  bool cuda_graphs = true;
  std::string read_back = "step";  // "epoch": graph launches queued, read once per epoch
  std::string path;
};

// The marks of a stage's step: its pipeline's and around its update.
struct StepMarks {
  PipelineMarks pipeline;
  TimeMark update_start, update_end;
};

class LayerSplit final : public Strategy {
 public:
  explicit LayerSplit(Options o) : o_(std::move(o)) {}

  std::string mpi_unsupported() const override {
    return o_.read_back == "epoch"
               ? "with read_back \"epoch\" needs every stage in one process (each process would "
                 "read its own stage's steps); under mpirun use \"step\""
               : "";
  }

  void setup(const StrategySetup& s) override {
    group_ = make_group(s.devices, s.mpi);
    model_ = s.model ? s.model : default_model();
    seed_ = s.seed;
    const Model& model = *model_;
    const int k = group_->size(), layers = model.layers();
    check_stages(model, k);
    const int m = o_.microbatches;
    if (o_.read_back == "epoch" && static_cast<int>(group_->local_ranks().size()) != k)
      throw Error("layer_split " + mpi_unsupported());
    graphs_ = plan_graphs(s.devices);
    // Where the step can be a graph, evaluations and steps of another batch run in slots of
    // their own, so that one capture serves the run (StepGraph).
    sets_ = graphs_.empty() ? kPassSlots : 1;
    if (o_.split.is_array()) {
      bounds_ = {0};
      for (const auto& b : o_.split) bounds_.push_back(b.get<int>());
      bounds_.push_back(layers);
    } else {
      // Every layer runs on the first device here; what its ops chose for the layers it will not
      // run is forgotten after, so that the results list only its own stage's choices.
      // Timed as the stages will run: inside one graph over the group, or eagerly.
      const nlohmann::json before = s.devices[0]->ops().describe();
      profile_ = profile_layers(
          model, *s.devices[0], s.initial_parameters, std::max<int64_t>(1, s.train_batch / m),
          graphs_.empty() ? LayerTiming::kGraphReplays : LayerTiming::kHostClock);
      layer_ms_ = profile_.layer_ms;
      s.devices[0]->ops().forget_choices_since(before);
      // Between processes each profiled its own device: every rank takes rank 0's profile, so
      // that all cut the model alike.
      std::vector<std::vector<double>> profiles(static_cast<std::size_t>(k));
      for (int r : group_->local_ranks()) profiles[r] = layer_ms_;
      group_->share_lists(profiles);
      layer_ms_ = profiles[0];
      bounds_ = balanced_split(layer_ms_, k);
    }
    passes_.clear();
    for (int r = 0; r < k; ++r) passes_.push_back(pipeline_schedule(o_.schedule, r, k, m));
    ranks_ = std::vector<Rank>(static_cast<std::size_t>(k));
    eval_batch_ = s.eval_batch;
    test_count_ = s.test->count;
    train_ = s.train;
    run([&](int r) {
      Rank& me = ranks_[r];
      Device& dev = group_->device(r);
      me.dev = &dev;
      me.t = &group_->transport(r);
      me.t->set_receive_timing(s.communication_split);
      me.first = bounds_[r];
      me.last = bounds_[r + 1];
      const std::vector<float> mine = layer_slice(model, s.initial_parameters, me.first, me.last);
      me.params = Tensor::from_host(dev, {static_cast<int64_t>(mine.size())}, mine);
      me.grads = Tensor::zeros(dev, me.params.shape());
      me.grad_tmp = Tensor::zeros(dev, me.params.shape());
      me.layers =
          std::make_unique<ModelStages>(model, dev, me.first, me.last, me.params, m * sets_);
      me.slots.resize(static_cast<std::size_t>(m * sets_));
      me.step = Tensor::zeros(dev, {1});
      me.deferred = DeferredSteps(dev);
      // The data: stage 0 gathers its images (and, alone, its labels); a last stage k > 1
      // needs labels only, which it gets in epoch order (begin_epoch) and test order.
      if (r == 0)
        me.data = DeviceData(dev, *s.train, *s.test);
      else if (r == k - 1)
        me.test_labels = Tensor::from_host(dev, {s.test->count}, s.test->labels);
    });
  }

  void check_batch(int64_t count) const override {
    const int m = o_.microbatches;
    if (count < m || count % m != 0)
      throw Error("layer_split: global batch " + std::to_string(count) + " is not divisible into " +
                  std::to_string(m) + " equal micro-batches");
  }

  void check_plan(const Model& model, int devices, std::span<const int64_t> batches) override {
    check_stages(model, devices);
    for (const int64_t count : batches) check_batch(count);
  }

  void begin_epoch(std::span<const int32_t> order) override {
    const int k = static_cast<int>(ranks_.size());
    run([&](int r) {
      Rank& me = ranks_[r];
      const auto n = static_cast<int64_t>(order.size());
      if (r == 0) me.order = Tensor::from_host(*me.dev, {n}, order);
      me.epoch = ++me.epochs;
      if (r == k - 1 && r > 0) {  // the epoch's labels in training order: a view per step
        std::vector<int32_t> labels(order.size());
        for (std::size_t i = 0; i < order.size(); ++i)
          labels[i] = train_->labels[static_cast<std::size_t>(order[i])];
        me.epoch_labels = Tensor::from_host(*me.dev, {n}, labels);
      }
    });
  }

  StepResult train_step(int64_t offset, int64_t count, float lr) override {
    check_batch(count);
    const int64_t mb = count / o_.microbatches;
    const auto t0 = Clock::now();
    run_step_falling_back(
        *group_, graphs_, capture_, [this](const auto& fn) { run(fn); },
        [&](int r, bool graphed) {
          ranks_[r].queued = false;
          if (graphed)
            graph_step(ranks_[r], r, offset, count, mb, lr, t0);
          else
            rank_step(ranks_[r], r, {&ranks_[r].order, &ranks_[r].epoch_labels, offset}, count, mb,
                      lr, t0, offset);
        },
        [](int) {});
    StepResult out;
    out.times.total_ms = ms_between(t0, Clock::now());
    out.samples = count;
    drop_graphs_if_capture_failed(ranks_, graphs_, capture_);
    if (ranks_[static_cast<std::size_t>(group_->local_ranks().front())].queued) {
      out.pending = true;  // every stage queued its launch: read at collect()
      return out;
    }
    return read_figures(std::move(out), count);
  }

  // The queued steps (read_back "epoch"): each stage waits for its device once and reads its
  // steps; a step's loss and correct count are the last stage's (the sums of its micro-batches'
  // slots), its time the slowest stage's (from the end of the step before on that stage's
  // queue), the bytes every stage's launch sent. The last of them, where it was the graph's last
  // launch, also gets every stage's phases, pipeline timeline and bubble: the graph's marks hold
  // that launch's times.
  std::vector<StepResult> collect() override {
    int64_t bytes = 0;
    for (const Rank& me : ranks_) bytes += me.graph.bytes();
    return collect_queued_steps(
        ranks_, [this](const auto& fn) { run(fn); }, "layer_split",
        [&](StepResult& s) {
          s.detail["bytes_sent"] = bytes;
          s.detail["bytes_expected"] = expected_bytes(s.samples);
        },
        [this](int r, const StepResult& last) {
          finish_step(ranks_[r], r, ranks_[r].graph.marks(), last.samples,
                      ranks_[r].launch_origin_ms);
        },
        [this](const StepResult& last) { return read_figures(last, last.samples); });
  }

  EvalResult evaluate() override {
    const int k = static_cast<int>(ranks_.size());
    const int chunks = static_cast<int>((test_count_ + eval_batch_ - 1) / eval_batch_);
    run([&](int r) {
      Rank& me = ranks_[r];
      Device& dev = *me.dev;
      const bool first = r == 0, last = r == k - 1;
      // In slots of its own where the step may be a graph, which outlives it.
      const int set = sets_ > 1 ? kEvalSlot : kGraphSlot;
      me.loss = 0;
      me.correct = 0;
      auto rows = [&](int j) { return std::min(eval_batch_, test_count_ - j * eval_batch_); };
      PipelineStage st;
      st.slots = o_.microbatches;
      st.input = [&](int j) -> Tensor& {
        return ensure(slot(me, set, j).in, dev, model_->activation_shape(me.first, rows(j)));
      };
      st.forward = [&](int j) -> const Tensor& {
        Slot& sl = slot(me, set, j);
        const int64_t n = rows(j);
        if (first) {  // images for the input (and the labels, when it is also the last stage)
          ensure(sl.x, dev, model_->activation_shape(0, n));
          ensure(sl.y, dev, {n}, DType::I32);
          dev.ops().gather(me.data.test_x, me.data.test_y, me.data.test_order, j * eval_batch_, n,
                           sl.x, sl.y);
        }
        const Tensor& out = me.layers->forward(index(set, j), first ? sl.x : sl.in, false);
        if (last) {
          ensure(sl.stats, dev, {2});
          me.layers->loss(index(set, j), first ? sl.y : me.test_labels.view(j * eval_batch_, {n}),
                          sl.stats, false);
          const auto v = sl.stats.to_host_f32();
          me.loss += v[0];
          me.correct += static_cast<int64_t>(v[1]);
        }
        return out;
      };
      run_pipeline(*me.t, dev, pipeline_schedule("forward", r, k, chunks), st, Clock::now());
    });
    // The last stage computed the loss; between processes, every rank learns it.
    std::vector<Figures> all(static_cast<std::size_t>(k));
    for (int r : group_->local_ranks()) all[r] = {ranks_[r].loss, ranks_[r].correct, {}};
    group_->share(all);
    return {all.back().loss, all.back().correct, test_count_};
  }

  std::vector<float> parameters() override { return assemble(&Rank::params); }
  std::vector<float> gradients() override { return assemble(&Rank::grads); }

  json options() const override {
    return {{"split", o_.split},
            {"microbatches", o_.microbatches},
            {"schedule", o_.schedule},
            {"cuda_graphs", o_.cuda_graphs},
            {"read_back", o_.read_back}};
  }

  json report() const override {
    if (ranks_.empty()) return nullptr;
    const int k = static_cast<int>(ranks_.size());
    json stages = json::array();
    for (int r = 0; r < k; ++r) {
      const int first = bounds_[r], last = bounds_[r + 1];
      json layers = json::array();
      for (int l = first; l < last; ++l) layers.push_back(model_->layer(l).name);
      // A stage in another process (mpirun) is named by its rank.
      const Rank& me = ranks_[static_cast<std::size_t>(r)];
      stages.push_back({{"device", me.dev ? me.dev->name() : "rank " + std::to_string(r)},
                        {"layers", layers},
                        {"parameters", model_->layer_offset(last) - model_->layer_offset(first)}});
    }
    json timeline = json::array();
    for (std::size_t r = 0; r < last_events_.size(); ++r)
      for (const PipelineEvent& e : last_events_[r])
        timeline.push_back({{"stage", r},
                            {"pass", e.pass.forward ? "forward" : "backward"},
                            {"microbatch", e.pass.microbatch},
                            {"start_ms", e.start_ms},
                            {"end_ms", e.end_ms}});
    json rep = {{"split", json(std::vector<int>(bounds_.begin() + 1, bounds_.end() - 1))},
                {"split_source", o_.split.is_array() ? "descriptor" : "auto"},
                {"stages", stages},
                {"microbatches", o_.microbatches},
                {"schedule", o_.schedule},
                {"ideal_bubble_fraction", ideal_bubble_fraction(k, o_.microbatches)},
                {"bytes_per_example", expected_bytes(1)},
                {"last_iteration_timeline", timeline}};
    if (!layer_ms_.empty()) {
      rep["profiled_layer_ms"] = layer_ms_;
      rep["profiled_layer_timing"] = layer_timing_name(profile_.timing);
      if (!profile_.why_not_graphs.empty())
        rep["profiled_layer_timing_note"] = profile_.why_not_graphs;
    }
    if (o_.cuda_graphs) {
      const Rank& me = ranks_[static_cast<std::size_t>(group_->local_ranks().front())];
      report_graphs(rep, graphs_, capture_.get(), k, me.graph.captures(), me.graph.replays(),
                    me.graph.described());
    }
    return rep;
  }

 private:
  // k stages of `model`: at most one per layer, and the split option's boundaries, where given,
  // inside the model and one fewer than the stages.
  void check_stages(const Model& model, int k) const {
    const int layers = model.layers();
    if (k > layers)
      throw Error("layer_split: " + std::to_string(k) + " devices, but " + model.name() +
                  " has only " + std::to_string(layers) + " layers (" + layer_names(model) +
                  ") to cut into stages: at most " + std::to_string(layers) + " devices");
    if (!o_.split.is_array()) return;
    if (!o_.split.empty() && o_.split.back().get<int>() >= layers)
      throw Error(o_.path + ".split: boundaries must be increasing integers in 1.." +
                  std::to_string(layers - 1) + ", got " + o_.split.dump());
    if (static_cast<int>(o_.split.size()) != k - 1)
      throw Error(o_.path + ".split: " + std::to_string(o_.split.size()) + " boundaries make " +
                  std::to_string(o_.split.size() + 1) + " stages, but the run has " +
                  std::to_string(k) + " devices");
  }
  // The figures of the step every stage has read (finish_step): loss and correct count from the
  // last stage, each stage's times, the phases summed over stages, the measured bubble and the
  // bytes moved; the pipeline's events kept for the report. Between processes, gathered.
  StepResult read_figures(StepResult out, int64_t count) {
    const int k = group_->size();
    std::vector<Figures> all(static_cast<std::size_t>(k));
    std::vector<std::vector<PipelineEvent>> events(static_cast<std::size_t>(k));
    for (int r : group_->local_ranks()) {
      all[r] = {ranks_[r].loss, ranks_[r].correct, ranks_[r].times};
      events[r] = ranks_[r].pipeline.events;
    }
    group_->share(all);
    group_->share_lists(events);
    int64_t bytes = 0;
    for (const Figures& f : all) {
      out.ranks.push_back(f.times);
      bytes += f.times.bytes_sent;
    }
    out.loss_sum = all.back().loss;
    out.correct = all.back().correct;
    // Phases as single-device training reports them, summed over the stages.
    for (int r = 0; r < k; ++r) {
      for (const PipelineEvent& e : events[r])
        (e.pass.forward ? out.times.forward_ms : out.times.backward_ms) += e.end_ms - e.start_ms;
      out.times.optimizer_ms = std::max(out.times.optimizer_ms, all[r].times.optimizer_ms);
    }
    out.times.communication_ms = all[0].times.communication_ms;
    const double bubble = measured_bubble_fraction(events);
    out.detail = {{"bubble_fraction", bubble},
                  {"bytes_sent", bytes},
                  {"bytes_expected", expected_bytes(count)}};
    if (graphs_.empty())
      out.detail["cuda_graph_replay"] =
          ranks_[static_cast<std::size_t>(group_->local_ranks().front())].graph.replayed() ? 1 : 0;
    last_events_ = std::move(events);
    return out;
  }

  struct Slot {
    Tensor x, y, in, dy, stats;
  };
  // A stage's figures of a step, as shared between processes.
  struct Figures {
    double loss;
    int64_t correct;
    RankTimes times;
  };
  struct Rank {
    Device* dev = nullptr;
    Transport* t = nullptr;
    int first = 0, last = 0;
    std::unique_ptr<ModelStages> layers;
    Tensor params, grads, grad_tmp;
    DeviceData data;                   // stage 0
    Tensor order;                      // stage 0: the epoch's example order
    Tensor epoch_labels, test_labels;  // a last stage k > 1: labels in epoch and test order
    std::vector<Slot> slots;
    int backwards = 0;
    int64_t epochs = 0, epoch = 0;  // begin_epoch() calls (dropout keys)
    PipelineTimes pipeline;
    RankTimes times;
    double loss = 0;
    int64_t correct = 0;
    // CUDA graphs (one over the group): this stage's part (StepGraph; keyed by the global
    // batch), and the step's example indices (stage 0), labels (a last stage) and SGD step, set
    // before each launch.
    StepGraph<StepMarks> graph;
    Tensor step_order, step_labels, step;
    // read_back "epoch": the launched steps' figures, read at collect(); queued: this step's;
    // the last launch's pipeline origin after its iteration's start (host clock).
    DeferredSteps deferred;
    bool queued = false;
    double launch_origin_ms = 0;
  };

  // Micro-batch mb's slot in set `set` (kGraphSlot, kEvalSlot, kOtherSlot: the model's slots and
  // me.slots, microbatches per set).
  int index(int set, int mb) const { return set * o_.microbatches + mb % o_.microbatches; }
  Slot& slot(Rank& me, int set, int mb) const {
    return me.slots[static_cast<std::size_t>(index(set, mb))];
  }

  void run(const std::function<void(int)>& fn) {
    group_->run([&](int r, Transport&) { fn(r); });
  }

  // Empty when the step is one CUDA graph over the group; otherwise why not.
  std::string plan_graphs(const std::vector<Device*>& devices) {
    capture_.reset();
    if (!o_.cuda_graphs) return "cuda_graphs is false";
    for (const Device* d : devices)
      if (!d->supports_capture()) return d->name() + " cannot capture work (CUDA only)";
    if (model_->has_dropout()) return "the model's dropout masks change every step";
    return plan_group_graph("the pipeline's sends between stages", *group_, devices, &capture_,
                            /*comm_streams=*/false, /*steps=*/false);
  }

  // Activations forward and their gradients back across every stage boundary.
  int64_t expected_bytes(int64_t count) const {
    int64_t floats = 0;
    for (std::size_t i = 1; i + 1 < bounds_.size(); ++i)
      floats += 2 * shape_numel(model_->activation_shape(bounds_[i], count));
    return floats * static_cast<int64_t>(sizeof(float));
  }

  // The whole model from every stage. Under mpirun each process holds its own stage: this is a
  // collective then (every rank calls it), each rank contributing its part.
  std::vector<float> assemble(Tensor Rank::*field) {
    std::vector<std::vector<float>> parts(ranks_.size());
    for (int r : group_->local_ranks()) parts[r] = (ranks_[r].*field).to_host_f32();
    group_->share_lists(parts);
    std::vector<float> flat(static_cast<std::size_t>(model_->parameters()));
    for (std::size_t r = 0; r < parts.size(); ++r)
      std::copy(parts[r].begin(), parts[r].end(), flat.begin() + model_->layer_offset(bounds_[r]));
    return flat;
  }

  // Where a step's inputs come from: stage 0 gathers examples order[offset + j*mb, ...) for
  // micro-batch j; a last stage k > 1 reads labels[offset + j*mb, ...).
  struct StepInputs {
    const Tensor* order = nullptr;
    const Tensor* labels = nullptr;
    int64_t offset = 0;
  };

  // The step captured once per run (StepGraph: after an eager step has sized the slots; a
  // shorter batch runs eagerly in slots of its own), then launched with its example indices,
  // labels and SGD step set before each launch.
  // With read_back "epoch" a launch (the capturing step's too) is queued without waiting: the
  // last stage copies its micro-batches' losses and correct counts to the step's slots, every
  // stage marks the step's end on its queue (after the graph), and the step's figures are read
  // at collect(); its phases are not (a replay's marks are the last replay's: only the last
  // queued step's are read), its time is.
  void graph_step(Rank& me, int r, int64_t offset, int64_t count, int64_t mb, float lr,
                  Clock::time_point t0) {
    const int k = static_cast<int>(ranks_.size());
    Transport& t = *me.t;
    Device& dev = *me.dev;
    const auto next = me.graph.next(count);
    if (next == StepGraph<StepMarks>::Next::Apart) {  // another batch: eager, the graph kept
      rank_step(me, r, {&me.order, &me.epoch_labels, offset}, count, mb, lr, t0, offset,
                kOtherSlot);
      return;
    }
    // A launch read once per epoch starts here on the device (its inputs' copies included).
    const bool defer = o_.read_back == "epoch" && next != StepGraph<StepMarks>::Next::Eager;
    const TimeMark start = defer ? dev.mark() : TimeMark{};
    if (r == 0) copy_step_input(dev, me.step_order, me.order, offset, count);
    if (r == k - 1 && r > 0) copy_step_input(dev, me.step_labels, me.epoch_labels, offset, count);
    const StepInputs inputs{&me.step_order, &me.step_labels, 0};
    if (next == StepGraph<StepMarks>::Next::Eager) {  // allocations
      rank_step(me, r, inputs, count, mb, lr, t0, offset);
      return;
    }
    if (next == StepGraph<StepMarks>::Next::Capture &&
        !me.graph.capture(
            capture_.get(), r, t, dev,
            [&] { return enqueue_step(me, r, inputs, mb, 0.0f, &me.step, offset); },
            wake_peers(*group_))) {
      rank_step(me, r, inputs, count, mb, lr, t0, offset);  // no graph: eagerly
      return;
    }
    const auto a =
        me.graph.launch(capture_.get(), r, t, dev, me.step, lr / static_cast<float>(count));
    // Every stage's part starts at the launch: the timeline's origin, for all stages alike (a
    // queued launch's is kept for collect(), which reads the last one's timeline).
    if (defer) {
      QueuedStep q;
      q.stats = 0;
      if (r == k - 1) {  // the loss: the last stage's, one slot per micro-batch
        for (int j = 0; j < o_.microbatches; ++j)
          me.deferred.save_stats(slot(me, kGraphSlot, j).stats);
        q.stats = o_.microbatches;
      }
      q.start = start;
      q.end = dev.mark();
      // A step that captured counts the capture in its time, from its own start.
      q.from_previous = next != StepGraph<StepMarks>::Next::Capture;
      q.samples = r == k - 1 ? count : 0;  // with the loss
      q.detail = {{"cuda_graph_replay", 1}};
      me.deferred.add(std::move(q));
      me.launch_origin_ms = ms_between(t0, a);
      me.queued = true;
      return;
    }
    finish_step(me, r, me.graph.marks(), count, ms_between(t0, a));
    me.times.bytes_sent = me.graph.bytes();
    t.barrier();
    me.times.total_ms = ms_between(a, Clock::now());
  }

  // Queues one step's pipeline and update; returns its marks. The SGD step is `step` (a device
  // scalar: what a graph replays) or else `lr_step`. key_offset: the step's first example in
  // the epoch's order (dropout keys).
  StepMarks enqueue_step(Rank& me, int r, const StepInputs& in, int64_t mb, float lr_step,
                         const Tensor* step, int64_t key_offset, int set = kGraphSlot) {
    const int k = static_cast<int>(ranks_.size());
    Device& dev = *me.dev;
    Ops& ops = dev.ops();
    const bool first = r == 0, last = r == k - 1;
    me.backwards = 0;
    PipelineStage st;
    st.slots = o_.microbatches;
    st.input = [&](int j) -> Tensor& {
      return ensure(slot(me, set, j).in, dev, model_->activation_shape(me.first, mb));
    };
    st.output_grad = [&](int j) -> Tensor& {
      return ensure(slot(me, set, j).dy, dev, model_->activation_shape(me.last, mb));
    };
    st.forward = [&](int j) -> const Tensor& {
      Slot& sl = slot(me, set, j);
      if (first) {
        ensure(sl.x, dev, model_->activation_shape(0, mb));
        ensure(sl.y, dev, {mb}, DType::I32);
        ops.gather(me.data.train_x, me.data.train_y, *in.order, in.offset + j * mb, mb, sl.x, sl.y);
      }
      // Dropout keys: the micro-batch's global position in the epoch's order.
      const PassKey key{dropout_seed(seed_, me.epoch), key_offset + j * mb};
      const Tensor& out = me.layers->forward(index(set, j), first ? sl.x : sl.in, true, key);
      if (last) {
        ensure(sl.stats, dev, {2});
        me.layers->loss(index(set, j), first ? sl.y : in.labels->view(in.offset + j * mb, {mb}),
                        sl.stats, true);
      }
      return out;
    };
    st.backward = [&](int j) -> const Tensor& {
      // The first backward writes the gradients, later ones add to them.
      Tensor& into = me.backwards == 0 ? me.grads : me.grad_tmp;
      const Tensor& dx =
          me.layers->backward(index(set, j), last ? nullptr : &slot(me, set, j).dy, into);
      if (me.backwards++ > 0) ops.add_inplace(me.grads, me.grad_tmp);
      return dx;
    };
    StepMarks m;
    m.pipeline = queue_pipeline(*me.t, dev, passes_[static_cast<std::size_t>(r)], st);
    m.update_start = dev.mark();
    if (step)
      ops.sgd(me.params, me.grads, *step);
    else
      ops.sgd(me.params, me.grads, lr_step);
    m.update_end = dev.mark();
    return m;
  }

  // Waits for the step's work and reads its figures and times into the stage; the pipeline's
  // origin lies origin_ms after the iteration's start; the step ran in slots `set`.
  void finish_step(Rank& me, int r, const StepMarks& m, int64_t count, double origin_ms,
                   int set = kGraphSlot) {
    const int k = static_cast<int>(ranks_.size());
    Device& dev = *me.dev;
    dev.synchronize();
    if (r == k - 1) {
      me.loss = 0;
      me.correct = 0;
      for (int j = 0; j < o_.microbatches; ++j) {
        const auto v = slot(me, set, j).stats.to_host_f32();
        me.loss += v[0];
        me.correct += static_cast<int64_t>(v[1]);
      }
    }
    me.pipeline = read_pipeline(dev, m.pipeline, origin_ms);
    me.times.compute_ms = me.pipeline.busy_ms;
    me.times.communication_ms = me.pipeline.transfer_ms;
    me.times.exposed_communication_ms = me.pipeline.transfer_ms;
    me.times.optimizer_ms = dev.elapsed_ms(m.update_start, m.update_end);
    me.times.bytes_sent = me.t->bytes_sent();
    me.times.samples = count;
    take_receive_times(*me.t, dev, me.times);
  }

  // One eager step, in slots `set`; key_offset: the step's first example in the epoch's order.
  void rank_step(Rank& me, int r, const StepInputs& in, int64_t count, int64_t mb, float lr,
                 Clock::time_point t0, int64_t key_offset, int set = kGraphSlot) {
    Transport& t = *me.t;
    Device& dev = *me.dev;
    // Launches queued before it (read_back "epoch") finish first: their time is not its own.
    if (!me.deferred.empty()) dev.synchronize();
    t.barrier();
    t.reset_bytes_sent();
    t.reset_receive_times();
    const auto a = Clock::now();
    // The origin is marked with the device idle, so that its host time is the device's too.
    dev.synchronize();
    const StepMarks m =
        enqueue_step(me, r, in, mb, lr / static_cast<float>(count), nullptr, key_offset, set);
    finish_step(me, r, m, count, ms_between(t0, m.pipeline.origin.host), set);
    t.barrier();
    me.times.total_ms = ms_between(a, Clock::now());
  }

  Options o_;
  // Sets of slots, each microbatches slots of the model and of me.slots, one per PassSlot where the
  // step can be a graph (sets_ 3); otherwise (sets_ 1) everything runs in the first.
  int sets_ = 1;
  std::shared_ptr<const Model> model_;
  uint64_t seed_ = 0;
  std::vector<int> bounds_;
  std::vector<double> layer_ms_;
  LayerProfile profile_;  // how layer_ms_ was taken ("auto" only)
  std::vector<std::vector<PipelinePass>> passes_;
  std::unique_ptr<SpmdGroup> group_;
  std::vector<Rank> ranks_;
  std::string graphs_ = "not set up";      // empty: the step is one CUDA graph over the group
  std::unique_ptr<GroupCapture> capture_;  // declared after ranks_: goes before them
  std::vector<std::vector<PipelineEvent>> last_events_;
  int64_t eval_batch_ = 1000, test_count_ = 0;
  const Dataset* train_ = nullptr;  // the caller's, for the last stage's labels each epoch
};

Options parse_options(const json& options, const std::string& path) {
  Options o;
  o.path = path;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw Error(path + "." + key + ": " + what);
  };
  for (const auto& [key, v] : options.items()) {
    if (key == "split") {
      if (v.is_string()) {
        if (v != "auto") fail(key, "must be \"auto\" or an array of layer boundaries");
      } else if (v.is_array()) {
        int prev = 0;
        for (const auto& b : v) {
          // Checked against the model's layer count in setup().
          if (!b.is_number_integer() || b.get<int>() <= prev)
            fail(key, "boundaries must be increasing integers from 1, got " + v.dump());
          prev = b.get<int>();
        }
      } else {
        fail(key, "must be \"auto\" or an array of layer boundaries");
      }
      o.split = v;
    } else if (key == "microbatches") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 4096)
        fail(key, "must be an integer in 1..4096");
      o.microbatches = v.get<int>();
    } else if (key == "schedule") {
      if (!v.is_string()) fail(key, "must be a string");
      o.schedule = v.get<std::string>();
      try {
        pipeline_schedule(o.schedule, 0, 1, 1);
      } catch (const Error& e) {
        fail(key, e.what());
      }
      if (o.schedule == "forward") fail(key, "'forward' is evaluation only (known: 1f1b, gpipe)");
    } else if (!read_step_option(path, key, v, o.cuda_graphs, o.read_back)) {
      fail(key,
           "unknown option for strategy 'layer_split' (known: split, microbatches, schedule, "
           "cuda_graphs, read_back)");
    }
  }
  return o;
}

}  // namespace

std::vector<int> balanced_split(const std::vector<double>& layer_ms, int stages) {
  const int n = static_cast<int>(layer_ms.size());
  PARALAB_REQUIRE(1 <= stages && stages <= n, "layer_split: cannot cut " + std::to_string(n) +
                                                  " layers into " + std::to_string(stages) +
                                                  " stages");
  std::vector<int> best, cut(static_cast<std::size_t>(stages + 1));
  double best_cost = 1e300;
  // Every increasing choice of stages-1 inner boundaries from 1..n-1, in lexicographic order.
  std::function<void(int, int)> choose = [&](int i, int from) {
    if (i == stages) {
      double worst = 0;
      for (int s = 0; s < stages; ++s) {
        double sum = 0;
        for (int l = cut[s]; l < cut[s + 1]; ++l) sum += layer_ms[static_cast<std::size_t>(l)];
        worst = std::max(worst, sum);
      }
      if (worst < best_cost) {
        best_cost = worst;
        best = cut;
      }
      return;
    }
    for (int b = from; b <= n - (stages - i); ++b) {
      cut[static_cast<std::size_t>(i)] = b;
      choose(i + 1, b + 1);
    }
  };
  cut[0] = 0;
  cut[static_cast<std::size_t>(stages)] = n;
  choose(1, 1);
  return best;
}

const char* layer_timing_name(LayerTiming t) {
  return t == LayerTiming::kGraphReplays ? "graph replays" : "host clock";
}

LayerProfile profile_layers(const Model& model, Device& device,
                            const std::vector<float>& parameters, int64_t n, LayerTiming timing) {
  device.bind_thread();
  Rng rng(7);
  auto random = [&](const Shape& shape) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
    for (float& x : v) x = static_cast<float>(rng.uniform());
    return Tensor::from_host(device, shape, v);
  };
  std::vector<int32_t> label_values(static_cast<std::size_t>(n));
  for (auto& y : label_values) y = static_cast<int32_t>(rng.below(model.classes()));
  const Tensor labels = Tensor::from_host(device, {n}, label_values);
  Tensor stats = Tensor::zeros(device, {2});
  constexpr int kSamples = 5;
  auto median = [](std::vector<double> samples) {
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  };
  LayerProfile out;
  out.timing = timing == LayerTiming::kGraphReplays && device.supports_capture()
                   ? LayerTiming::kGraphReplays
                   : LayerTiming::kHostClock;
  if (timing == LayerTiming::kGraphReplays && !device.supports_capture())
    out.why_not_graphs = device.name() + " cannot capture work (CUDA only)";
  for (int l = 0; l < model.layers(); ++l) {
    const std::vector<float> p = layer_slice(model, parameters, l, l + 1);
    const Tensor params = Tensor::from_host(device, {static_cast<int64_t>(p.size())}, p);
    Tensor grads = Tensor::zeros(device, params.shape());
    ModelStages layer(model, device, l, l + 1, params);
    const Tensor x = random(model.activation_shape(l, n));
    const Tensor dy = random(model.activation_shape(l + 1, n));
    auto pass = [&] {
      layer.forward(0, x, true);
      if (layer.has_loss()) layer.loss(0, labels, stats, true);
      layer.backward(0, layer.has_loss() ? nullptr : &dy, grads);
    };
    // The first pass is a warm-up (primitive creation, algorithm choice, allocations), which a
    // capture must find done.
    std::vector<double> samples;
    for (int rep = 0; rep <= kSamples; ++rep) {
      const auto a = Clock::now();
      pass();
      device.synchronize();
      if (rep > 0) samples.push_back(ms_between(a, Clock::now()));
      if (out.timing == LayerTiming::kGraphReplays) break;
    }
    if (out.timing == LayerTiming::kGraphReplays) {
      TimeMark start, end;  // taken in the capture: they outlive the graph
      std::unique_ptr<CapturedWork> graph;
      try {
        graph = capture_work(device, [&] {
          start = device.mark();
          pass();
          end = device.mark();
        });
      } catch (const CaptureFailed& e) {
        // Nothing of the captured pass ran: the whole profile is taken again by the host clock,
        // so that every layer is timed alike.
        LayerProfile eager = profile_layers(model, device, parameters, n, LayerTiming::kHostClock);
        eager.why_not_graphs = "capture failed: " + std::string(e.what());
        return eager;
      }
      for (int rep = 0; rep <= kSamples; ++rep) {  // the first replay is a warm-up too
        graph->launch();
        device.synchronize();
        if (rep > 0) samples.push_back(device.elapsed_ms(start, end));
      }
    }
    out.layer_ms.push_back(median(std::move(samples)));
  }
  return out;
}

std::unique_ptr<Strategy> make_layer_split(const json& options, const std::string& path) {
  return std::make_unique<LayerSplit>(parse_options(options, path));
}

}  // namespace paralab
