// Device: one place that computes (a group of CPU cores, a GPU, a share of a GPU).
//
// Strategies and the runner talk to devices only through this interface and the layer ops it
// hands out (core/ops.h); backends (core/cpu, core/cuda) implement both. A host thread that
// drives a device calls bind_thread() first (CPU: its thread count; CUDA: the current device).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace paralab {

class Ops;
class Tensor;

// A point in a device's queue of work (CUDA: an event). Null means "already complete": CPU
// devices run their work when it is queued, so they record none.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};
using Event = std::shared_ptr<DeviceEvent>;

// A point in a device's queue of work, for timing: the host clock when it was marked and, on
// devices that queue work (CUDA), a timing event that completes when the work before it does.
struct TimeMark {
  std::chrono::steady_clock::time_point host{};
  Event event;  // null on the CPU, whose work is done when queued
};

// A captured sequence of one device's work that can be queued again as a whole (a CUDA graph):
// the same kernels with the same pointers and arguments, for a fraction of the launch cost.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void launch() = 0;
  // What the captured work holds, for the results (CUDA: the graph's census, core/graph_census.h);
  // null where the backend does not say.
  virtual nlohmann::json describe() const { return nullptr; }
};

// One capture spanning the queues of a group's devices: a single CUDA graph for a whole
// multi-device step. Each rank's host thread queues its own device's work as it does eagerly;
// that work, with the events that order it between devices (Device::record / wait, the
// transport's hand-offs), becomes one captured unit that replays with one launch for the whole
// group, with no host work per message. Separate per-device captures cannot hold those events
// (one capture may not depend on another). Every member but describe() is collective: each
// rank's thread calls it with its rank, in the same order, and `barrier` lines the ranks up
// (the group transport's barrier, which fails when a peer has failed).
using GroupBarrier = std::function<void()>;
class GroupCapture {
 public:
  virtual ~GroupCapture() = default;
  // From here on the work the calling rank queues on its device is captured, not run (its
  // compute queue; nothing may allocate beyond the cache, synchronise or copy to the host).
  virtual void begin(int rank, const GroupBarrier& barrier) = 0;
  // Ends every rank's capture and makes the captured unit; CaptureFailed (core/error.h) on every
  // rank if that fails, with each rank's device ready for eager work.
  virtual void end(int rank, const GroupBarrier& barrier) = 0;
  // Ends a capture that failed half-way on this rank, dropping what was recorded. Every rank
  // calls it once nothing of its own queues into the capture any more (its helpers stopped,
  // its peers woken from waiting for it: no barrier). Rank 0's, the origin's, ends the capture
  // for the whole group (a CUDA origin stream's end takes every joined stream out of capture,
  // after which what a rank still queued would run at once), so it returns only after every
  // other rank's (GroupAbortGate).
  virtual void abort(int rank) noexcept = 0;
  // Queues the captured unit after each rank's earlier work, and each rank's later work after
  // all of it.
  virtual void launch(int rank, const GroupBarrier& barrier) = 0;
  // What the results record about the captured unit (e.g. its kernels per device context).
  virtual nlohmann::json describe() const { return nullptr; }
};

