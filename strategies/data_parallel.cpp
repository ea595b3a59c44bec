#include "strategies/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/model.h"
#include "core/ops.h"
#include "strategies/collectives/collectives.h"
#include "strategies/collectives/transport.h"
#include "strategies/deferred_steps.h"
#include "strategies/device_data.h"
#include "strategies/spmd_group.h"
#include "strategies/step_graphs.h"
#include "strategies/timing.h"

namespace paralab {

namespace {

using nlohmann::json;

struct Options {
  std::string allreduce = "ring";
  std::string grouping = "bucketed";
  int64_t bucket_bytes = int64_t{25} << 20;
  bool overlap = false;
  std::optional<int64_t> chunk_bytes;  // none: "auto" (auto_chunk_bytes of the group)
  bool uneven_shards = false;
  bool cuda_graphs = true;
  std::string read_back = "step";  // "epoch": graph replays queued, read once per epoch
};

// A bucket: parameter tensors [first, last] of the model, contiguous in the flat buffers.
// Ready once backward has produced tensor `first` (backward runs from the last tensor down).
struct Bucket {
  int first, last;
  int64_t begin, end;  // elements of the flat gradient
};

std::vector<Bucket> make_buckets(const Options& o, const Model& model) {
  const auto& layout = model.tensors();
  const int64_t cap = o.grouping == "per_tensor" ? 0 : o.bucket_bytes;
  std::vector<Bucket> buckets;
  for (int i = static_cast<int>(layout.size()) - 1; i >= 0; --i) {
    const int64_t begin = layout[i].offset, end = begin + shape_numel(layout[i].shape);
    if (!buckets.empty() && (buckets.back().end - begin) * 4 <= cap) {
      buckets.back().first = i;
      buckets.back().begin = begin;
    } else {
      buckets.push_back({i, i, begin, end});
    }
  }
  return buckets;
}

// Runs a rank's bucket allreduces on a thread of its own while that rank's backward goes on. The
// thread queues on the device's communication queue (Device::bind_comm_thread: a stream of its
// own on a GPU), so the allreduces run beside backward on the device too; each bucket waits for
// the event that its gradients are done, and the step's update waits for the last bucket's.
class CommWorker {
 public:
  CommWorker(Device& device, std::function<void(int)> reduce_bucket)
      : device_(device), reduce_(std::move(reduce_bucket)), thread_([this] {
          // A failed bind fails every bucket (drain() rethrows it), as in RankGroup.
          std::exception_ptr unbound;
          try {
            device_.bind_comm_thread();
          } catch (...) {
            unbound = std::current_exception();
          }
          loop(unbound);
        }) {}
  ~CommWorker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Bucket `bucket`'s gradients are done when `ready` is (recorded on the compute queue).
  void push(int bucket, Event ready) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back({bucket, std::move(ready)});
      ++outstanding_;
    }
    cv_.notify_all();
  }
  // What the buckets since the last drain left: a time mark pair around each allreduce (read
  // them once the device is synchronised) and the event of the last one's end, which the
  // compute queue must wait for before it uses the gradients.
  struct Drained {
    std::vector<std::pair<TimeMark, TimeMark>> marks;
    Event done;
  };
  // Waits until every pushed bucket is queued (the host's part); rethrows a bucket's error.
  Drained drain() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    if (error_) {  // the failed step's marks and event go with it, not into the next drain
      marks_.clear();
      done_ = nullptr;
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    return {std::exchange(marks_, {}), std::exchange(done_, nullptr)};
  }

