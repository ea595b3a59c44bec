// A CPU device that captures its work as a CUDA device does, so that CUDA-graph paths run and are
// checked without a GPU: between the start and the end of a capture (its own, or its part of a
// group's) every op, copy, event record and wait, and time mark it is given is recorded instead
// of run; a replay runs the recorded work. A group's replay runs every device's recorded work in
// one pass and orders it only by the recorded events, scheduling adversarially (the last rank
// first, each as far as its waits allow), so that a missing event turns into wrong data, not
// into luck. What a CUDA capture forbids (a synchronisation, a copy to or from the host) is
// counted as a violation, and the work queued directly, outside captures and replays, is
// counted too: a replayed step must queue nothing but its inputs. A device has two queues, as a
// CUDA device has two streams: work from the thread that called bind_comm_thread() goes to its
// communication queue, the rest to its compute queue. In a capture the communication queue
// joins as a CUDA stream does (its first work must be a wait on an event recorded in the
// capture) and must rejoin the compute queue before the capture ends (its last work an event
// that the compute queue waits on); a replay runs it first wherever its waits allow.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "tests/test_util.h"

namespace paralab::testing {

class RecordingDevice final : public ForwardingDevice {
 public:
  // A recorded event: ids are unique across devices (a group's events cross them).
  struct RecordedEvent final : DeviceEvent {
    explicit RecordedEvent(int i) : id(i) {}
    int id;
  };
  // A time mark taken in a capture: the host clock when a replay reached it.
  struct Timer final : DeviceEvent {
    std::chrono::steady_clock::time_point at{};
    bool reached = false;
  };
  // The memory one capture's work points to (its tensors' bytes, its copies' ranges), kept
  // while any of its nodes is, i.e. while its graph lives.
  struct Refs {
    std::mutex mu;
    std::vector<std::pair<const char*, const char*>> ranges;
  };
  struct Node {
    enum Kind { Run, Record, Wait, Mark } kind = Run;
    std::function<void()> run;
    int event = 0;
    std::shared_ptr<Timer> timer;
    std::shared_ptr<Refs> refs;  // its capture's (add())
  };

  explicit RecordingDevice(Device& inner) : ForwardingDevice(inner), ops_(*this, inner.ops()) {}

  bool queues_work() const override { return true; }
  bool supports_capture() const override { return true; }
  Ops& ops() override { return ops_; }
  // -1: a device of its own memory; >= 0: devices sharing one memory, as virtual devices of one
  // GPU (what lets a fabric move whole steps, transport.h).
  int memory_domain() const override { return domain; }
  int domain = -1;

  // Runs fn now, or records it while capturing.
  void queue(std::function<void()> fn) {
    check_dropped();
    if (fail_eagerly_after && failed_in_capture > 0) throw Error(fail_in_capture);
    if (capturing_) {
      if (++captured_ops_ == fail_in_capture_at && !fail_in_capture.empty()) {
        ++failed_in_capture;
        if (std::atomic<bool>* invalid = group_invalid_) *invalid = true;
        throw Error(fail_in_capture);
      }
      add({Node::Run, std::move(fn), 0, nullptr, nullptr});
      return;
    }
    ++direct_ops;
    fn();
  }

  // The calling thread queues this device's communication from now on (its second queue).
  void bind_comm_thread() override {
    ForwardingDevice::bind_thread();
    comm_for_ = this;
  }

  // Counted (allocations): a step that replays a graph, or runs beside one, must allocate
  // nothing once its buffers exist (a buffer made anew would leave the graph with the old one).
  // A recorded graph holds pointers, not memory (its tensors are unowned(), as a CUDA graph's):
  // freeing memory that a living graph points to is a violation, as on a GPU the graph would
  // then write memory handed out again.
  void* allocate(std::size_t bytes) override {
    ++allocations;
    void* p = ForwardingDevice::allocate(bytes);
    std::lock_guard lock(memory_mu_);
    sizes_[p] = bytes;
    return p;
  }
  void deallocate(void* p) noexcept override {
    std::size_t n = 0;
    {
      std::lock_guard lock(memory_mu_);
      if (auto it = sizes_.find(p); it != sizes_.end()) {
        n = it->second;
        sizes_.erase(it);
      }
    }
    if (n && graph_points_into(static_cast<const char*>(p), n)) {
      try {
        violation("freed memory that a recorded graph still points to");
      } catch (...) {  // noexcept: the count is lost, the test fails on the bits then
      }
    }
    ForwardingDevice::deallocate(p);
  }
  // `t` for recorded work: unowned while capturing (its bytes noted as the capture's), else t.
  Tensor hold(const Tensor& t) {
    if (!capturing_ || !t.defined()) return t;
    note(t.raw(), t.bytes());
    return t.unowned();
  }

