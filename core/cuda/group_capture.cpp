// One CUDA graph for a multi-device step over virtual devices of one GPU (GroupCapture in
// core/device.h).
//
// How the capture spans the devices: rank 0 begins a capture on its compute stream and records
// a fork event there; every other rank's stream waits on that event, which joins it to the same
// capture (a stream that waits on an event recorded in a capturing stream joins that capture).
// Each rank then queues its step from its own thread as it does eagerly. The transport's
// hand-offs are events recorded on one rank's stream and waited on by another's: inside one
// capture they become edges of the graph, so the graph holds every rank's work and the order
// between ranks, and a replay does no host work per message. At the end every other rank
// records a join event, rank 0's stream waits on all of them (a capture must rejoin its origin
// stream before it ends), and rank 0 ends the capture and instantiates the graph.
//
// A replay is launched once, on rank 0's stream, after a wait for every rank's earlier work
// (an event each); every rank's stream then waits for the launch's end, so that its later work
// (reading the step's figures, evaluation) follows the graph.
//
// Before a strategy relies on it, probe() captures, launches and checks a small graph of the
// same shape from a thread per device; where that fails the strategies run eagerly and say why.
//
// Each kernel node keeps the context it was captured in; describe() reports how many of the
// graph's kernels run in each device's own context (its green context, i.e. its SM share), the
// check that a graph over virtual devices still models k smaller GPUs.
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/graph_census.h"
#include "core/cuda/step_trace.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace paralab::cuda {

namespace {

cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  PARALAB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// A barrier for probe()'s threads that a failing thread opens for good (an Error in the others),
// so that none waits forever for it.
class ProbeBarrier {
 public:
  explicit ProbeBarrier(int parties) : parties_(parties) {}
  void arrive_and_wait() {
    std::unique_lock lock(mu_);
    if (failed_) throw Error("another device failed");
    const uint64_t gen = gen_;
    if (++count_ == parties_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen_ != gen || failed_; });
    if (gen_ == gen) throw Error("another device failed");
  }
  void fail() {
    std::lock_guard lock(mu_);
    failed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_, count_ = 0;
  uint64_t gen_ = 0;
  bool failed_ = false;
};

class CudaGroupCapture final : public GroupCapture {
 public:
  explicit CudaGroupCapture(std::vector<CudaDevice*> devices)
      : devices_(std::move(devices)), holds_(devices_.size()) {
    devices_[0]->bind_thread();
    fork_ = make_event();
    post_ = make_event();
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      joins_.push_back(make_event());
      pre_.push_back(make_event());
    }
  }

  ~CudaGroupCapture() override {
    drop_graph();
    for (cudaEvent_t e : joins_) cudaEventDestroy(e);
    for (cudaEvent_t e : pre_) cudaEventDestroy(e);
    if (fork_) cudaEventDestroy(fork_);
    if (post_) cudaEventDestroy(post_);
  }

  void begin(int rank, const GroupBarrier& barrier) override {
    CudaDevice& d = device(rank);
    if (rank == 0) {
      drop_graph();
      failure_.clear();
      d.begin_capture();
      PARALAB_CUDA(cudaEventRecord(fork_, d.compute_stream()));
    }
    barrier();
    if (rank != 0) d.join_capture(fork_);
    // Every stream joined before any rank queues work: a rank's first operation could
    // otherwise invalidate the capture before a peer joined it, and that peer would fail to join
    // with an error of its own in place of the operation's.
    barrier();
  }

  void end(int rank, const GroupBarrier& barrier) override {
    CudaDevice& d = device(rank);
    const auto r = static_cast<std::size_t>(rank);
    if (rank != 0 && cudaEventRecord(joins_[r], d.compute_stream()) != cudaSuccess)
      note_failure(d.name() + ": cudaEventRecord of its join event");
    barrier();
    if (rank == 0) finish(d);
    barrier();
    // Only now, with the capture ended by rank 0: a block this device frees before that (from
    // any thread) is still captured work's memory, not the cache's.
    if (rank != 0) holds_[r] = d.finish_capture();
    if (!failure_.empty()) {
      d.restore(std::move(holds_[r]));
      throw CaptureFailed("cuda graph over " + std::to_string(devices_.size()) +
                          " devices: " + failure_);
    }
  }