  // After a step stopped part-way (its capture broke, with the transport aborted): waits until
  // every bucket pushed is off the queue (after the first failure the rest are only counted
  // off) and forgets what they left, their error included, so that the next step starts clean.
  // Returns that error's message where it was the thread's own ("" if none, or a PeerFailed).
  std::string settle() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return outstanding_ == 0; });
    marks_.clear();
    done_ = nullptr;
    std::string own;
    try {
      if (const std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
    } catch (const PeerFailed&) {
    } catch (const std::exception& e) {
      own = e.what();
    } catch (...) {
      own = "communication thread: an unknown error";
    }
    return own;
  }

 private:
  void loop(const std::exception_ptr& unbound) {
    for (;;) {
      std::pair<int, Event> job;
      // After a bucket failed, the rest are only counted off: reducing them would wait on
      // peers that wait for the failed bucket's pieces, and drain() (where the rank rethrows and
      // the group's fabric is aborted, waking those peers) would never return.
      bool skip = false;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        skip = error_ != nullptr;
      }
      std::exception_ptr err = unbound;
      std::pair<TimeMark, TimeMark> marks;
      Event done;
      try {
        if (!err && !skip) {
          device_.wait(job.second);
          marks.first = device_.mark();
          reduce_(job.first);
          marks.second = device_.mark();
          done = device_.record();
        }
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard lock(mu_);
        if (err && !error_) error_ = err;
        if (!err && !skip) {
          marks_.push_back(std::move(marks));
          done_ = std::move(done);
        }
        err = nullptr;  // under the lock, as in RankGroup: the error's last owner is the rank's
        --outstanding_;
      }
      cv_.notify_all();
    }
  }

  Device& device_;
  std::function<void(int)> reduce_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, Event>> queue_;
  int outstanding_ = 0;
  std::vector<std::pair<TimeMark, TimeMark>> marks_;
  Event done_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything it uses exists
};

// The marks between a rank's phases in one step.
struct StepMarks {
  TimeMark start, forward_end, backward_end, communication_end, end;
  CommWorker::Drained overlapped;  // with overlap: the allreduces' own marks
};

class DataParallel final : public Strategy {
 public:
  explicit DataParallel(Options o)
      : o_(std::move(o)), model_(default_model()), buckets_(make_buckets(o_, *model_)) {}

  std::string mpi_unsupported() const override {
    return o_.read_back == "epoch"
               ? "with read_back \"epoch\" needs every rank in one process (each process would "
                 "read its own ranks' steps); under mpirun use \"step\""
               : "";
  }

  void setup(const StrategySetup& s) override {
    group_ = make_group(s.devices, s.mpi);
    if (s.model) model_ = s.model;
    seed_ = s.seed;
    buckets_ = make_buckets(o_, *model_);
    const int k = group_->size();
    chunk_bytes_ = o_.chunk_bytes ? *o_.chunk_bytes : auto_chunk_bytes(s.devices);
    AllreduceOptions ao;
    ao.chunk_bytes = chunk_bytes_;
    allreduce_ = make_allreduce(o_.allreduce, ao);
    allreduce_->prepare(s.devices);
    graphs_ = plan_graphs(s.devices);
    // Where steps can be graphs, evaluations and steps of another batch run in slots of the
    // model and input buffers of their own, so that one capture serves the run (StepGraph).
    apart_ = graphs_.empty();
    if (o_.read_back == "epoch" && static_cast<int>(group_->local_ranks().size()) != k)
      throw Error("data_parallel " + mpi_unsupported());
    ranks_.resize(static_cast<std::size_t>(k));
    eval_batch_ = s.eval_batch;
    test_bounds_ = equal_segments(s.test->count, k);
    // Each rank uploads its own replica and data from its own thread (in parallel).
    run([&](int r) {
      Rank& me = ranks_[r];
      Device& dev = group_->device(r);
      me.transport = &group_->transport(r);
      me.transport->set_receive_timing(s.communication_split);
      me.model = std::make_unique<ModelReplica>(model_, dev, apart_ ? kPassSlots : 1);
      me.model->params().copy_from_host(s.initial_parameters);
      me.data = DeviceData(dev, *s.train, *s.test);
      me.stats = Tensor::zeros(dev, {2});
      me.eval_stats = Tensor::zeros(dev, {2});
      me.step = Tensor::zeros(dev, {1});
      me.deferred = DeferredSteps(dev);
      if (o_.overlap)
        me.comm = std::make_unique<CommWorker>(dev, [this, &me](int b) { reduce_bucket(me, b); });
    });
  }

  void check_batch(int64_t count) const override {
    PARALAB_REQUIRE(!ranks_.empty(), "data_parallel: check_batch() before setup()");
    check_shards(count, static_cast<int64_t>(ranks_.size()));
  }

  void check_plan(const Model& model, int devices, std::span<const int64_t> batches) override {
    (void)model;
    for (const int64_t count : batches) check_shards(count, devices);
  }

