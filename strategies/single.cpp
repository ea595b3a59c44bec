#include "strategies/single.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/model.h"
#include "core/ops.h"
#include "strategies/deferred_steps.h"
#include "strategies/device_data.h"
#include "strategies/timing.h"

namespace paralab {

namespace {

// When the host reads a step's loss, accuracy and times: after each step ("step"), or once per
// epoch ("epoch": the steps are queued without waiting, see DeferredSteps). "auto" is "epoch" on
// devices that queue work (GPUs) and "step" elsewhere (CPU work is done when queued, and a live
// loss costs nothing).
enum class ReadBack { Auto, Step, Epoch };

const char* read_back_name(ReadBack r) {
  return r == ReadBack::Auto ? "auto" : r == ReadBack::Step ? "step" : "epoch";
}

class Single final : public Strategy {
 public:
  Single(bool cuda_graphs, ReadBack read_back, int steps_per_launch)
      : graphs_(cuda_graphs), read_back_(read_back), steps_per_launch_(steps_per_launch) {}

  // Under mpirun -np 1 it is the one rank: nothing to share.
  std::string mpi_unsupported() const override { return ""; }

  void setup(const StrategySetup& s) override {
    PARALAB_REQUIRE(s.devices.size() == 1,
                    "single: runs on exactly 1 device, got " + std::to_string(s.devices.size()));
    device_ = s.devices[0];
    device_->bind_thread();
    const auto model = s.model ? s.model : default_model();
    // Where steps can be graphs, passes run in slots of the model of their own (kGraphSlot).
    apart_ = graphs_ && device_->supports_capture() && !model->has_dropout();
    model_ = std::make_unique<ModelReplica>(model, *device_, apart_ ? kPassSlots : 1);
    seed_ = s.seed;
    model_->params().copy_from_host(s.initial_parameters);
    data_ = DeviceData(*device_, *s.train, *s.test);
    eval_batch_ = s.eval_batch;
    stats_ = Tensor::zeros(*device_, {2});
    step_ = Tensor::zeros(*device_, {1});
    if (read_back_ == ReadBack::Auto)
      read_back_ = device_->queues_work() ? ReadBack::Epoch : ReadBack::Step;
    // Several steps per launch are read together: only where steps are read once per epoch
    // (make_single refuses "step" with them; "auto" gives "step" only on devices that do not
    // queue work, which do not capture either).
    launch_steps_ = deferring() ? steps_per_launch_ : 1;
    deferred_ = DeferredSteps(*device_);
  }

  void begin_epoch(std::span<const int32_t> order) override {
    PARALAB_REQUIRE(deferred_.empty() && held_.empty(),
                    "single: a new epoch before the last one's steps were collected");
    order_ = Tensor::from_host(*device_, {static_cast<int64_t>(order.size())}, order);
    ++epoch_;
  }

  StepResult train_step(int64_t offset, int64_t count, float lr) override {
    device_->bind_thread();
    key_ = {dropout_seed(seed_, epoch_), offset};
    if (!graphed()) return eager_step(order_, offset, count, lr, start_mark(), kGraphSlot);
    if (graphed_count_ < 0) {
      // The first step runs eagerly: it allocates what the graph will use (the activations, the
      // steps' input buffers) and lets cuDNN choose its algorithms, which a capture must not do.
      // The graph is of its batch size.
      graphed_count_ = count;
      size_graph_inputs(count);
      return eager_step(order_, offset, count, lr, start_mark(), kGraphSlot);
    }
    // A step of another size (an epoch's shorter last batch) runs eagerly in a slot of its own,
    // leaving the graph and what it uses alone.
    if (count != graphed_count_) {
      run_held_steps();
      return eager_step(order_, offset, count, lr, start_mark(), kOtherSlot);
    }
    if (launch_steps_ > 1) return held_step(offset, count, lr);
    const TimeMark start = start_mark();
    // A graph replays fixed pointers: this step's example indices go to a fixed buffer first.
    device_->copy_on_device(step_indices_.raw(), order_.i32() + offset,
                            static_cast<std::size_t>(count) * sizeof(int32_t));
    // The graph reads the SGD step from step_, set before each replay: any lr replays it.
    const float step = lr / static_cast<float>(count);
    if (graph_) return replay(count, step, Clock::now(), start);
    // A step that captures counts the capture in its time.
    const auto t0 = Clock::now();
    if (!capture([&] { enqueue_step(step_indices_, 0, count, stats_, step_); }))
      return eager_step(step_indices_, 0, count, lr, start, kGraphSlot);
    // Deferred, the replay's device time starts after the capture, which adds its host time.
    return replay(count, step, t0, deferring() ? device_->mark() : TimeMark{}, /*captured=*/true);
  }