  // Only the origin's thread can end the capture (it began it in thread-local mode), and its end
  // takes every joined stream out of capture: it waits until no rank queues into it any more.
  void abort(int rank) noexcept override {
    CudaDevice& d = device(rank);
    if (rank == 0) {
      aborts_.wait_for_peers();
      d.abort_capture();
    } else {
      d.cancel_capture();
      aborts_.stopped(rank);
    }
  }

  void launch(int rank, const GroupBarrier& barrier) override {
    CudaDevice& d = device(rank);
    const auto r = static_cast<std::size_t>(rank);
    if (rank != 0) PARALAB_CUDA(cudaEventRecord(pre_[r], d.compute_stream()));
    barrier();
    if (rank == 0) {
      PARALAB_REQUIRE(exec_ != nullptr, "cuda graph over devices: launch() before a capture");
      const cudaStream_t s = d.compute_stream();
      for (std::size_t p = 1; p < devices_.size(); ++p)
        PARALAB_CUDA(cudaStreamWaitEvent(s, pre_[p], 0));
      step_trace_before_launch();
      PARALAB_CUDA(cudaGraphLaunch(exec_, s));
      step_trace_after_launch(s);
      PARALAB_CUDA(cudaEventRecord(post_, s));
    }
    barrier();
    if (rank != 0) PARALAB_CUDA(cudaStreamWaitEvent(d.compute_stream(), post_, 0));
  }

  nlohmann::json describe() const override { return described_; }