  void begin_epoch(std::span<const int32_t> order) override {
    run([&](int r) {
      Rank& me = ranks_[r];
      me.order = Tensor::from_host(group_->device(r), {static_cast<int64_t>(order.size())}, order);
    });
    ++epoch_;
  }

  StepResult train_step(int64_t offset, int64_t count, float lr) override {
    check_batch(count);
    const int k = static_cast<int>(ranks_.size());
    const std::vector<int64_t> shard = equal_segments(count, k);
    const auto t0 = Clock::now();
    run_step_falling_back(
        *group_, graphs_, capture_, [this](const auto& fn) { run(fn); },
        [&](int r, bool graphed) {
          Rank& me = ranks_[r];
          me.queued = false;
          if (graphed)
            graph_step(me, r, offset + shard[r], shard[r + 1] - shard[r], count, lr);
          else
            rank_step(me, me.order, offset + shard[r], shard[r + 1] - shard[r], count, lr,
                      offset + shard[r]);
        },
        [this](int r) {
          if (ranks_[r].comm) ranks_[r].comm->settle();
        });
    StepResult out;
    out.times.total_ms = ms_between(t0, Clock::now());
    out.samples = count;
    drop_graphs_if_capture_failed(ranks_, graphs_, capture_);
    if (first_local().queued) {  // every rank queued its launch: read at collect()
      out.pending = true;
      return out;
    }
    // Every rank's figures, wherever it ran (between processes, an allgather).
    struct Figures {
      double loss, forward_ms, backward_ms;
      int64_t correct;
      RankTimes times;
      bool replayed;
    };
    std::vector<Figures> all(static_cast<std::size_t>(k));
    for (int r : group_->local_ranks()) {
      const Rank& me = ranks_[r];
      all[r] = {me.loss, me.forward_ms, me.backward_ms, me.correct, me.times, me.graph.replayed()};
    }
    group_->share(all);
    for (const Figures& f : all) {
      out.loss_sum += f.loss;
      out.correct += f.correct;
      out.ranks.push_back(f.times);
    }
    const Figures& r0 = all[0];
    out.times.forward_ms = r0.forward_ms;
    out.times.backward_ms = r0.backward_ms;
    out.times.communication_ms = r0.times.communication_ms;
    out.times.optimizer_ms = r0.times.optimizer_ms;
    if (graphs_.empty()) out.detail = {{"cuda_graph_replay", r0.replayed ? 1 : 0}};
    return out;
  }

  // The queued steps (read_back "epoch"): each rank waits for its device once and reads its
  // steps' figures; a step's loss and correct count are the ranks' sums, its time the slowest
  // rank's (from the end of the step before on that rank's queue). The last of them, where it
  // was the graph's last launch, also gets every device's phases: the graph's marks hold that
  // launch's times.
  std::vector<StepResult> collect() override {
    return collect_queued_steps(
        ranks_, [this](const auto& fn) { run(fn); }, "data_parallel", [](StepResult&) {},
        [this](int r, const StepResult& last) {
          const std::vector<int64_t> shard =
              equal_segments(last.samples, static_cast<int64_t>(ranks_.size()));
          finish_step(ranks_[r], ranks_[r].graph.marks(), shard[r + 1] - shard[r]);
        },
        [this](const StepResult& last) {
          StepResult s = last;
          for (const Rank& me : ranks_) s.ranks.push_back(me.times);
          const Rank& r0 = ranks_[0];
          s.times.forward_ms = r0.forward_ms;
          s.times.backward_ms = r0.backward_ms;
          s.times.communication_ms = r0.times.communication_ms;
          s.times.optimizer_ms = r0.times.optimizer_ms;
          s.loss_sum = 0;
          s.correct = 0;
          for (const Rank& me : ranks_) {
            s.loss_sum += me.loss;
            s.correct += me.correct;
          }
          return s;
        });
  }