  void copy_on_device(void* d, const void* s, std::size_t n) override {
    note(d, n);
    note(s, n);
    queue([this, d, s, n] { ForwardingDevice::copy_on_device(d, s, n); });
  }
  void fill_zero(void* d, std::size_t n) override {
    note(d, n);
    queue([this, d, n] { ForwardingDevice::fill_zero(d, n); });
  }
  void copy_2d(void* d, std::size_t dp, const void* s, std::size_t sp, std::size_t w,
               std::size_t rows) override {
    if (rows) {
      note(d, dp * (rows - 1) + w);
      note(s, sp * (rows - 1) + w);
    }
    queue([=, this] { ForwardingDevice::copy_2d(d, dp, s, sp, w, rows); });
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override {
    if (capturing_) violation("copy_to_host");
    ++host_reads;
    ForwardingDevice::copy_to_host(d, s, n);
  }
  void copy_from_host(void* d, const void* s, std::size_t n) override {
    if (capturing_) violation("copy_from_host");
    ForwardingDevice::copy_from_host(d, s, n);
  }
  void synchronize() override {
    if (capturing_) violation("synchronize");
    ++synchronizations;
  }

  Event record() override {
    check_dropped();
    if (!capturing_) return nullptr;  // eager work is done when queued, as on the CPU
    auto e = std::make_shared<RecordedEvent>(++next_event());
    add({Node::Record, nullptr, e->id, nullptr, nullptr});
    return e;
  }
  void wait(const Event& event) override {
    check_dropped();
    if (!event) return;
    const auto* e = dynamic_cast<const RecordedEvent*>(event.get());
    if (!e) throw Error(name() + ": wait on an event of another backend");
    if (!capturing_) {
      violation("wait outside the capture on a captured event");
      return;
    }
    if (!ignore_waits) add({Node::Wait, nullptr, e->id, nullptr, nullptr});
  }
  TimeMark mark() override {
    check_dropped();
    if (!capturing_) return Device::mark();
    auto t = std::make_shared<Timer>();
    add({Node::Mark, nullptr, 0, t, nullptr});
    return {std::chrono::steady_clock::now(), t};
  }
  double elapsed_ms(const TimeMark& a, const TimeMark& b) override {
    const auto* ta = dynamic_cast<const Timer*>(a.event.get());
    const auto* tb = dynamic_cast<const Timer*>(b.event.get());
    if (!ta && !tb) return Device::elapsed_ms(a, b);
    if (!ta || !tb || !ta->reached || !tb->reached)
      throw Error(name() + ": elapsed_ms between marks no replay has reached");
    return std::chrono::duration<double, std::milli>(tb->at - ta->at).count();
  }

  // This device's own capture (one graph per device).
  void begin_capture() override {
    group_invalid_ = nullptr;
    start_capture();
  }
  std::unique_ptr<CapturedWork> end_capture() override {
    Queues queues = stop_capture();
    if (!fail_end_capture.empty()) {  // as a GPU that cannot make the graph: nothing ran
      ++failed_end_captures;
      throw CaptureFailed(fail_end_capture);
    }
    std::vector<RecordingDevice*> devices{this, this};
    std::vector<std::vector<Node>> lists{std::move(queues.compute), std::move(queues.comm)};
    return std::make_unique<Replay>(std::move(devices), std::move(lists));
  }
  void abort_capture() noexcept override {
    capturing_ = false;
    dropped_ = true;
    orphaned_ = false;
    group_invalid_ = nullptr;
    nodes_.clear();
    comm_nodes_.clear();
    refs_.reset();
  }

  std::unique_ptr<GroupCapture> capture_group(const std::vector<Device*>& group, bool comm_streams,
                                              bool group_moves, std::string* why_not) override;

  void start_capture() {
    PARALAB_REQUIRE(!capturing_, name() + ": a capture in a capture");
    nodes_.clear();
    comm_nodes_.clear();
    refs_ = std::make_shared<Refs>();
    captured_ops_ = 0;
    orphaned_ = false;
    {
      std::lock_guard lock(refs_mu_);
      std::erase_if(live_refs_, [](const std::weak_ptr<Refs>& w) { return w.expired(); });
      live_refs_.push_back(refs_);
    }
    capturing_ = true;
  }
  // A capture's work, per queue. Called once the communication queue's thread has queued all
  // of its part (the strategy waits for that before it ends its step).
  struct Queues {
    std::vector<Node> compute, comm;
  };
  Queues stop_capture() {
    capturing_ = false;
    group_invalid_ = nullptr;
    Queues q{std::exchange(nodes_, {}), std::exchange(comm_nodes_, {})};
    refs_.reset();  // its nodes keep it
    // CUDA ends a capture only when every stream that joined it has rejoined the origin
    // (cudaErrorStreamCaptureUnjoined): here, the communication queue's last work must be an
    // event that the compute queue waits on.
    if (!q.comm.empty()) {
      const Node& last = q.comm.back();
      const bool rejoined = last.kind == Node::Record &&
                            std::any_of(q.compute.begin(), q.compute.end(), [&](const Node& n) {
                              return n.kind == Node::Wait && n.event == last.event;
                            });
      if (!rejoined) violation("the communication queue's work does not rejoin the capture");
    }
    return q;
  }

  // Runs every device's recorded work, ordered only by its events (see the top of the file).
  static void replay(const std::vector<RecordingDevice*>& devices,
                     std::vector<std::vector<Node>>& lists) {
    std::set<int> recorded;
    std::vector<std::size_t> at(lists.size(), 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t r = lists.size(); r-- > 0;) {
        for (; at[r] < lists[r].size(); ++at[r], progress = true) {
          Node& n = lists[r][at[r]];
          if (n.kind == Node::Wait && !recorded.count(n.event)) break;
          if (n.kind == Node::Run) n.run();
          if (n.kind == Node::Record) recorded.insert(n.event);
          if (n.kind == Node::Mark) n.timer->at = std::chrono::steady_clock::now();
          if (n.kind == Node::Mark) n.timer->reached = true;
        }
      }
    }
    for (std::size_t r = 0; r < lists.size(); ++r)
      if (at[r] < lists[r].size())
        throw Error(devices[r]->name() + ": the replay waits on event e" +
                    std::to_string(lists[r][at[r]].event) + ", which nothing records before it");
  }