  // A trial capture over the group before any strategy relies on one: a thread per device, each
  // adding its buffer and then its neighbour's into a result (the neighbour's read ordered by an
  // event, as the transport's hand-offs are) and copying the result, between two timing marks
  // (a step's kinds of node: kernels, event waits, memcpy, external event records), captured,
  // launched once and checked, the marks read as a step's are. With comm_streams each rank's
  // part also has a communication thread's (data_parallel's overlap): on the device's
  // communication stream it waits for the rank's event, adds its buffer into a third one between
  // two marks and records the event the rank's stream then waits on. With group_moves the
  // transport's mover of whole collective steps (group_mover.cpp) joins it as the transport
  // runs it: rank 0's thread queues two phases of moves over every rank's buffers after every
  // rank's event (a copy, then an add of the next rank's input), timed, and each rank waits for
  // their end. "" when it works; otherwise what failed, so that the caller runs eagerly and
  // says why instead of failing every multi-device run on a driver or GPU that cannot hold such
  // a graph.
  std::string probe(bool comm_streams, bool group_moves) {
    const int k = static_cast<int>(devices_.size());
    const int64_t n = 256;
    std::vector<Tensor> in(devices_.size()), out(devices_.size()), copy(devices_.size()),
        side(devices_.size()), moved(devices_.size());
    std::vector<Event> ready(devices_.size());
    std::vector<std::pair<TimeMark, TimeMark>> marks(devices_.size()), side_marks(devices_.size());
    std::vector<std::string> errors(devices_.size());
    std::unique_ptr<GroupMover> mover;
    std::vector<GroupMove> moves;
    GroupMover::Done moves_done;  // set by rank 0's thread before a barrier, read after it
    ProbeBarrier gate(k);
    try {
      for (int r = 0; r < k; ++r) {
        CudaDevice& d = *devices_[static_cast<std::size_t>(r)];
        d.bind_thread();
        in[r] = Tensor::from_host(d, {n}, std::vector<float>(n, static_cast<float>(r + 1)));
        out[r] = Tensor::zeros(d, {n});
        copy[r] = Tensor::zeros(d, {n});
        side[r] = Tensor::zeros(d, {n});
        moved[r] = Tensor::zeros(d, {n});
        d.ops().add_inplace(out[r], in[r]);  // the kernels loaded, the cache warm
        d.synchronize();
        d.fill_zero(out[r].raw(), out[r].bytes());
      }
      if (group_moves) {
        std::string why;
        mover = devices_[0]->group_mover({devices_.begin(), devices_.end()}, &why);
        if (!mover) return "the group's mover of collective steps: " + why;
        for (int phase = 0; phase < 2; ++phase)
          for (int r = 0; r < k; ++r) {
            GroupMove m;
            m.dst = moved[r].f32();
            m.src[0] = (phase == 0 ? in[r] : in[(r + 1) % k]).f32();
            m.floats = n;
            m.reduce = phase == 1;  // phase 0 copies, phase 1 adds
            m.phase = phase;
            moves.push_back(m);
          }
        // Once eagerly: the mover's kernel loaded, and working, before the capture needs it.
        const GroupMover::Done warm = mover->run(moves, {}, /*timed=*/false);
        devices_[0]->wait(warm.done);
        devices_[0]->synchronize();
      }
    } catch (const std::exception& e) {
      return std::string("setting it up: ") + e.what();
    }
    const auto run_rank = [&](int r) {
      const auto at = static_cast<std::size_t>(r);
      CudaDevice& d = *devices_[at];
      const GroupBarrier barrier = [&gate] { gate.arrive_and_wait(); };
      try {
        d.bind_thread();
        try {
          begin(r, barrier);
          marks[at].first = d.mark();  // timing events recorded in the capture, as steps do
          d.ops().add_inplace(out[r], in[r]);
          ready[at] = d.record();
          std::optional<SidePart> side_work;
          if (comm_streams) side_work.emplace(d, ready[at], side[r], in[r], side_marks[at]);
          barrier();  // every rank's event recorded before any waits on one
          if (mover) {
            if (r == 0) moves_done = mover->run(moves, ready, /*timed=*/true);
            barrier();  // the moves queued before any rank waits for their end
            d.wait(moves_done.done);
          }
          d.wait(ready[static_cast<std::size_t>((r + 1) % k)]);
          d.ops().add_inplace(out[r], in[(r + 1) % k]);
          d.copy_on_device(copy[r].raw(), out[r].raw(), out[r].bytes());  // a memcpy node
          if (side_work) d.wait(side_work->finish());
          marks[at].second = d.mark();
          end(r, barrier);
        } catch (...) {
          gate.fail();  // before abort(): the origin's waits for every rank's
          abort(r);
          throw;
        }
        launch(r, barrier);
        d.synchronize();
        const float want = static_cast<float>(r + 1 + (r + 1) % k + 1);
        for (const Tensor* t : {&out[r], &copy[r]})
          for (float v : t->to_host_f32())
            if (v != want)
              throw Error(d.name() + (t == &copy[r] ? " copied " : " computed ") +
                          std::to_string(v) + ", not " + std::to_string(want));
        if (comm_streams)
          for (float v : side[r].to_host_f32())
            if (v != static_cast<float>(r + 1))
              throw Error(d.name() + "'s communication stream computed " + std::to_string(v) +
                          ", not " + std::to_string(r + 1));
        if (mover) {
          for (float v : moved[r].to_host_f32())
            if (v != want)
              throw Error("the group's moves left " + std::to_string(v) + " on " + d.name() +
                          ", not " + std::to_string(want));
          const double ms = d.elapsed_ms(moves_done.can_move, moves_done.moved);
          if (!(ms >= 0.0))
            throw Error("the group's moves' marks read " + std::to_string(ms) +
                        " ms after a launch");
        }
        for (const auto* m : {&marks[at], &side_marks[at]}) {
          if (m == &side_marks[at] && !comm_streams) continue;
          const double ms = d.elapsed_ms(m->first, m->second);
          if (!(ms >= 0.0))
            throw Error(d.name() + ": its " + (m == &marks[at] ? "" : "communication stream's ") +
                        "marks read " + std::to_string(ms) + " ms after a launch");
        }
      } catch (const std::exception& e) {
        errors[at] = e.what();
        gate.fail();
      }
    };
    std::vector<std::thread> threads;
    std::string unstarted;  // a rank whose thread the system refused; the started ones are released
    for (int r = 0; r < k && unstarted.empty(); ++r) {
      try {
        threads.emplace_back(run_rank, r);
      } catch (const std::system_error& e) {
        unstarted = "could not start the thread of rank " + std::to_string(r) + ": " + e.what();
        for (int u = std::max(r, 1); u < k; ++u) aborts_.stopped(u);  // none of them queues
        gate.fail();
      }
    }
    for (auto& t : threads) t.join();
    drop_graph();
    if (!unstarted.empty()) return unstarted;
    for (const std::string& e : errors)
      if (!e.empty()) return e;
    return "";
  }

