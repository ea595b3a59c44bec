// The CUDA backend's device: one GPU, or an equal share of one ("virtual device", each with a
// stream of its own), with a cuDNN and a cuBLAS handle bound to that stream.
//
// All work a device queues goes to its stream, so k devices run concurrently; synchronize()
// waits for that stream only. TF32 is off unless asked for, so results compare with the CPU.
// Memory comes from a caching allocator (core/caching_allocator.h: freed blocks are reused in
// stream order, no cudaFree until the device goes) and events from pools (core/event_pool.h: no
// cudaEventCreate per record() or mark() once the pools have grown).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "core/caching_allocator.h"
#include "core/cuda/green_contexts.h"
#include "core/device.h"
#include "core/event_pool.h"
#include "core/ops.h"

namespace paralab::cuda {

class CudaDevice final : public Device {
 public:
  // gpu: the CUDA device index; sharing: how many devices of the group share this GPU. With an
  // SM share (a green context and its stream) the device takes it over; otherwise it makes a
  // stream of its own on the whole GPU, and sm_note says why it has no share (if it shares).
  // kernels: what runs the conv stages, "cudnn", "fused" or "mixed" (DeviceOptions::kernels).
  CudaDevice(int ordinal, int gpu, int sharing, bool tf32, SmShare share = {},
             std::string sm_note = {}, const std::string& kernels = "cudnn");
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override;
  int memory_domain() const override { return gpu_; }
  nlohmann::json describe() const override;

  // From the caching allocator; during a capture a cached block only (else Error).
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr) noexcept override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  // dst on this device; src on this device or on a peer (unified addressing).
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t rows) override;
  void synchronize() override;
  bool queues_work() const override { return true; }
  void bind_thread() override;
  // The calling thread's work goes to the communication stream (made at the first call; on the
  // device's green context when it has one).
  void bind_comm_thread() override;
  Ops& ops() override { return *ops_; }
  Event record() override;
  void wait(const Event& event) override;
  TimeMark mark() override;
  double elapsed_ms(const TimeMark& a, const TimeMark& b) override;
  bool supports_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;
  void abort_capture() noexcept override;
  // A capture over virtual devices of this GPU (core/cuda/group_capture.cpp); null with the
  // reason for devices of other GPUs or backends.
  std::unique_ptr<GroupCapture> capture_group(const std::vector<Device*>& group, bool comm_streams,
                                              bool group_moves, std::string* why_not) override;

  // Over virtual devices of this GPU (all of the group's): a mover that queues a collective
  // step's moves of every rank as one kernel on a stream of the whole GPU (group_mover.cpp).
  std::unique_ptr<GroupMover> group_mover(const std::vector<Device*>& group,
                                          std::string* why_not) override;

  // What a graph keeps of this device while it lives: the blocks freed during its capture, which
  // its work still uses, and the event of every mark taken in the capture. The graph records
  // those events on every replay, so none may go back to the pool while it lives, even where
  // the mark itself was dropped: handed to a later mark of the same capture, an event would be
  // recorded by two nodes of the graph, unordered where they sit on different streams, and the
  // later mark's time would be either's.
  struct CaptureHold {
    std::vector<CachingAllocator::Block> blocks;
    std::vector<Event> marks;
  };

  // The group capture's parts (group_capture.cpp), on the compute stream: join_capture() makes
  // the stream wait on `fork`, recorded on rank 0's capturing stream, so that it joins that
  // capture; finish_capture() ends this device's part (its allocator's capture bracket) and
  // returns what the captured work still uses; restore() takes it back once the graph is gone.
  // cancel_capture() drops this device's part of a failed capture.
  void join_capture(cudaEvent_t fork);
  CaptureHold finish_capture();
  void restore(CaptureHold hold) noexcept;
  void cancel_capture() noexcept;
  cudaStream_t compute_stream() const { return stream_; }
  // The device's SM share (empty without one).
  const SmShare& sm_share() const { return share_; }

  // Set when another GPU of the group cannot read this one's memory directly, or this one
  // theirs (no peer access): add_inplace then copies a peer's data into a local buffer first
  // (a copy between GPUs goes through the host where needed; a kernel cannot).
  void set_peer_reads_staged(bool staged) { peer_reads_staged_ = staged; }
  // src itself when it is this GPU's memory, or when this GPU reads its peers directly;
  // otherwise a copy of its `bytes` in a buffer of this device, queued on its stream.
  const void* readable(const void* src, std::size_t bytes);

  int gpu() const { return gpu_; }
  bool tf32() const { return tf32_; }
  // A fault point of PARALAB_TEST_CAPTURE_FAULT (below): every event, mark, minibatch gather and
  // SGD update, so that every step's capture has some (a single device's has no event or mark).
  void capture_fault_point();
  // The stream the calling thread's work goes to: the communication stream on the thread that
  // called bind_comm_thread(), the compute stream on every other.
  cudaStream_t stream() const { return comm_thread_ == this ? comm_stream_ : stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  // cuBLASLt (the linear layers' GEMMs with epilogues) on the same stream; it shares cuBLAS's
  // workspace, which is safe because both queue on that one stream.
  cublasLtHandle_t cublas_lt() const { return cublas_lt_; }
  void* cublas_workspace() const { return cublas_workspace_; }
  static constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;

 private:
  std::string check_stream();
  nlohmann::json allocator_json() const;
  nlohmann::json event_pool_json() const;

  int ordinal_;
  int gpu_;
  int sharing_;
  bool tf32_;
  SmShare share_;
  std::string sm_note_;
  std::string comm_note_;  // why the communication stream is not on the SM share, if it is not
  cudaStream_t stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;  // bind_comm_thread()'s, made once
  std::mutex comm_mu_;
  static thread_local const CudaDevice* comm_thread_;  // the device this thread communicates for
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  void* cublas_workspace_ = nullptr;  // set explicitly, so that cuBLAS never allocates in a capture
  bool peer_reads_staged_ = false;
  // The compute stream is capturing: marks become timing points the graph records on every
  // replay (cudaEventRecordExternal) instead of capture-time dependencies.
  std::atomic<bool> capturing_{false};
  // The marks' events of the capture in progress (CaptureHold::marks); mark() may run on the
  // communication thread too.
  std::mutex capture_marks_mu_;
  std::vector<Event> capture_marks_;
  std::vector<Event> take_capture_marks();
  // PARALAB_TEST_CAPTURE_FAULT=C:N (tests of the fallback from a broken capture): before the
  // N-th fault point of the C-th capture this device takes part in (from 1; a capture over the
  // group counts once per device, its trial included), the thread synchronises its stream,
  // which a CUDA capture does not allow, as a library release that makes such a call would: the
  // capture is invalidated and the call fails (an Error). C:N:D: on the device of ordinal D
  // only (its rank, where a group's devices are made together), the others wait for it.
  // {0, 0}: never.
  struct CaptureFault {
    int capture = 0, at = 0;
  };
  CaptureFault capture_fault_;
  std::atomic<int> captures_begun_{0}, taken_in_capture_{0};
  // Declared before everything that holds its blocks (staging_, ops_): destroyed after them.
  std::unique_ptr<CachingAllocator> allocator_;
  std::shared_ptr<HandlePool<cudaEvent_t>> order_events_;   // record(): ordering only
  std::shared_ptr<HandlePool<cudaEvent_t>> timing_events_;  // mark(): cudaEventElapsedTime
  // readable()'s local copies of peers' data (from allocator_): one buffer per stream, [0] the
  // compute stream's, [1] the communication stream's (with overlap the allreduces run there).
  struct Staging {
    void* ptr = nullptr;
    std::size_t bytes = 0;
  };
  Staging staging_[2];
  std::unique_ptr<Ops> ops_;
};