  // Queued outside captures (a replay runs the recorded calls themselves), from either queue.
  std::atomic<int> direct_ops{0};
  std::atomic<int> allocations{0};  // buffers allocated on this device (allocate)
  // The host's waits for the device and its reads from it (a step read at once has both).
  std::atomic<int> synchronizations{0}, host_reads{0};
  // Records no waits: a graph without the edges between devices (to show that a test catches it).
  bool ignore_waits = false;
  std::vector<std::string> violations;  // what a CUDA capture would have refused
  // Set on a group's first device: every group capture's end() fails on every rank with this
  // message (CaptureFailed), as a GPU that cannot make the graph does; counted per rank.
  std::string fail_group_end;
  std::atomic<int> failed_group_ends{0};
  // Set: every end_capture() of this device's own graph fails so (CaptureFailed); counted.
  std::string fail_end_capture;
  int failed_end_captures = 0;
  // Set: the fail_in_capture_at-th operation queued in each capture (from 1) throws Error with
  // this message, as a library call that a CUDA capture does not allow; work queued outside a
  // capture runs. Counted. With fail_eagerly_after, every operation queued after that failure
  // throws it too, in a capture or not: an error of the work itself, not of capturing it.
  std::string fail_in_capture;
  int fail_in_capture_at = 1;
  bool fail_eagerly_after = false;
  std::atomic<int> failed_in_capture{0};
  // What a device's work queued into a group's capture fails with once an operation of
  // another device has failed in it: as CUDA invalidates a whole capture (every stream joined to
  // it) at the first call it does not allow, and every later call on any of its streams fails.
  static constexpr const char* kInvalidated = "cuda: cudaErrorStreamCaptureInvalidated (simulated)";
  // The flag of the group's capture this device takes part in (RecordingGroupCapture), from its
  // begin() to this device's end or abort of its part; null otherwise.
  std::atomic<std::atomic<bool>*> group_invalid_{nullptr};
  // A group's origin (rank 0) ended the capture this device is part of: as CUDA's
  // cudaStreamEndCapture on the origin stream takes every joined stream out of capture, whatever
  // this device queues next would run at once, until its own rank drops its part (abort_capture).
  void orphan() {
    if (capturing_) orphaned_ = true;
  }
  // Operations queued into this device's latest capture, from either queue (so far, while one
  // is under way): where fail_in_capture_at can reach.
  int ops_in_capture() const { return captured_ops_; }