// The ranks' aborts of one group capture (GroupCapture::abort): each rank but the origin says
// it has stopped queueing; the origin waits for all of them before it ends the capture, then the
// gate is ready for the next capture. A rank whose thread never ran stops through its starter.
// A rank that never stops would hang the origin: after `warn_after` of waiting, the origin says
// once on stderr which ranks it still waits for (and goes on waiting: ending the capture then
// would run their later work outside it).
class GroupAbortGate {
 public:
  explicit GroupAbortGate(int ranks,
                          std::chrono::milliseconds warn_after = std::chrono::seconds(30))
      : stopped_(static_cast<std::size_t>(ranks), false), warn_after_(warn_after) {}
  // Rank `rank` (> 0) queues nothing more into the capture; once per capture (a repeat counts
  // once).
  void stopped(int rank) noexcept {
    std::lock_guard lock(mu_);
    stopped_[static_cast<std::size_t>(rank)] = true;
    cv_.notify_all();
  }
  // The origin's thread: returns once every other rank has stopped, and resets the gate.
  void wait_for_peers() noexcept {
    std::unique_lock lock(mu_);
    auto all = [&] {
      return std::all_of(stopped_.begin() + 1, stopped_.end(), [](bool s) { return s; });
    };
    if (!cv_.wait_for(lock, warn_after_, all)) {
      std::fprintf(stderr, "paralab: a broken group capture's origin has waited %.3g s for rank(s)",
                   std::chrono::duration<double>(warn_after_).count());
      for (std::size_t r = 1; r < stopped_.size(); ++r)
        if (!stopped_[r]) std::fprintf(stderr, " %zu", r);
      std::fprintf(stderr, " of %zu to stop queueing into it\n", stopped_.size());
      cv_.wait(lock, all);
    }
    std::fill(stopped_.begin(), stopped_.end(), false);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> stopped_;  // [0] unused: the origin
  std::chrono::milliseconds warn_after_;
};

// One move of a collective step over devices that share one memory (virtual devices of a GPU):
// dst = src[0] (a copy), or dst = (dst + src[0]) + src[1] ... in that order (a reduction: the
// same float sums as receiving and adding the messages one by one). `phase`: its step's place
// among the steps queued together.
struct GroupMove {
  static constexpr int kMaxSources = 2;
  float* dst = nullptr;
  const float* src[kMaxSources] = {nullptr, nullptr};
  int sources = 1;
  int64_t floats = 0;
  bool reduce = false;
  int phase = 0;
};

// Queues every move of one collective step, or of a whole collective's steps (its phases, in
// order), over a group's devices as one unit of work (CUDA: a kernel on the whole GPU for all
// ranks' moves, instead of a kernel per rank and message). The moves of a phase must not
// overlap: no move writes what another of its phase reads or writes.
class GroupMover {
 public:
  struct Done {
    Event done;         // the moves' end: each rank's later work waits on it
    TimeMark can_move;  // timed runs: when every rank's data was ready,
    TimeMark moved;     // and when the moves were done
  };
  virtual ~GroupMover() = default;
  // Queues `moves` (phases not decreasing) after the work of every event in `after` (each
  // rank's, recorded when it reached the first of them; null events are skipped). Called by one
  // rank's thread at a time.
  virtual Done run(std::span<const GroupMove> moves, std::span<const Event> after, bool timed) = 0;
  // Where the moves run, for the results ("one kernel per collective step on GPU 0's SMs").
  virtual std::string describe() const = 0;
};

enum class DeviceKind { Cpu, Cuda };

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // Position in its group, 0-based.
  virtual int ordinal() const = 0;
  // "cpu:0", "cuda:1", ...
  virtual std::string name() const = 0;
  // What a results file records about this device (model, threads, SMs, ...).
  virtual nlohmann::json describe() const = 0;
  // Devices reporting the same id >= 0 share one memory and exchange messages through it, with
  // no link between them (CUDA: the virtual devices of one GPU, id = the GPU); -1 otherwise.
  virtual int memory_domain() const { return -1; }

  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill_zero(void* dst, std::size_t bytes) = 0;
  // `rows` rows of `width` bytes from src (rows `src_pitch` bytes apart) to dst (`dst_pitch`
  // apart), both on this device: how a channel block moves between NCHW and a packed buffer.
  virtual void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t width, std::size_t rows) = 0;

  // Waits until all work queued on this device has finished (timing boundaries only).
  virtual void synchronize() = 0;
  // Whether queued work runs later on the device's own queue (CUDA: a stream) rather than when
  // it is queued (CPU): only then does waiting for it or reading its results stall the host
  // while the device idles, which strategies avoid inside an epoch.
  virtual bool queues_work() const { return false; }
  // Prepares the calling host thread to drive this device.
  virtual void bind_thread() = 0;
  // Prepares the calling host thread to queue this device's communication (copies, adds, events
  // and marks; no library calls such as cuBLAS or cuDNN): on devices that queue work its work
  // goes to a second queue (CUDA: a communication stream on the device's SMs), ordered against
  // the compute queue only through events (record/wait), so that it can run beside compute.
  // synchronize() waits for both queues. The CPU has one queue: this is bind_thread().
  virtual void bind_comm_thread() { bind_thread(); }

  // Ordering between devices without the host waiting: record() marks the work queued so far;
  // wait(e) makes work queued on this device from now on start only after e's work is done (e
  // may come from another device). The CPU's work is done when queued: null events, no-ops.
  virtual Event record() { return nullptr; }
  virtual void wait(const Event& event) { (void)event; }

  // Timing phases without stopping the device: mark() notes a point in the queue; after a
  // synchronize(), elapsed_ms(a, b) is the time the device took from a to b. The CPU's is the
  // host clock between the marks (its work runs when queued). A mark taken while capturing is a
  // point every replay records again: after a replay and a synchronize, elapsed_ms reads that
  // replay's times (the marks must live as long as the captured work).
  virtual TimeMark mark() { return {std::chrono::steady_clock::now(), nullptr}; }
  virtual double elapsed_ms(const TimeMark& a, const TimeMark& b) {
    return std::chrono::duration<double, std::milli>(b.host - a.host).count();
  }

  // Capture (CUDA Graphs), where supports_capture(): between begin_capture() and end_capture()
  // the work queued from the calling thread is recorded instead of run. Nothing in between may
  // allocate, synchronise or copy to the host. abort_capture() ends a capture that failed
  // half-way, dropping what was recorded. end_capture() throws CaptureFailed (core/error.h)
  // when the recorded work cannot be made a graph: nothing of it ran, and the device is ready
  // for the same work eagerly.
  virtual bool supports_capture() const { return false; }
  virtual void begin_capture();
  virtual std::unique_ptr<CapturedWork> end_capture();
  virtual void abort_capture() noexcept {}
  // A capture over `group` (this device first, as rank 0; devices of one process), or null with
  // *why_not set when these devices cannot share one (other backends, other GPUs).
  // comm_streams: each rank's step also queues work from a communication thread
  // (bind_comm_thread), which joins the capture by waiting on an event of the rank's and rejoins
  // it through one the rank waits on (data_parallel's overlap); the capture must hold that too.
  // group_moves: the transport moves collective steps with this group's group_mover() (whole
  // steps or collectives), whose work the capture must hold as well.
  virtual std::unique_ptr<GroupCapture> capture_group(const std::vector<Device*>& group,
                                                      bool comm_streams, bool group_moves,
                                                      std::string* why_not);

  // A mover of collective steps over `group` (this device first; every device of one memory
  // domain), or null with *why_not set where this backend moves each message on its receiver's
  // queue (CPU; CUDA devices of several GPUs).
  virtual std::unique_ptr<GroupMover> group_mover(const std::vector<Device*>& group,
                                                  std::string* why_not);

  virtual Ops& ops() = 0;
};