  std::vector<StepResult> collect() override {
    run_held_steps();
    return deferred_.collect();
  }

  EvalResult evaluate() override {
    device_->bind_thread();
    run_held_steps();
    // Apart from the graph's buffers where there may be one (apart_).
    const int slot = apart_ ? kEvalSlot : kGraphSlot;
    // Each batch's stats go to a slot of their own on the device, read once at the end.
    const int64_t total = data_.test_x.dim(0);
    const int64_t batches = (total + eval_batch_ - 1) / eval_batch_;
    if (!eval_stats_.defined() || eval_stats_.numel() != 2 * batches)
      eval_stats_ = Tensor::zeros(*device_, {2 * batches});
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t offset = b * eval_batch_, count = std::min(eval_batch_, total - offset);
      Tensor& x = inputs_.sized(*device_, model_->model(), count, slot);
      Tensor& y = inputs_.y[slot];
      device_->ops().gather(data_.test_x, data_.test_y, data_.test_order, offset, count, x, y);
      model_->forward(x, y, stats_, /*training=*/false, {}, slot);
      device_->copy_on_device(eval_stats_.f32() + 2 * b, stats_.raw(), 2 * sizeof(float));
    }
    const std::vector<float> st = eval_stats_.to_host_f32();
    EvalResult e;
    for (int64_t b = 0; b < batches; ++b) {
      e.loss_sum += st[static_cast<std::size_t>(2 * b)];
      e.correct += static_cast<int64_t>(st[static_cast<std::size_t>(2 * b + 1)]);
    }
    e.samples = total;
    return e;
  }

  std::vector<float> parameters() override {
    run_held_steps();
    return model_->params().to_host_f32();
  }
  std::vector<float> gradients() override {
    run_held_steps();
    return model_->grads().to_host_f32();
  }

  nlohmann::json options() const override {
    return {{"cuda_graphs", graphs_},
            {"read_back", read_back_name(read_back_)},
            {"steps_per_launch", steps_per_launch_}};
  }

  nlohmann::json report() const override {
    if (!device_ || !graphs_ || !device_->supports_capture()) return nullptr;
    if (model_->model().has_dropout())
      return {{"cuda_graphs", "not used: the model's dropout masks change every step"}};
    if (!capture_failure_.empty())
      return {{"cuda_graphs", "not used: capture failed: " + capture_failure_}};
    // Nothing captured (yet): a run too short for a graph says so, not "used".
    if (captures_ == 0)
      return {{"cuda_graphs", launch_steps_ > 1
                                  ? "not used: no " + std::to_string(launch_steps_) +
                                        " consecutive steps of one batch size ran"
                                  : std::string("not used: no second step of one batch size ran "
                                                "(the first runs eagerly)")}};
    nlohmann::json out = {{"cuda_graphs", "used"},
                          {"cuda_graph_captures", captures_},
                          {"cuda_graph_replays", replays_}};
    if (launch_steps_ > 1) {
      out["cuda_graph_steps_per_launch"] = launch_steps_;
      out["cuda_graph_steps_run_eagerly"] = eager_held_;
    }
    // What the last captured step held (CUDA: its graph's census), for the step's time beside it.
    if (!graph_described_.is_null()) out["cuda_graph"] = graph_described_;
    return out;
  }