 private:
  class Replay final : public CapturedWork {
   public:
    Replay(std::vector<RecordingDevice*> devices, std::vector<std::vector<Node>> lists)
        : devices_(std::move(devices)), lists_(std::move(lists)) {}
    void launch() override { replay(devices_, lists_); }

   private:
    std::vector<RecordingDevice*> devices_;
    std::vector<std::vector<Node>> lists_;
  };

  static std::atomic<int>& next_event() {
    static std::atomic<int> n{0};
    return n;
  }
  void violation(const std::string& what) {
    std::lock_guard lock(mu_);
    violations.push_back(what);
  }
  // Notes [p, p + n) as memory the capture's work points to (while capturing).
  void note(const void* p, std::size_t n) {
    if (!capturing_ || !p || !n) return;
    const std::shared_ptr<Refs> refs = refs_;
    if (!refs) return;
    std::lock_guard lock(refs->mu);
    refs->ranges.emplace_back(static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }
  // Whether [p, p + n) overlaps memory that a living recorded graph of any recording device
  // points to (a group's graph reads its peers' buffers).
  static bool graph_points_into(const char* p, std::size_t n) {
    std::lock_guard lock(refs_mu_);
    for (const std::weak_ptr<Refs>& w : live_refs_) {
      const std::shared_ptr<Refs> refs = w.lock();
      if (!refs) continue;
      std::lock_guard hold(refs->mu);
      for (const auto& [a, b] : refs->ranges)
        if (a < p + n && p < b) return true;
    }
    return false;
  }
  // From the abort of a capture until the compute queue's thread queues again (the step run
  // eagerly instead): the communication queue's thread must not queue anything. Its rank stops
  // it before dropping its part (capture_step's stop_rank); on a GPU, what it queued after the
  // origin's end of the capture would run eagerly, in a step that is run again.
  void check_dropped() {
    if (comm_for_ != this)
      dropped_ = false;
    else if (dropped_)
      violation("the communication queue worked after its rank dropped its part of a capture");
  }
  // Appends to the calling thread's queue's capture. Each queue is fed by one thread.
  void add(Node n) {
    if (std::atomic<bool>* invalid = group_invalid_; invalid && *invalid)
      throw CaptureInvalidated(std::string(kInvalidated));
    if (orphaned_)
      violation(
          "queued work into a group's capture that its origin had ended: on a GPU it runs "
          "eagerly");
    n.refs = refs_;
    if (comm_for_ != this) {
      nodes_.push_back(std::move(n));
      return;
    }
    // A CUDA stream joins a capture by waiting on an event recorded in it; before that its work
    // runs at once, outside the graph.
    if (comm_nodes_.empty() && n.kind != Node::Wait)
      violation("the communication queue works in a capture before it waits on the capture");
    comm_nodes_.push_back(std::move(n));
  }

  // The ops, each call queued through the device (recorded while capturing). Tensors are
  // recorded unowned (hold()): the recorded call writes where the live tensor would, and, as a
  // graph keeps pointers and not memory, memory freed under it is seen (deallocate()).
  class RecordingOps final : public Ops {
   public:
    RecordingOps(RecordingDevice& d, Ops& inner) : d_(d), inner_(inner) {}

    // Queues op->backward(x, w, dy, dx, dw, db): ConvReluPool's and Linear's backward.
    template <typename Op>
    static void queue_backward(RecordingDevice& d, Op* op, const Tensor& x, const Tensor& w,
                               const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db) {
      std::optional<Tensor> dxc;
      if (dx) dxc = d.hold(*dx);
      d.queue(
          [op, x = d.hold(x), w = d.hold(w), dy = d.hold(dy), dxc, dw = d.hold(dw),
           db = d.hold(db)]() mutable { op->backward(x, w, dy, dxc ? &*dxc : nullptr, dw, db); });
    }
    nlohmann::json describe() const override { return inner_.describe(); }
    void forget_choices_since(const nlohmann::json& before) override {
      inner_.forget_choices_since(before);
    }

    std::unique_ptr<ConvReluPool> make_conv_relu_pool() override {
      struct Op final : ConvReluPool {
        Op(RecordingDevice& dev, std::unique_ptr<ConvReluPool> inner)
            : d(dev), in(std::move(inner)) {}
        void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                     bool training) override {
          d.queue([p = in.get(), x = d.hold(x), w = d.hold(w), b = d.hold(b), y = d.hold(y),
                   training]() mutable { p->forward(x, w, b, y, training); });
        }
        void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                      Tensor& db) override {
          queue_backward(d, in.get(), x, w, dy, dx, dw, db);
        }
        RecordingDevice& d;
        std::unique_ptr<ConvReluPool> in;
      };
      return std::make_unique<Op>(d_, inner_.make_conv_relu_pool());
    }
    std::unique_ptr<Relu> make_relu() override {
      struct Op final : Relu {
        Op(RecordingDevice& dev, std::unique_ptr<Relu> inner) : d(dev), in(std::move(inner)) {}
        void forward(const Tensor& x, Tensor& y) override {
          d.queue([p = in.get(), x = d.hold(x), y = d.hold(y)]() mutable { p->forward(x, y); });
        }
        void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
          d.queue([p = in.get(), y = d.hold(y), dy = d.hold(dy), dx = d.hold(dx)]() mutable {
            p->backward(y, dy, dx);
          });
        }
        RecordingDevice& d;
        std::unique_ptr<Relu> in;
      };
      return std::make_unique<Op>(d_, inner_.make_relu());
    }
    std::unique_ptr<Linear> make_linear() override { return wrap(inner_.make_linear()); }
    std::unique_ptr<Linear> make_linear_relu() override { return wrap(inner_.make_linear_relu()); }
    std::unique_ptr<SoftmaxXent> make_softmax_xent() override {
      struct Op final : SoftmaxXent {
        Op(RecordingDevice& dev, std::unique_ptr<SoftmaxXent> inner)
            : d(dev), in(std::move(inner)) {}
        void forward_backward(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                              Tensor& stats) override {
          std::optional<Tensor> dl;
          if (dlogits) dl = d.hold(*dlogits);
          d.queue([p = in.get(), logits = d.hold(logits), labels = d.hold(labels), dl,
                   stats = d.hold(stats)]() mutable {
            p->forward_backward(logits, labels, dl ? &*dl : nullptr, stats);
          });
        }
        RecordingDevice& d;
        std::unique_ptr<SoftmaxXent> in;
      };
      return std::make_unique<Op>(d_, inner_.make_softmax_xent());
    }
    // The model families LeNet does not use are not recorded: a capture of them is refused.
    std::unique_ptr<Conv2d> make_conv2d(const Conv2dParams& p) override {
      return refuse<Conv2d>("conv2d", p);
    }
    std::unique_ptr<Pool2d> make_pool2d(const Pool2dParams& p) override {
      return refuse<Pool2d>("pool2d", p);
    }
    std::unique_ptr<Dropout> make_dropout() override { return refuse<Dropout>("dropout"); }
    std::unique_ptr<Resize> make_resize(ResizeMode m) override {
      return refuse<Resize>("resize", m);
    }