// A pool of events made on GPU `gpu` (cudaEventRecord needs the event and the stream on one
// device) with `flags`; `who` names the owner in its destroy failures' log lines.
std::shared_ptr<HandlePool<cudaEvent_t>> event_pool(int gpu, unsigned flags,
                                                    const std::string& who);

// How many GPUs are usable, and why none when 0 ("CUDA driver version is insufficient", no
// device, ...): the reason GPU tests give when they skip.
int usable_gpus(std::string* why_none = nullptr);
// The usable GPUs as their device properties name them: [{"gpu": 0, "gpu_model": "NVIDIA H200",
// "sm_count": 132}, ...]; [] where none is usable.
nlohmann::json gpu_properties();

std::vector<std::unique_ptr<Device>> make_cuda_devices(int count, const DeviceOptions& options);

// The device's ops; kernels "cudnn", "fused" or "mixed" (an Error names the known ones otherwise).
std::unique_ptr<Ops> make_ops(CudaDevice& device, const std::string& kernels);

#if PARALAB_HAVE_NCCL
// NCCL over CUDA devices on distinct GPUs (Unavailable when two share one: NCCL cannot put two
// ranks of a communicator on one GPU).
std::unique_ptr<NativeCollectives> make_nccl(const std::vector<Device*>& devices);
std::string nccl_version();  // "2.28.3"
// ncclGetUniqueId's bytes, and one rank of a communicator made from them (ncclCommInitRank).
std::string nccl_unique_id();
std::unique_ptr<NativePointToPoint> make_nccl_point_to_point(Device& device,
                                                             const std::string& unique_id, int rank,
                                                             int size);
#endif

nlohmann::json library_versions();

}  // namespace paralab::cuda