 private:
  // The step as captured work: gather, forward, backward, SGD with its step read from `step`
  // (one float on the device; no synchronisation, no host copy), its loss and correct count
  // into `stats`.
  void enqueue_step(const Tensor& order, int64_t offset, int64_t count, Tensor& stats,
                    const Tensor& step) {
    Ops& ops = device_->ops();
    Tensor& x = inputs_.sized(*device_, model_->model(), count, kGraphSlot);
    Tensor& y = inputs_.y[kGraphSlot];
    ops.gather(data_.train_x, data_.train_y, order, offset, count, x, y);
    model_->forward(x, y, stats, /*training=*/true, key_, kGraphSlot);
    model_->backward();
    ops.sgd(model_->params(), model_->grads(), step);
  }

  // Captures enqueue() as the graph of the steps. False where the device cannot make it
  // (capture_work's CaptureFailed): nothing of it ran, this step and every later one run
  // eagerly, and the report says why. Any other error throws.
  template <typename Enqueue>
  bool capture(Enqueue&& enqueue) {
    try {
      graph_ = capture_work(*device_, enqueue);
    } catch (const CaptureFailed& e) {
      capture_failure_ = e.what();
      return false;
    }
    ++captures_;
    graph_described_ = graph_->describe();
    return true;
  }

  bool deferring() const { return read_back_ == ReadBack::Epoch; }
  // Deferred, a step's first mark (its time then runs from the previous step's end anyway).
  TimeMark start_mark() { return deferring() ? device_->mark() : TimeMark{}; }
  bool graphed() const {
    return graphs_ && device_->supports_capture() && !model_->model().has_dropout() &&
           capture_failure_.empty();
  }

  // steps_per_launch > 1: a step is held until launch_steps_ consecutive steps of one batch
  // size are, then all of them run as one launch of a graph that holds them all (the host's
  // work per launch: one index copy, one kernel setting the SGD steps, the launch, one copy of
  // the stats). Held steps that cannot complete a launch (the end of an epoch, a step that
  // does not follow them) run eagerly, in order, before anything that needs them done.
  StepResult held_step(int64_t offset, int64_t count, float lr) {
    if (!held_.empty() && offset != held_.back().offset + count) run_held_steps();
    held_.push_back({offset, count, lr});
    if (static_cast<int>(held_.size()) == launch_steps_) launch_held();
    StepResult r;
    r.samples = count;
    r.pending = true;
    return r;
  }

  // The held steps (launch_steps_ of them, consecutive) as one launch, captured first if no
  // graph of them exists.
  void launch_held() {
    const int64_t count = held_.front().count, n = launch_steps_;
    const auto t0 = Clock::now();
    bool captured = false;
    if (!graph_) {
      const bool made = capture([&] {
        for (int64_t j = 0; j < n; ++j) {
          Tensor stats = launch_stats_.view(2 * j, {2});
          enqueue_step(launch_indices_, j * count, count, stats, launch_step_.view(j, {1}));
        }
      });
      if (!made) {
        run_held_steps();
        return;
      }
      captured = true;
    }
    QueuedStep q;
    q.start = device_->mark();
    device_->copy_on_device(launch_indices_.raw(), order_.i32() + held_.front().offset,
                            static_cast<std::size_t>(n * count) * sizeof(int32_t));
    std::vector<float> steps;
    for (const Held& h : held_) steps.push_back(h.lr / static_cast<float>(count));
    device_->ops().set_scalars(launch_step_, steps);
    graph_->launch();
    ++replays_;
    deferred_.save_stats(launch_stats_);
    q.end = device_->mark();
    q.samples = count;
    q.steps = q.stats = static_cast<int>(n);
    if (captured) {
      // The capture's host time, which the device does not see, goes to the launch's steps.
      q.host_ms = ms_between(t0, q.start.host);
      q.from_previous = false;
    }
    q.detail = step_detail(true);
    q.detail["cuda_graph_steps"] = n;
    deferred_.add(std::move(q));
    held_.clear();
  }