    void sgd(Tensor& params, const Tensor& grads, float step) override {
      d_.queue([this, params = d_.hold(params), grads = d_.hold(grads), step]() mutable {
        inner_.sgd(params, grads, step);
      });
    }
    void sgd(Tensor& params, const Tensor& grads, const Tensor& step) override {
      d_.queue([this, params = d_.hold(params), grads = d_.hold(grads),
                step = d_.hold(step)]() mutable { inner_.sgd(params, grads, step); });
    }
    void set_scalar(Tensor& t, float value) override {
      d_.queue([this, t = d_.hold(t), value]() mutable { inner_.set_scalar(t, value); });
    }
    void set_scalars(Tensor& t, std::span<const float> values) override {
      d_.queue(
          [this, t = d_.hold(t), v = std::vector<float>(values.begin(), values.end())]() mutable {
            inner_.set_scalars(t, v);
          });
    }
    void add_inplace(Tensor& dst, const Tensor& src) override {
      d_.queue([this, dst = d_.hold(dst), src = d_.hold(src)]() mutable {
        inner_.add_inplace(dst, src);
      });
    }
    void gather(const Tensor& images, const Tensor& labels, const Tensor& indices, int64_t offset,
                int64_t count, Tensor& x, Tensor& y) override {
      d_.queue([this, images = d_.hold(images), labels = d_.hold(labels),
                indices = d_.hold(indices), offset, count, x = d_.hold(x),
                y = d_.hold(y)]() mutable {
        inner_.gather(images, labels, indices, offset, count, x, y);
      });
    }