 private:
  // probe()'s communication part of a rank on device d, as data_parallel's overlap queues a
  // bucket: from a thread of its own bound to d's communication stream, started when the rank's
  // event is recorded and queuing while the rank's thread queues the rest of its part (two
  // threads on one device, and one green context, at once). finish() joins it and returns the
  // event the rank's stream must wait on to rejoin it.
  class SidePart {
   public:
    SidePart(CudaDevice& d, const Event& ready, Tensor& side, const Tensor& in,
             std::pair<TimeMark, TimeMark>& marks)
        : thread_([&d, ready, &side, &in, &marks, this] {
            try {
              d.bind_comm_thread();
              d.wait(ready);  // joins the capture
              marks.first = d.mark();
              d.ops().add_inplace(side, in);
              marks.second = d.mark();
              done_ = d.record();
            } catch (...) {
              failed_ = std::current_exception();
            }
          }) {}
    ~SidePart() {
      if (thread_.joinable()) thread_.join();
    }
    SidePart(const SidePart&) = delete;
    SidePart& operator=(const SidePart&) = delete;
    Event finish() {
      thread_.join();
      if (failed_) std::rethrow_exception(failed_);
      return done_;
    }

   private:
    Event done_;
    std::exception_ptr failed_;
    std::thread thread_;  // last: starts once the rest exists
  };

  CudaDevice& device(int rank) const {
    PARALAB_REQUIRE(rank >= 0 && rank < static_cast<int>(devices_.size()),
                    "cuda graph over devices: no rank " + std::to_string(rank));
    return *devices_[static_cast<std::size_t>(rank)];
  }

  // Called on the thread whose CUDA call failed: its last-error slot is cleared too, so that
  // the next check on that thread does not report this failure as its own.
  void note_failure(const std::string& what) {
    (void)cudaGetLastError();
    std::lock_guard lock(mu_);
    if (failure_.empty()) failure_ = what;
  }