  EvalResult evaluate() override {
    run([&](int r) {
      Rank& me = ranks_[r];
      // In buffers of its own where the step may be a graph (apart_), which outlives it.
      const int slot = apart_ ? kEvalSlot : kGraphSlot;
      double loss = 0, correct = 0;
      for (int64_t a = test_bounds_[r]; a < test_bounds_[r + 1]; a += eval_batch_) {
        const int64_t n = std::min(eval_batch_, test_bounds_[r + 1] - a);
        Tensor& x = me.inputs.sized(me.device(), *model_, n, slot);
        Tensor& y = me.inputs.y[slot];
        me.device().ops().gather(me.data.test_x, me.data.test_y, me.data.test_order, a, n, x, y);
        me.model->forward(x, y, me.eval_stats, /*training=*/false, {}, slot);
        const auto st = me.eval_stats.to_host_f32();
        loss += st[0];
        correct += st[1];
      }
      // Sum the shards' counts with the group's own collective (exact: integers < 2^24).
      const std::vector<float> mine{static_cast<float>(loss), static_cast<float>(correct)};
      me.eval_stats.copy_from_host(mine);
      // Every rank done with its shard (and its allocations) before any queues the allreduce:
      // an NCCL kernel spinning on a peer that is still allocating is a known way to hang.
      me.transport->barrier();
      allreduce_->run(*me.transport, me.eval_stats);
      const auto total = me.eval_stats.to_host_f32();
      me.loss = total[0];
      me.correct = static_cast<int64_t>(total[1]);
    });
    EvalResult e;  // every rank holds the group's totals
    e.loss_sum = first_local().loss;
    e.correct = first_local().correct;
    e.samples = test_bounds_.back();
    return e;
  }

  std::vector<float> parameters() override { return first_local().model->params().to_host_f32(); }
  std::vector<float> gradients() override { return first_local().model->grads().to_host_f32(); }

  // Every rank's replica; under mpirun a collective (every rank calls it), each process
  // contributing its own.
  std::vector<std::vector<float>> replica_parameters() override {
    std::vector<std::vector<float>> all(ranks_.size());
    for (int r : group_->local_ranks()) all[r] = ranks_[r].model->params().to_host_f32();
    group_->share_lists(all);
    return all;
  }

  json options() const override {
    return {{"allreduce", o_.allreduce},
            {"grouping", o_.grouping},
            {"bucket_bytes", o_.bucket_bytes},
            {"buckets", buckets_.size()},
            {"overlap", o_.overlap},
            // "auto" until setup() resolves it for the group; then the bytes used (0: whole
            // messages).
            {"chunk_bytes", chunk_bytes_ >= 0 ? json(chunk_bytes_)
                            : o_.chunk_bytes  ? json(*o_.chunk_bytes)
                                              : json("auto")},
            {"uneven_shards", o_.uneven_shards},
            {"cuda_graphs", o_.cuda_graphs},
            {"read_back", o_.read_back}};
  }

  json report() const override {
    if (ranks_.empty()) return nullptr;
    json out = json::object();
    // Where the allreduce's steps moved whole (virtual devices of one GPU: one kernel per step).
    if (group_->moves_steps_whole()) out["step_moves"] = group_->step_moves();
    if (!o_.cuda_graphs) return out.empty() ? json(nullptr) : out;
    // Graphs made and launched: one per group capture (every rank's part is in it), one per
    // device otherwise.
    int64_t captures = 0, replays = 0;
    for (int r : group_->local_ranks()) {
      captures += ranks_[r].graph.captures();
      replays += ranks_[r].graph.replays();
      if (capture_) break;
    }
    report_graphs(out, graphs_, capture_.get(), static_cast<int>(ranks_.size()), captures, replays,
                  ranks_[group_->local_ranks().front()].graph.described());
    return out;
  }

 private:
  // A global batch of `count` examples cut into k shards (equal, unless uneven_shards).
  void check_shards(int64_t count, int64_t k) const {
    if (count < k)
      throw Error("data_parallel: a global batch of " + std::to_string(count) +
                  " cannot be split over " + std::to_string(k) + " devices");
    if (count % k != 0 && !o_.uneven_shards)
      throw Error("data_parallel: global batch " + std::to_string(count) + " is not divisible by " +
                  std::to_string(k) +
                  " devices (set \"uneven_shards\": true to allow shards that differ by one)");
  }