   private:
    std::unique_ptr<Linear> wrap(std::unique_ptr<Linear> inner) {
      struct Op final : Linear {
        Op(RecordingDevice& dev, std::unique_ptr<Linear> inner) : d(dev), in(std::move(inner)) {}
        void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
          d.queue([p = in.get(), x = d.hold(x), w = d.hold(w), b = d.hold(b),
                   y = d.hold(y)]() mutable { p->forward(x, w, b, y); });
        }
        void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                      Tensor& db) override {
          queue_backward(d, in.get(), x, w, dy, dx, dw, db);
        }
        RecordingDevice& d;
        std::unique_ptr<Linear> in;
      };
      return std::make_unique<Op>(d_, std::move(inner));
    }
    template <typename T, typename... Args>
    std::unique_ptr<T> refuse(const char* what, Args&&...) {
      throw Error(std::string("RecordingDevice: ") + what + " is not recorded (LeNet's ops only)");
    }

    RecordingDevice& d_;
    Ops& inner_;
  };

  RecordingOps ops_;
  std::atomic<bool> capturing_{false};  // read by both queues' threads
  std::atomic<bool> orphaned_{false};   // orphan() to abort_capture() or start_capture()
  std::atomic<bool> dropped_{false};    // check_dropped()
  std::vector<Node> nodes_, comm_nodes_;
  std::shared_ptr<Refs> refs_;        // the capture's (start_capture() to its end)
  std::atomic<int> captured_ops_{0};  // operations queued in this capture so far
  inline static thread_local const RecordingDevice* comm_for_ = nullptr;  // bind_comm_thread()
  std::mutex mu_;
  std::mutex memory_mu_;                      // guards sizes_
  std::map<const void*, std::size_t> sizes_;  // live allocations' sizes
  // Every recording device's captures, while their graphs live (guarded by refs_mu_).
  inline static std::mutex refs_mu_;
  inline static std::vector<std::weak_ptr<Refs>> live_refs_;
};

// A group's capture over RecordingDevices: each rank records its own list; rank 0's thread
// replays them all at launch, between two barriers (the CPU runs the work when it is launched).
class RecordingGroupCapture final : public GroupCapture {
 public:
  explicit RecordingGroupCapture(std::vector<RecordingDevice*> devices)
      : devices_(std::move(devices)), lists_(devices_.size()), done_(devices_.size()) {}
  void begin(int rank, const GroupBarrier& barrier) override {
    if (rank == 0) invalid_ = false;  // nobody captures before the barrier
    barrier();
    devices_[static_cast<std::size_t>(rank)]->group_invalid_ = &invalid_;
    devices_[static_cast<std::size_t>(rank)]->start_capture();
  }
  void end(int rank, const GroupBarrier& barrier) override {
    RecordingDevice& d = *devices_[static_cast<std::size_t>(rank)];
    lists_[static_cast<std::size_t>(rank)] = d.stop_capture();
    barrier();
    if (const std::string& why = devices_.front()->fail_group_end; !why.empty()) {
      lists_[static_cast<std::size_t>(rank)] = {};
      ++d.failed_group_ends;
      throw CaptureFailed(why);
    }
    ++captures;
  }
  // Rank 0's thread ends the capture for every rank, as the CUDA origin stream's end does: once
  // every other rank has dropped its part (what one queued after that end would be a violation).
  void abort(int rank) noexcept override {
    if (rank != 0) {
      devices_[static_cast<std::size_t>(rank)]->abort_capture();
      aborts_.stopped(rank);
      return;
    }
    aborts_.wait_for_peers();
    devices_.front()->abort_capture();
    for (std::size_t r = 1; r < devices_.size(); ++r) devices_[r]->orphan();
  }
  // Every rank replays its own recorded work on its own thread, as its eager step runs it (when
  // the CPU ops borrowed oneDNN's scratch memory per thread, replaying rank r's convolutions on
  // rank 0's thread overflowed it; they keep their own now, core/cpu/cpu_ops.h), one rank at a
  // time: the rank holding the baton runs until its next wait on an event nobody has
  // recorded yet, or its end, then hands it to the next rank down (the last rank starts). A
  // rank runs its communication queue first, as far as its waits allow, then its compute
  // queue, and again while either moves. A wait that can never be met is an Error on every
  // rank.
  void launch(int rank, const GroupBarrier& barrier) override {
    barrier();
    if (rank == 0) {
      recorded_.clear();
      done_.assign(devices_.size(), false);
      turn_ = static_cast<int>(devices_.size()) - 1;
      idle_ = 0;
      stuck_.clear();
    }
    barrier();
    replay_part(rank);
    barrier();
  }
  nlohmann::json describe() const override { return {{"recorded", true}}; }
  std::atomic<int> captures{0};  // per rank: k per group capture