  // The graphed steps' inputs, for steps of `count` examples, made before any capture: the
  // step's example indices (its SGD step is step_), or with several steps per launch their
  // example indices, SGD steps and stats side by side.
  void size_graph_inputs(int64_t count) {
    if (launch_steps_ == 1) {
      step_indices_ = Tensor::empty(*device_, {count}, DType::I32);
      return;
    }
    launch_indices_ = Tensor::empty(*device_, {launch_steps_ * count}, DType::I32);
    launch_step_ = Tensor::zeros(*device_, {launch_steps_});
    launch_stats_ = Tensor::zeros(*device_, {2 * launch_steps_});
  }

  // The held steps, eagerly and queued, in order (their results come from collect()).
  void run_held_steps() {
    for (const Held& h : held_) {
      key_ = {dropout_seed(seed_, epoch_), h.offset};
      eager_step(order_, h.offset, h.count, h.lr, start_mark(), kGraphSlot);
      ++eager_held_;
    }
    held_.clear();
  }

  // One step queued phase by phase, with a time mark between phases and one synchronisation
  // at the end (or none, deferred: `start` is then the step's first mark): the phases are
  // timed on the device without stopping it in between.
  StepResult eager_step(const Tensor& order, int64_t offset, int64_t count, float lr,
                        const TimeMark& start, int slot) {
    Ops& ops = device_->ops();
    StepResult r;
    const auto t0 = Clock::now();
    const TimeMark m0 = deferring() ? start : device_->mark();
    Tensor& x = inputs_.sized(*device_, model_->model(), count, slot);
    Tensor& y = inputs_.y[slot];
    ops.gather(data_.train_x, data_.train_y, order, offset, count, x, y);
    model_->forward(x, y, stats_, /*training=*/true, key_, slot);
    const TimeMark m1 = device_->mark();
    model_->backward();
    const TimeMark m2 = device_->mark();
    ops.sgd(model_->params(), model_->grads(), lr / static_cast<float>(count));
    const TimeMark m3 = device_->mark();
    if (deferring()) {
      QueuedStep q;
      q.start = m0;
      q.phases = true;
      q.forward_end = m1;
      q.backward_end = m2;
      q.optimizer_end = m3;
      return queue(std::move(q), count, false);
    }
    device_->synchronize();
    r.times.total_ms = ms_between(t0, Clock::now());
    r.times.forward_ms = device_->elapsed_ms(m0, m1);
    r.times.backward_ms = device_->elapsed_ms(m1, m2);
    r.times.optimizer_ms = device_->elapsed_ms(m2, m3);
    finish(r, count, false);
    return r;
  }

  // The captured step queued again after its SGD step is set; one synchronisation at its end
  // (or none, deferred: the step runs on the device from `start`, after a capture's `t0`).
  // Its phases cannot be told apart: forward, backward and optimizer times are 0, the whole
  // step is in total_ms, from t0.
  StepResult replay(int64_t count, float step, Clock::time_point t0, const TimeMark& start,
                    bool captured = false) {
    StepResult r;
    device_->ops().set_scalar(step_, step);
    graph_->launch();
    ++replays_;
    if (deferring()) {
      QueuedStep q;
      q.start = start;
      if (captured) {
        q.host_ms = ms_between(t0, start.host);
        q.from_previous = false;
      }
      return queue(std::move(q), count, true);
    }
    device_->synchronize();
    r.times.total_ms = ms_between(t0, Clock::now());
    finish(r, count, true);
    return r;
  }

  // A deferred step: its stats copied to its slot, its end marked, nothing waited for.
  StepResult queue(QueuedStep q, int64_t count, bool replayed) {
    deferred_.save_stats(stats_);
    q.end = device_->mark();
    q.samples = count;
    q.detail = step_detail(replayed);
    deferred_.add(std::move(q));
    StepResult r;
    r.samples = count;
    r.pending = true;
    return r;
  }

  nlohmann::json step_detail(bool replayed) const {
    if (graphs_ && device_->supports_capture()) return {{"cuda_graph_replay", replayed ? 1 : 0}};
    return nlohmann::json::object();
  }