  struct Rank {
    Transport* transport = nullptr;
    std::unique_ptr<ModelReplica> model;
    std::unique_ptr<CommWorker> comm;
    DeviceData data;
    Tensor order, stats, eval_stats;
    SlotInputs inputs;  // each slot's input (PassSlot)
    double loss = 0, forward_ms = 0, backward_ms = 0;
    int64_t correct = 0;
    RankTimes times;
    // CUDA graphs: this rank's captured step (StepGraph; keyed by the global batch), and the
    // step's example indices and SGD step, set before each launch.
    StepGraph<StepMarks> graph;
    Tensor step_indices, step;
    // read_back "epoch": the launched steps' figures, read at collect(); queued: this step's.
    DeferredSteps deferred;
    bool queued = false;

    Device& device() const { return model->device(); }
  };

  void run(const std::function<void(int)>& fn) {
    group_->run([&](int r, Transport&) { fn(r); });
  }
  // Its state in this process (every rank's replica is the same).
  Rank& first_local() { return ranks_[static_cast<std::size_t>(group_->local_ranks().front())]; }

  void reduce_bucket(Rank& me, int b) {
    Tensor view = me.model->grads().view(buckets_[b].begin, {buckets_[b].end - buckets_[b].begin});
    allreduce_->run(*me.transport, view);
  }

  // Empty when every rank's whole step is captured as CUDA graphs; otherwise why not. NCCL's
  // allreduce is captured in each rank's own graph; the transport's algorithms make one rank's
  // stream wait on another's events, which only one capture over the whole group can hold
  // (capture_, where the devices can share one: virtual devices of one GPU, in one process).
  // With overlap the capture holds both streams of each device: the communication thread's
  // stream joins it by waiting on a bucket's event, and rejoins the compute stream through the
  // event the update waits on, so a replay runs the buckets' allreduces beside backward.
  std::string plan_graphs(const std::vector<Device*>& devices) {
    capture_.reset();
    if (!o_.cuda_graphs) return "cuda_graphs is false";
    for (const Device* d : devices)
      if (!d->supports_capture()) return d->name() + " cannot capture work (CUDA only)";
    if (model_->has_dropout()) return "the model's dropout masks change every step";
    if (o_.allreduce == "nccl") return "";
    return plan_group_graph("the " + o_.allreduce + " allreduce", *group_, devices, &capture_,
                            /*comm_streams=*/o_.overlap);
  }

  // The step captured once per run (StepGraph: a shorter batch runs eagerly in a slot of its
  // own), then replayed with its example indices and SGD step set before each launch (any lr): one
  // launch and one synchronisation per step, and the phases timed by the marks the capture took,
  // which every replay records again. Every rank decides alike (on the global batch), so that all
  // of them capture, or replay, together. With read_back "epoch" a launch (the capturing step's
  // too) is queued without waiting: the rank copies its loss and correct count to the step's slot
  // and marks the step's end on its queue (after the graph), and the step's figures are read at
  // collect(); its phases are not (a replay's marks are the last replay's: only the last queued
  // step's are read), its time is.
  void graph_step(Rank& me, int r, int64_t offset, int64_t count, int64_t global, float lr) {
    Device& dev = me.device();
    Transport& t = *me.transport;
    const auto next = me.graph.next(global);
    if (next == StepGraph<StepMarks>::Next::Apart) {  // another batch: eager, the graph kept
      rank_step(me, me.order, offset, count, global, lr, offset, kOtherSlot);
      return;
    }
    // A launch read once per epoch starts here on the device (its inputs' copy included).
    const bool defer = o_.read_back == "epoch" && next != StepGraph<StepMarks>::Next::Eager;
    const TimeMark start = defer ? dev.mark() : TimeMark{};
    copy_step_input(dev, me.step_indices, me.order, offset, count);
    if (next == StepGraph<StepMarks>::Next::Eager) {  // allocations, cuDNN's choices
      rank_step(me, me.step_indices, 0, count, global, lr, offset);
      return;
    }
    // A rank whose capture stops part-way wakes its peers and stops its communication thread
    // before it drops its part: the buckets it still holds fail at the aborted transport
    // instead of running eagerly once the capture has ended.
    const auto stop_rank = [this, &me] {
      group_->abort();
      return me.comm ? me.comm->settle() : std::string();
    };
    if (next == StepGraph<StepMarks>::Next::Capture &&
        !me.graph.capture(
            capture_.get(), r, t, dev,
            [&] { return enqueue_step(me, me.step_indices, 0, count, 0.0f, &me.step, offset); },
            stop_rank)) {
      rank_step(me, me.step_indices, 0, count, global, lr, offset);  // no graph: eagerly
      return;
    }
    const auto t0 =
        me.graph.launch(capture_.get(), r, t, dev, me.step, lr / static_cast<float>(global));
    if (defer) {
      me.deferred.save_stats(me.stats);
      QueuedStep q;
      q.start = start;
      q.end = dev.mark();
      // A step that captured counts the capture in its time, from its own start.
      q.from_previous = next != StepGraph<StepMarks>::Next::Capture;
      q.samples = count;
      q.detail = {{"cuda_graph_replay", 1}};
      me.deferred.add(std::move(q));
      me.queued = true;
      return;
    }
    // The transport's receive marks are the capture's: each launch recorded them again.
    finish_step(me, me.graph.marks(), count);
    me.times.bytes_sent = me.graph.bytes();
    t.barrier();
    me.times.total_ms = ms_between(t0, Clock::now());
  }