 private:
  void replay_part(int rank) {
    const int k = static_cast<int>(devices_.size());
    auto& queues = lists_[static_cast<std::size_t>(rank)];
    std::vector<RecordingDevice::Node>* lists[] = {&queues.comm, &queues.compute};
    std::size_t at[] = {0, 0};
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return turn_ == rank || !stuck_.empty(); });
      if (!stuck_.empty()) throw Error(stuck_);
      bool progressed = false;
      for (bool moved = true; moved;) {
        moved = false;
        for (int q = 0; q < 2; ++q) {
          auto& list = *lists[q];
          for (; at[q] < list.size(); ++at[q], moved = progressed = true) {
            RecordingDevice::Node& n = list[at[q]];
            if (n.kind == RecordingDevice::Node::Wait && !recorded_.count(n.event)) break;
            if (n.kind == RecordingDevice::Node::Record) recorded_.insert(n.event);
            if (n.kind == RecordingDevice::Node::Mark) {
              n.timer->at = std::chrono::steady_clock::now();
              n.timer->reached = true;
            }
            if (n.kind == RecordingDevice::Node::Run) {
              lock.unlock();
              n.run();
              lock.lock();
            }
          }
        }
      }
      done_[static_cast<std::size_t>(rank)] =
          at[0] == lists[0]->size() && at[1] == lists[1]->size();
      idle_ = progressed ? 0 : idle_ + 1;
      if (std::all_of(done_.begin(), done_.end(), [](bool d) { return d; })) {
        cv_.notify_all();
        return;
      }
      if (idle_ > k) {
        const int q = at[1] < lists[1]->size() ? 1 : 0;
        stuck_ = devices_[static_cast<std::size_t>(rank)]->name() +
                 ": the replay waits on event e" + std::to_string((*lists[q])[at[q]].event) +
                 ", which nothing records before it";
        cv_.notify_all();
        throw Error(stuck_);
      }
      int next = rank;
      do next = (next - 1 + k) % k;
      while (done_[static_cast<std::size_t>(next)]);
      turn_ = next;
      cv_.notify_all();
      if (done_[static_cast<std::size_t>(rank)]) return;
    }
  }

  std::vector<RecordingDevice*> devices_;
  GroupAbortGate aborts_{static_cast<int>(devices_.size())};  // declared after devices_
  std::atomic<bool> invalid_{false};  // an operation of a rank failed in this capture
  std::vector<RecordingDevice::Queues> lists_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int> recorded_;
  std::vector<bool> done_;
  int turn_ = 0, idle_ = 0;
  std::string stuck_;
};

inline std::unique_ptr<GroupCapture> RecordingDevice::capture_group(
    const std::vector<Device*>& group, bool comm_streams, bool group_moves, std::string* why_not) {
  (void)comm_streams;  // a recording device always has its second queue
  (void)group_moves;   // and moves each message on its receiver's queue (no group mover)
  std::vector<RecordingDevice*> devices;
  for (Device* d : group) {
    auto* r = dynamic_cast<RecordingDevice*>(d);
    if (!r) {
      if (why_not) *why_not = d->name() + " does not record";
      return nullptr;
    }
    devices.push_back(r);
  }
  return std::make_unique<RecordingGroupCapture>(std::move(devices));
}

}  // namespace paralab::testing