  // Rank 0, between the two barriers of end(): every other rank has recorded its join event.
  void finish(CudaDevice& d) {
    const cudaStream_t s = d.compute_stream();
    for (std::size_t p = 1; p < devices_.size() && failure_.empty(); ++p)
      if (cudaStreamWaitEvent(s, joins_[p], 0) != cudaSuccess)
        note_failure("cudaStreamWaitEvent on rank " + std::to_string(p) + "'s join event");
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    holds_[0] = d.finish_capture();
    if (ended != cudaSuccess) {
      cudaGetLastError();
      note_failure(std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended));
    }
    if (failure_.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
      if (made != cudaSuccess) {
        cudaGetLastError();
        exec_ = nullptr;
        note_failure(std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made));
      } else {
        described_ = contexts(graph);
        described_["census"] = graph_census_of(graph);
      }
    }
    if (graph) cudaGraphDestroy(graph);
  }

  // How many of the graph's kernel nodes run in each device's own context (its SM share's green
  // context), how many in none of them, and how many do not say: a node made from a CUfunction
  // (as libraries launch theirs) may report no context, since "this field is ignored if func is
  // set" (cuda.h, CUDA_KERNEL_NODE_PARAMS_v2::ctx).
  nlohmann::json contexts(cudaGraph_t graph) const {
    std::string why;
    std::vector<std::string> names;
    const std::vector<CUcontext> kernels = kernel_contexts(graph, &why, &names);
    if (!why.empty()) return {{"kernel_contexts", "unknown: " + why}};
    std::vector<CUcontext> own;
    for (const CudaDevice* d : devices_) {
      own.push_back(work_context(d->sm_share(), d->compute_stream(), &why));
      if (!why.empty()) return {{"kernel_contexts", "unknown: " + why}};
    }
    // The transport's whole collective steps (group_mover.cpp) run on the whole GPU by design,
    // for all ranks at once: counted apart, by name, whichever context they report (a device
    // without an SM share runs in the GPU's own context too).
    std::vector<char> step(kernels.size(), 0);
    std::size_t steps = 0;
    for (std::size_t i = 0; i < kernels.size() && i < names.size(); ++i) {
      step[i] = names[i].find("group_moves_k") != std::string::npos;
      steps += step[i] ? 1 : 0;
    }
    nlohmann::json per_device = nlohmann::json::array();
    std::size_t matched = 0, unknown = 0;
    for (std::size_t i = 0; i < kernels.size(); ++i) unknown += !step[i] && !kernels[i] ? 1 : 0;
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      int64_t n = 0;
      for (std::size_t i = 0; i < kernels.size(); ++i)
        n += !step[i] && kernels[i] == own[r] ? 1 : 0;
      // Devices without an SM share all run in the GPU's context: counted once, on the first.
      bool shared = false;
      for (std::size_t q = 0; q < r; ++q) shared = shared || own[q] == own[r];
      if (!shared) matched += static_cast<std::size_t>(n);
      nlohmann::json entry = {{"device", devices_[r]->name()}, {"kernels", nullptr}};
      if (!shared) entry["kernels"] = n;
      per_device.push_back(std::move(entry));
    }
    // The kernels outside every device's context, by name: which launches escape the SM shares.
    std::map<std::string, int64_t> outside;
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      if (step[i] || kernels[i] == nullptr ||
          std::find(own.begin(), own.end(), kernels[i]) != own.end())
        continue;
      const std::string& name = i < names.size() && !names[i].empty() ? names[i] : "(unnamed)";
      ++outside[name.substr(0, 120)];
    }
    return {{"kernel_nodes", kernels.size()},
            {"kernels_per_device_context", per_device},
            {"kernels_in_no_device_context", kernels.size() - matched - unknown - steps},
            {"kernels_in_no_device_context_by_name", outside},
            {"collective_step_kernels_on_the_whole_gpu", steps},
            {"kernels_context_unknown", unknown}};
  }

  void drop_graph() noexcept {
    if (exec_ && cudaGraphExecDestroy(exec_) != cudaSuccess)
      log_error("cudaGraphExecDestroy failed");
    exec_ = nullptr;
    for (std::size_t r = 0; r < devices_.size(); ++r) devices_[r]->restore(std::move(holds_[r]));
    holds_.assign(devices_.size(), {});
    described_ = nullptr;
  }

  std::vector<CudaDevice*> devices_;
  cudaEvent_t fork_ = nullptr, post_ = nullptr;
  std::vector<cudaEvent_t> joins_, pre_;
  cudaGraphExec_t exec_ = nullptr;
  // Per device: the blocks freed during the capture, which every replay still uses, and its
  // marks' events, which every replay records; back to the device when the graph goes
  // (drop_graph).
  std::vector<CudaDevice::CaptureHold> holds_;
  GroupAbortGate aborts_{static_cast<int>(devices_.size())};  // declared after devices_
  std::mutex mu_;
  std::string failure_;
  nlohmann::json described_;
};

}  // namespace

std::unique_ptr<GroupCapture> CudaDevice::capture_group(const std::vector<Device*>& group,
                                                        bool comm_streams, bool group_moves,
                                                        std::string* why_not) {
  std::vector<CudaDevice*> devices;
  for (Device* d : group) {
    auto* c = dynamic_cast<CudaDevice*>(d);
    if (!c) {
      if (why_not) *why_not = d->name() + " is not a CUDA device";
      return nullptr;
    }
    if (c->gpu() != gpu_) {
      if (why_not)
        *why_not =
            "the devices are on different GPUs (one graph over several GPUs is not built; "
            "virtual devices of one GPU share one)";
      return nullptr;
    }
    devices.push_back(c);
  }
  PARALAB_REQUIRE(!devices.empty() && devices[0] == this,
                  name() + ": capture_group() of a group it does not lead");
  auto capture = std::make_unique<CudaGroupCapture>(std::move(devices));
  if (const std::string why = capture->probe(comm_streams, group_moves); !why.empty()) {
    if (why_not) *why_not = "a trial graph over the group failed (" + why + ")";
    return nullptr;
  }
  return capture;
}

}  // namespace paralab::cuda