  // The marks of one rank's step, between its phases; read once the device has finished it.
  // order[offset, offset+count) are this rank's examples, which start at example_offset in the
  // epoch's order. The SGD step is `step` (a device scalar, read when the work runs: what a
  // graph replays) or else `lr_step`.
  StepMarks enqueue_step(Rank& me, const Tensor& order, int64_t offset, int64_t count,
                         float lr_step, const Tensor* step, int64_t example_offset,
                         int slot = kGraphSlot) {
    Device& dev = me.device();
    // Phases are timed with marks in the device's queue and one synchronisation at the end, so
    // the device never stops between them. With overlap the allreduces run on the device's
    // communication queue (a second thread queues them), timed by marks there.
    StepMarks m;
    m.start = dev.mark();
    Tensor& x = me.inputs.sized(dev, *model_, count, slot);
    Tensor& y = me.inputs.y[static_cast<std::size_t>(slot)];
    dev.ops().gather(me.data.train_x, me.data.train_y, order, offset, count, x, y);
    // Dropout keys: this shard's global position in the epoch's order.
    me.model->forward(x, y, me.stats, /*training=*/true,
                      {dropout_seed(seed_, epoch_), example_offset}, slot);
    m.forward_end = dev.mark();
    std::size_t next = 0;  // buckets go out in backward order
    auto on_ready = [&](int tensor) {
      while (next < buckets_.size() && tensor == buckets_[next].first)
        me.comm->push(static_cast<int>(next++), dev.record());
    };
    if (o_.overlap)
      me.model->backward(on_ready);
    else
      me.model->backward();
    m.backward_end = dev.mark();
    if (o_.overlap) {
      m.overlapped = me.comm->drain();
      dev.wait(m.overlapped.done);  // the update uses the reduced gradients
    } else {
      for (std::size_t b = 0; b < buckets_.size(); ++b) reduce_bucket(me, static_cast<int>(b));
    }
    m.communication_end = dev.mark();
    if (step)
      dev.ops().sgd(me.model->params(), me.model->grads(), *step);
    else
      dev.ops().sgd(me.model->params(), me.model->grads(), lr_step);
    m.end = dev.mark();
    return m;
  }

  // Waits for the step's work and reads its figures and phase times into the rank.
  void finish_step(Rank& me, const StepMarks& m, int64_t count) {
    Device& dev = me.device();
    dev.synchronize();
    const auto st = me.stats.to_host_f32();
    me.loss = st[0];
    me.correct = static_cast<int64_t>(st[1]);
    me.forward_ms = dev.elapsed_ms(m.start, m.forward_end);
    me.backward_ms = dev.elapsed_ms(m.forward_end, m.backward_end);
    me.times.compute_ms = dev.elapsed_ms(m.start, m.backward_end);
    me.times.exposed_communication_ms = dev.elapsed_ms(m.backward_end, m.communication_end);
    double comm_ms = 0;
    for (const auto& [a, b] : m.overlapped.marks) comm_ms += dev.elapsed_ms(a, b);
    me.times.communication_ms = o_.overlap ? comm_ms : me.times.exposed_communication_ms;
    me.times.optimizer_ms = dev.elapsed_ms(m.communication_end, m.end);
    me.times.bytes_sent = me.transport->bytes_sent();
    me.times.samples = count;
    take_receive_times(*me.transport, dev, me.times);
  }