  void finish(StepResult& r, int64_t count, bool replayed) {
    const std::vector<float> st = stats_.to_host_f32();
    r.loss_sum = st[0];
    r.correct = static_cast<int64_t>(st[1]);
    r.samples = count;
    r.detail = step_detail(replayed);
  }

  Device* device_ = nullptr;
  std::unique_ptr<ModelReplica> model_;
  // Where steps can be graphs (apart_), passes run in three slots (PassSlot), each with its own
  // activations, ops and input: the graphed step's (its batch size the first one trained),
  // evaluations', and eager steps of any other size (an epoch's shorter last batch).
  bool apart_ = false;
  int64_t graphed_count_ = -1;  // the graphed steps' batch size, once the first step has run
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  PassKey key_;  // this step's dropout key
  DeviceData data_;
  Tensor order_;
  SlotInputs inputs_;  // each slot's input
  Tensor stats_, eval_stats_;
  int64_t eval_batch_ = 1000;
  // CUDA graphs: the captured step, and the example indices and SGD step it reads.
  bool graphs_ = true;
  ReadBack read_back_ = ReadBack::Auto;
  DeferredSteps deferred_;
  std::unique_ptr<CapturedWork> graph_;
  Tensor step_indices_, step_;
  int64_t captures_ = 0, replays_ = 0;
  // Several steps per launch (steps_per_launch): as asked, and as used (1 unless deferring);
  // the steps held for the next launch; the launch's inputs (its steps' example indices, SGD
  // steps and stats, side by side); how many held steps ran eagerly instead.
  int steps_per_launch_ = 1, launch_steps_ = 1;
  struct Held {
    int64_t offset, count;
    float lr;
  };
  std::vector<Held> held_;
  Tensor launch_indices_, launch_step_, launch_stats_;
  int64_t eager_held_ = 0;
  std::string capture_failure_;     // why the step could not be made a graph; then eager for good
  nlohmann::json graph_described_;  // the last captured graph's describe(), kept after it goes
};

}  // namespace

std::unique_ptr<Strategy> make_single(const nlohmann::json& options, const std::string& path) {
  bool graphs = true;
  ReadBack read_back = ReadBack::Auto;
  int steps_per_launch = 1;
  for (const auto& [key, value] : options.items()) {
    if (key == "cuda_graphs") {
      if (!value.is_boolean()) throw Error(path + "." + key + ": must be true or false");
      graphs = value.get<bool>();
    } else if (key == "read_back") {
      const ReadBack all[] = {ReadBack::Auto, ReadBack::Step, ReadBack::Epoch};
      const std::string name = value.is_string() ? value.get<std::string>() : "";
      const auto* found = std::find_if(std::begin(all), std::end(all),
                                       [&name](ReadBack r) { return name == read_back_name(r); });
      if (found == std::end(all))
        throw Error(path + "." + key + ": must be \"auto\", \"step\" or \"epoch\", got " +
                    value.dump());
      read_back = *found;
    } else if (key == "steps_per_launch") {
      const auto most = static_cast<int64_t>(Ops::kMaxScalars);
      if (!value.is_number_integer() || value.get<int64_t>() < 1 || value.get<int64_t>() > most)
        throw Error(path + "." + key + ": must be an integer from 1 to " + std::to_string(most) +
                    ", got " + value.dump());
      steps_per_launch = value.get<int>();
    } else {
      throw Error(path + "." + key +
                  ": unknown option for strategy 'single' (known: cuda_graphs, read_back, "
                  "steps_per_launch)");
    }
  }
  if (steps_per_launch > 1 && read_back == ReadBack::Step)
    throw Error(path + ".steps_per_launch: " + std::to_string(steps_per_launch) +
                " steps per launch are read together: needs read_back \"epoch\" or \"auto\", "
                "not \"step\"");
  return std::make_unique<Single>(graphs, read_back, steps_per_launch);
}

}  // namespace paralab
