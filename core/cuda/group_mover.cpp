// The mover of whole collective steps, or of whole collectives, over virtual devices of one GPU
// (Device::group_mover, LocalFabric's whole steps in strategies/collectives/transport.h).
//
// Why one kernel on the whole GPU: a ring step over k virtual devices is k small kernels, one per
// rank, each on its rank's SM share; the 2026-12-04 H200 run fitted 3.3, 8.5 and 14.0 us per
// message on 2, 4 and 8 devices even inside one CUDA graph, about 1.7-2.1 us per kernel of all
// ranks together, so a step's cost grew with k. Here a step, or a whole collective's steps (the
// fabric's default), is one kernel whatever k (group_moves.h: each block carries its floats
// through every step), after an event wait per rank (graph edges in a capture). It runs on a
// stream of the GPU's own context, not on any rank's SM share: the moves of k ranks stand for k
// links' transfers, which on k real GPUs would not run on one rank's SMs (a tree's root would
// otherwise move all of its children's data through 1/k of the SMs).
#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/group_move_spec.h"
#include "core/cuda/kernels.h"
#include "core/error.h"
#include "core/event_pool.h"

namespace paralab::cuda {

namespace {

using CudaEvent = PooledEvent<cudaEvent_t>;

class CudaGroupMover final : public GroupMover {
 public:
  CudaGroupMover(int gpu, int ranks) : gpu_(gpu), ranks_(ranks) {
    order_events_ = event_pool(gpu, cudaEventDisableTiming, "group mover");
    timing_events_ = event_pool(gpu, cudaEventDefault, "group mover");
    // The stream on gpu's own context; the calling thread's current device is left as it was.
    int current = 0;
    PARALAB_CUDA(cudaGetDevice(&current));
    struct Restore {
      int device;
      ~Restore() { (void)cudaSetDevice(device); }
    } restore{current};
    PARALAB_CUDA(cudaSetDevice(gpu_));
    PARALAB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaGroupMover() override {
    if (cudaStreamDestroy(stream_) != cudaSuccess)
      log_error("group mover: cudaStreamDestroy failed");
  }

  Done run(std::span<const GroupMove> moves, std::span<const Event> after, bool timed) override {
    // Everything checked before the stream waits: inside a group capture, a throw after this
    // stream has joined the capture would leave it unjoined and end the capture with it.
    const std::vector<GroupMoveSpec> specs = group_move_specs(moves);
    std::vector<cudaEvent_t> waits;
    waits.reserve(after.size());
    for (const Event& e : after) {
      if (!e) continue;
      const auto* ce = dynamic_cast<const CudaEvent*>(e.get());
      PARALAB_REQUIRE(ce != nullptr, std::string("group mover: an event of another backend"));
      waits.push_back(ce->get());
    }
    auto event = std::make_shared<CudaEvent>(order_events_);  // before the waits: may throw
    for (cudaEvent_t e : waits) PARALAB_CUDA(cudaStreamWaitEvent(stream_, e, 0));
    Done done;
    if (timed) done.can_move = mark();
    group_moves(specs.data(), static_cast<int>(specs.size()), stream_);
    if (timed) done.moved = mark();
    PARALAB_CUDA(cudaEventRecord(event->get(), stream_));
    done.done = event;
    return done;
  }

  std::string describe() const override {
    return "one kernel for all " + std::to_string(ranks_) +
           " virtual devices, on a stream of GPU " + std::to_string(gpu_) +
           "'s own context (all its SMs)";
  }

 private:
  // As CudaDevice::mark(): inside a capture (the stream joined it by waiting on a rank's event)
  // an event record node that every replay records again.
  TimeMark mark() {
    auto event = std::make_shared<CudaEvent>(timing_events_);
    const auto host = std::chrono::steady_clock::now();
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    PARALAB_CUDA(cudaStreamIsCapturing(stream_, &status));
    if (status == cudaStreamCaptureStatusActive) {
      PARALAB_CUDA(cudaEventRecordWithFlags(event->get(), stream_, cudaEventRecordExternal));
      // Every replay records it again: held while the mover lives, so that it never goes back
      // to the pool (and to another mark) while a graph may replay, whoever keeps the mark.
      held_.push_back(event);
    } else {
      PARALAB_CUDA(cudaEventRecord(event->get(), stream_));
    }
    return {host, event};
  }

  int gpu_;
  int ranks_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<HandlePool<cudaEvent_t>> order_events_;
  std::shared_ptr<HandlePool<cudaEvent_t>> timing_events_;
  std::vector<std::shared_ptr<CudaEvent>> held_;  // the marks recorded in captures (mark())
};

}  // namespace

std::unique_ptr<GroupMover> CudaDevice::group_mover(const std::vector<Device*>& group,
                                                    std::string* why_not) {
  auto refuse = [&](const std::string& why) -> std::unique_ptr<GroupMover> {
    if (why_not) *why_not = why;
    return nullptr;
  };
  if (group.size() < 2) return refuse("a group of one device has no messages");
  if (group.front() != this) return refuse(name() + ": group_mover() of a group it does not lead");
  for (const Device* d : group) {
    const auto* c = dynamic_cast<const CudaDevice*>(d);
    if (!c || c->gpu() != gpu_)
      return refuse(d->name() + " is not a virtual device of GPU " + std::to_string(gpu_));
  }
  return std::make_unique<CudaGroupMover>(gpu_, static_cast<int>(group.size()));
}

}  // namespace paralab::cuda