  // One eager step: order[offset, offset+count) are this rank's examples, which start at
  // example_offset in the epoch's order; in the model's `slot`.
  void rank_step(Rank& me, const Tensor& order, int64_t offset, int64_t count, int64_t global,
                 float lr, int64_t example_offset, int slot = kGraphSlot) {
    Transport& t = *me.transport;
    // Launches queued before it (read_back "epoch") finish first: their time is not its own.
    if (!me.deferred.empty()) me.device().synchronize();
    // The barrier lines the ranks up so that every rank's times describe the same interval.
    t.barrier();
    t.reset_bytes_sent();
    t.reset_receive_times();
    const auto t0 = Clock::now();
    const StepMarks m = enqueue_step(me, order, offset, count, lr / static_cast<float>(global),
                                     nullptr, example_offset, slot);
    finish_step(me, m, count);
    t.barrier();
    me.times.total_ms = ms_between(t0, Clock::now());
  }

  Options o_;
  // Where steps can be graphs (apart_), passes run in three slots of the model (PassSlot), each
  // with its own input; otherwise everything runs in the first.
  bool apart_ = false;
  std::shared_ptr<const Model> model_;  // setup()'s, else the default (for options())
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  std::vector<Bucket> buckets_;
  std::unique_ptr<Allreduce> allreduce_;  // made by setup(), when the chunk size is known
  int64_t chunk_bytes_ = -1;              // resolved by setup()
  std::unique_ptr<SpmdGroup> group_;
  std::vector<Rank> ranks_;
  std::string graphs_ = "not set up";      // empty: the step is captured (CUDA graphs)
  std::unique_ptr<GroupCapture> capture_;  // one graph over the group (transport algorithms)
  std::vector<int64_t> test_bounds_;
  int64_t eval_batch_ = 1000;
};

// Reads the options with errors that name the descriptor path.
Options parse_options(const json& options, const std::string& path) {
  Options o;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw Error(path + "." + key + ": " + what);
  };
  for (const auto& [key, v] : options.items()) {
    if (key == "allreduce" || key == "grouping") {
      if (!v.is_string()) fail(key, "must be a string");
      (key == "allreduce" ? o.allreduce : o.grouping) = v.get<std::string>();
    } else if (key == "chunk_bytes") {
      if (v == "auto") {
        o.chunk_bytes.reset();
      } else {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            (v.get<int64_t>() > 0 && v.get<int64_t>() < 4))
          fail(key, "must be \"auto\", 0 (whole messages) or an integer >= 4");
        o.chunk_bytes = v.get<int64_t>();
      }
    } else if (key == "bucket_bytes") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(key, "must be an integer >= 0");
      o.bucket_bytes = v.get<int64_t>();
    } else if (key == "overlap" || key == "uneven_shards") {
      if (!v.is_boolean()) fail(key, "must be true or false");
      (key == "overlap" ? o.overlap : o.uneven_shards) = v.get<bool>();
    } else if (!read_step_option(path, key, v, o.cuda_graphs, o.read_back)) {
      fail(key,
           "unknown option for strategy 'data_parallel' (known: allreduce, grouping, "
           "bucket_bytes, overlap, chunk_bytes, uneven_shards, cuda_graphs, read_back)");
    }
  }
  if (o.grouping != "per_tensor" && o.grouping != "bucketed")
    fail("grouping", "unknown grouping '" + o.grouping + "' (known: bucketed, per_tensor)");
  try {
    make_allreduce(o.allreduce, {});
  } catch (const Error& e) {
    fail("allreduce", e.what());
  }
  return o;
}

}  // namespace

std::unique_ptr<Strategy> make_data_parallel(const json& options, const std::string& path) {
  return std::make_unique<DataParallel>(parse_options(options, path));
}

}  // namespace paralab
