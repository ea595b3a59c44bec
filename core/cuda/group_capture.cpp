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
// Each kernel node keeps the context it was captured in; describe() reports how many of the
// graph's kernels run in each device's own context (its green context, i.e. its SM share), the
// check that a graph over virtual devices still models k smaller GPUs.
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/error.h"

namespace paralab::cuda {

namespace {

cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  PARALAB_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

class CudaGroupCapture final : public GroupCapture {
 public:
  explicit CudaGroupCapture(std::vector<CudaDevice*> devices)
      : devices_(std::move(devices)), blocks_(devices_.size()) {
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
  }

  void end(int rank, const GroupBarrier& barrier) override {
    CudaDevice& d = device(rank);
    const auto r = static_cast<std::size_t>(rank);
    if (rank != 0) {
      const cudaError_t joined = cudaEventRecord(joins_[r], d.compute_stream());
      blocks_[r] = d.finish_capture();
      if (joined != cudaSuccess) note_failure(d.name() + ": cudaEventRecord of its join event");
    }
    barrier();
    if (rank == 0) finish(d);
    barrier();
    if (!failure_.empty()) {
      d.restore(std::move(blocks_[r]));
      throw Error("cuda graph over " + std::to_string(devices_.size()) + " devices: " + failure_);
    }
  }

  void abort(int rank) noexcept override {
    CudaDevice& d = device(rank);
    // Only the origin's thread can end the capture; ending it ends every joined stream's part.
    if (rank == 0)
      d.abort_capture();
    else
      d.cancel_capture();
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
      PARALAB_CUDA(cudaGraphLaunch(exec_, s));
      PARALAB_CUDA(cudaEventRecord(post_, s));
    }
    barrier();
    if (rank != 0) PARALAB_CUDA(cudaStreamWaitEvent(d.compute_stream(), post_, 0));
  }

  nlohmann::json describe() const override { return described_; }

 private:
  CudaDevice& device(int rank) const {
    PARALAB_REQUIRE(rank >= 0 && rank < static_cast<int>(devices_.size()),
                    "cuda graph over devices: no rank " + std::to_string(rank));
    return *devices_[static_cast<std::size_t>(rank)];
  }

  void note_failure(const std::string& what) {
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
    blocks_[0] = d.finish_capture();
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
      }
    }
    if (graph) cudaGraphDestroy(graph);
  }

  // How many of the graph's kernel nodes run in each device's own context (its SM share's green
  // context), and how many in none of them.
  nlohmann::json contexts(cudaGraph_t graph) const {
    std::string why;
    const std::vector<CUcontext> kernels = kernel_contexts(graph, &why);
    if (!why.empty()) return {{"kernel_contexts", "unknown: " + why}};
    std::vector<CUcontext> own;
    for (const CudaDevice* d : devices_) {
      own.push_back(work_context(d->sm_share(), d->compute_stream(), &why));
      if (!why.empty()) return {{"kernel_contexts", "unknown: " + why}};
    }
    nlohmann::json per_device = nlohmann::json::array();
    std::size_t matched = 0;
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      int64_t n = 0;
      for (CUcontext c : kernels) n += c == own[r] ? 1 : 0;
      // Devices without an SM share all run in the GPU's context: counted once, on the first.
      bool shared = false;
      for (std::size_t q = 0; q < r; ++q) shared = shared || own[q] == own[r];
      if (!shared) matched += static_cast<std::size_t>(n);
      nlohmann::json entry = {{"device", devices_[r]->name()}, {"kernels", nullptr}};
      if (!shared) entry["kernels"] = n;
      per_device.push_back(std::move(entry));
    }
    return {{"kernel_nodes", kernels.size()},
            {"kernels_per_device_context", per_device},
            {"kernels_in_no_device_context", kernels.size() - matched}};
  }

  void drop_graph() noexcept {
    if (exec_ && cudaGraphExecDestroy(exec_) != cudaSuccess)
      log_error("cudaGraphExecDestroy failed");
    exec_ = nullptr;
    for (std::size_t r = 0; r < devices_.size(); ++r) devices_[r]->restore(std::move(blocks_[r]));
    blocks_.assign(devices_.size(), {});
    described_ = nullptr;
  }

  std::vector<CudaDevice*> devices_;
  cudaEvent_t fork_ = nullptr, post_ = nullptr;
  std::vector<cudaEvent_t> joins_, pre_;
  cudaGraphExec_t exec_ = nullptr;
  // Per device: the blocks freed during the capture, which every replay still uses; back to
  // their allocators when the graph goes (drop_graph).
  std::vector<std::vector<CachingAllocator::Block>> blocks_;
  std::mutex mu_;
  std::string failure_;
  nlohmann::json described_;
};

}  // namespace

std::unique_ptr<GroupCapture> CudaDevice::capture_group(const std::vector<Device*>& group,
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
  return std::make_unique<CudaGroupCapture>(std::move(devices));
}

}  // namespace paralab::cuda