struct DeviceOptions {
  int threads_per_device = 1;    // CPU: worker threads each device owns
  bool virtual_devices = false;  // CUDA: allow more devices than GPUs (they share GPUs)
  bool tf32 = false;             // CUDA: TF32 tensor-core math (off: float32 like the CPU)
  bool green_contexts = true;    // CUDA: virtual devices get equal SM shares where possible
  // CUDA: conv stages on cuDNN ("cudnn"), own kernels ("fused"), or own kernels for small filters
  // and cuDNN for the others ("mixed")
  std::string kernels = "cudnn";
  std::vector<int> gpus;  // CUDA: the GPU of each device (a device list); empty: round
                          // robin over the GPUs
};

// Creates `count` devices of the named backend ("cpu", "cuda"; "auto" = cuda when a GPU is
// usable, else cpu). Unknown names throw an Error listing the known ones.
std::vector<std::unique_ptr<Device>> make_devices(const std::string& backend, int count,
                                                  const DeviceOptions& options);
// A collective library's communicator over a whole device group (NCCL over CUDA devices):
// created once for the group, then each rank calls it from its own thread, in the same order.
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // e.g. "nccl 2.28.3"
  virtual std::string library() const = 0;
  // buf = sum over ranks of buf (float32), queued on rank's device after its earlier work.
  virtual void allreduce_sum(int rank, Tensor& buf) = 0;
};

// What make_native_collectives would throw for `devices`, without making a communicator: an
// Error for an unknown library, Unavailable for a device the library cannot serve (not a CUDA
// device) or a build without it. Returns when the library can serve them.
void check_native_collectives(const std::string& library, const std::vector<Device*>& devices);

// Creates `library`'s ("nccl") communicator over `devices` (rank r = devices[r]). Throws
// Unavailable saying why when the build or the devices cannot have one (not CUDA devices, NCCL
// not built, two ranks on one GPU).
std::unique_ptr<NativeCollectives> make_native_collectives(const std::string& library,
                                                           const std::vector<Device*>& devices);

// A collective library's point-to-point between the ranks of one communicator spread over
// processes (NCCL: ncclSend/ncclRecv, queued on the rank's device stream after its earlier work).
// Like NCCL's, a send completes only with its matching receive: sends and receives that must
// progress together go between group_start() and group_end().
class NativePointToPoint {
 public:
  virtual ~NativePointToPoint() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void send(const Tensor& buf, int peer) = 0;  // float32
  virtual void recv(Tensor& buf, int peer) = 0;        // float32, buf's size
  // buf = sum over the communicator's ranks of buf (float32): the library's own allreduce over
  // the same communicator (NCCL: ncclAllReduce on the rank's stream), outside any group.
  virtual void allreduce_sum(Tensor& buf) = 0;
};

// The communicator id every rank of a new communicator needs (rank 0 makes it, the launcher
// passes it to the others): raw bytes.
std::string native_unique_id(const std::string& library);
// This process's rank of a communicator of `size` ranks, on `device` (a CUDA device); Unavailable
// where the build or the device cannot have one.
std::unique_ptr<NativePointToPoint> make_native_point_to_point(const std::string& library,
                                                               Device& device,
                                                               const std::string& unique_id,
                                                               int rank, int size);

// Backend names compiled into this build, and the name "auto" resolves to here.
std::vector<std::string> known_backends();
std::string resolve_backend(const std::string& backend);
// Empty when `backend` can make devices here; otherwise why not ("not built", "no usable GPU:
// no NVIDIA driver found (libcuda)", ...). GPU tests skip with this reason.
std::string backend_unavailable(const std::string& backend);
// GPUs this process can use (0 in builds without the CUDA backend, or without a usable GPU).
int usable_gpu_count();
// Those GPUs as their device properties name them: [{"gpu": 0, "gpu_model": "NVIDIA H200",
// "sm_count": 132}, ...]; [] where there are none.
nlohmann::json usable_gpu_properties();
// Why `ranks_on_node` processes of one node that each take the GPU of their node-local rank (CUDA
// ranks under mpirun) cannot each have one of its `gpus`; "" when they can.
std::string gpu_per_rank_shortfall(int ranks_on_node, int gpus);
// Library versions linked into the build, e.g. {"onednn": "2.6.3"}.
nlohmann::json backend_versions();
// The instruction set the CPU backend's oneDNN kernels use ("avx2", ...; see ONEDNN_MAX_CPU_ISA),
// null in builds without the CPU backend.
nlohmann::json onednn_cpu_isa();

// enqueue()'s work on `device` alone, captured as a graph. A capture that cannot be made is ended
// and throws CaptureFailed: its end fails, or an operation fails as it is queued into it (an
// Error, e.g. a call that a CUDA capture does not allow, which invalidates it). Nothing of it
// ran, so the caller may run the same work eagerly, where an error of the work itself comes
// again with its own message. Any other exception ends the capture and propagates.
template <typename Enqueue>
std::unique_ptr<CapturedWork> capture_work(Device& device, Enqueue&& enqueue) {
  device.begin_capture();
  try {
    enqueue();
    return device.end_capture();
  } catch (const CaptureFailed&) {
    device.abort_capture();
    throw;
  } catch (const Error& e) {
    device.abort_capture();
    throw CaptureFailed(e.what());
  } catch (...) {
    device.abort_capture();
    throw;
  }
}

}  // namespace paralab
