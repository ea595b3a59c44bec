#include "core/cuda/cuda_device.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/cublas_api.h"
#include "core/cuda/graph_census.h"
#include "core/cuda/kernels.h"
#include "core/cuda/step_trace.h"

namespace paralab::cuda {

namespace {

// A pooled event (core/event_pool.h), back in its pool when the last Event or TimeMark holding it
// goes. Recording it again then is safe even if a stream's wait on it is still pending: "Other
// APIs such as cudaStreamWaitEvent() use the most recently captured state at the time of the API
// call, and are not affected by later calls to cudaEventRecord()" (CUDA Runtime API,
// cudaEventRecord; cuda_runtime_api.h of CUDA 13). Timing reads (elapsed_ms) hold their
// TimeMarks, so a timing event is not recorded anew while it is read.
using CudaEvent = PooledEvent<cudaEvent_t>;

// PARALAB_TEST_CAPTURE_FAULT (cuda_device.h: capture_fault_): "C:N" or "C:N:D", whole numbers,
// C and N >= 1, D >= 0; unset or empty: {0, 0, -1}. Anything else is an Error naming the variable.
struct CaptureFaultSpec {
  int capture = 0, at = 0, device = -1;  // device -1: every device
};

CaptureFaultSpec capture_fault_from_env() {
  const char* v = std::getenv("PARALAB_TEST_CAPTURE_FAULT");
  if (!v || !*v) return {};
  const std::string s = v;
  const auto whole = [](const std::string& t) {
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos)
      return -1;
    return std::stoi(t);
  };
  std::vector<int> parts;
  for (std::size_t from = 0;;) {
    const auto colon = s.find(':', from);
    parts.push_back(whole(s.substr(from, colon == std::string::npos ? colon : colon - from)));
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  if ((parts.size() != 2 && parts.size() != 3) || parts[0] < 1 || parts[1] < 1 ||
      (parts.size() == 3 && parts[2] < 0))
    throw Error("PARALAB_TEST_CAPTURE_FAULT: '" + s +
                "' is not C:N or C:N:D (the N-th fault point of the C-th capture, both from 1, "
                "on every device or on device D only)");
  return {parts[0], parts[1], parts.size() == 3 ? parts[2] : -1};
}

}  // namespace

std::shared_ptr<HandlePool<cudaEvent_t>> event_pool(int gpu, unsigned flags,
                                                    const std::string& who) {
  return HandlePool<cudaEvent_t>::make(
      [gpu, flags] {
        cudaEvent_t e = nullptr;
        PARALAB_CUDA(cudaSetDevice(gpu));
        PARALAB_CUDA(cudaEventCreateWithFlags(&e, flags));
        return e;
      },
      [who](cudaEvent_t e) {
        if (cudaEventDestroy(e) != cudaSuccess) log_error(who + ": cudaEventDestroy failed");
      });
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

CudaDevice::CudaDevice(int ordinal, int gpu, int sharing, bool tf32, SmShare share,
                       std::string sm_note, const std::string& kernels)
    : ordinal_(ordinal),
      gpu_(gpu),
      sharing_(sharing),
      tf32_(tf32),
      share_(share),
      sm_note_(std::move(sm_note)) {
  if (const CaptureFaultSpec fault = capture_fault_from_env();
      fault.device < 0 || fault.device == ordinal)
    capture_fault_ = {fault.capture, fault.at};
  // Backing calls of the caching allocator. Out of memory is nullptr (the allocator then releases
  // its cache and retries once); any other failure throws. Virtual devices sharing a GPU have an
  // allocator each: one device's retry releases its own cache, not its neighbours'.
  const std::string who = name();  // gpu (the parameter) is gpu_
  allocator_ = std::make_unique<CachingAllocator>(
      who,
      [gpu](std::size_t bytes) -> void* {
        void* p = nullptr;
        PARALAB_CUDA(cudaSetDevice(gpu));
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
          cudaGetLastError();  // not sticky, but clear it so that later checks do not see it
          return nullptr;
        }
        PARALAB_CUDA(e);
        return p;
      },
      [who](void* p) {
        if (cudaFree(p) != cudaSuccess) log_error(who + ": cudaFree failed");
      });
  // The ordering events without timing (cheaper to record and wait on).
  order_events_ = event_pool(gpu, cudaEventDisableTiming, who);
  timing_events_ = event_pool(gpu, cudaEventDefault, who);
  // cuBLAS loaded before the stream and cuDNN's first handle: cuDNN then finds the same
  // libcublasLt by its name, and a library that cannot be loaded throws before anything here
  // needs releasing.
  blas();
  PARALAB_CUDA(cudaSetDevice(gpu_));
  if (share_.stream)
    stream_ = share_.stream;  // work queued here runs on the green context's SMs only
  else
    PARALAB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  PARALAB_CUDNN(cudnnCreate(&cudnn_));
  PARALAB_CUDNN(cudnnSetStream(cudnn_, stream_));
  PARALAB_CUBLAS(blas().cublasCreate(&cublas_));
  PARALAB_CUBLAS(blas().cublasSetStream(cublas_, stream_));
  // Pedantic math: no TF32 and no reduced-precision reductions, so results compare with the
  // CPU backend at float32 tolerances.
  PARALAB_CUBLAS(
      blas().cublasSetMathMode(cublas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
  PARALAB_CUBLAS(blas().cublasLtCreate(&cublas_lt_));
  // cuBLAS's workspace given up front (32 MiB, NVIDIA's advice for Hopper), so that a CUDA
  // graph capture never sees it allocate.
  PARALAB_CUDA(cudaMalloc(&cublas_workspace_, kCublasWorkspace));
  PARALAB_CUBLAS(blas().cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
  // A green context's stream must take everything a device queues. Checked once here: a share
  // whose stream fails falls back to a plain stream and says why, so that a run goes ahead on
  // contended SMs instead of failing in its first step.
  if (share_.stream) {
    if (const std::string failure = check_stream(); !failure.empty()) {
      release(share_);
      PARALAB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      PARALAB_CUDNN(cudnnSetStream(cudnn_, stream_));
      // Setting the stream resets cuBLAS's workspace: set it again.
      PARALAB_CUBLAS(blas().cublasSetStream(cublas_, stream_));
      PARALAB_CUBLAS(blas().cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspace));
      sm_note_ = "no SM share: its green context's stream failed a check: " + failure;
    }
  }
  ops_ = make_ops(*this, kernels);
}

// One of each kind of work a device queues, on stream_: a memset, one of ParaLab's kernels, a
// cuBLAS, a cuBLASLt and a cuDNN call, an ordering event recorded and waited on, two timing
// events and the time between them, then a synchronisation. Returns the first failure's
// message, or "" when all went through. (A cuBLASLt heuristic with no algorithm for the 4x4
// product is no failure of the stream: that call is then left out.)
std::string CudaDevice::check_stream() {
  float* scratch = nullptr;
  cudnnTensorDescriptor_t one_value = nullptr;
  cudaEvent_t event = nullptr, t0 = nullptr, t1 = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t square = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::string failure;
  try {
    constexpr int kSide = 4, kValues = 3 * kSide * kSide;  // A, B, D of a 4x4 product
    PARALAB_CUDA(cudaMalloc(&scratch, kValues * sizeof(float)));
    PARALAB_CUDA(cudaMemsetAsync(scratch, 0, kValues * sizeof(float), stream_));
    add_inplace(scratch, scratch + 1, 1, stream_);
    const float one = 1.0f, zero = 0.0f;
    PARALAB_CUBLAS(blas().cublasSaxpy(cublas_, 1, &one, scratch, 1, scratch + 1, 1));
    PARALAB_CUBLAS(blas().cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F_PEDANTIC, CUDA_R_32F));
    PARALAB_CUBLAS(blas().cublasLtMatrixLayoutCreate(&square, CUDA_R_32F, kSide, kSide, kSide));
    PARALAB_CUBLAS(blas().cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t workspace = kCublasWorkspace;
    PARALAB_CUBLAS(blas().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
    cublasLtMatmulHeuristicResult_t algo{};
    int found = 0;
    if (blas().cublasLtMatmulAlgoGetHeuristic(cublas_lt_, op, square, square, square, square, pref,
                                              1, &algo, &found) == CUBLAS_STATUS_SUCCESS &&
        found > 0) {
      float* a = scratch;
      float* b = scratch + kSide * kSide;
      float* d = scratch + 2 * kSide * kSide;
      PARALAB_CUBLAS(blas().cublasLtMatmul(cublas_lt_, op, &one, a, square, b, square, &zero, d,
                                           square, d, square, &algo.algo, cublas_workspace_,
                                           kCublasWorkspace, stream_));
    }
    PARALAB_CUDNN(cudnnCreateTensorDescriptor(&one_value));
    PARALAB_CUDNN(
        cudnnSetTensor4dDescriptor(one_value, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1));
    PARALAB_CUDNN(cudnnSetTensor(cudnn_, one_value, scratch, &one));
    PARALAB_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    PARALAB_CUDA(cudaEventRecord(event, stream_));
    PARALAB_CUDA(cudaStreamWaitEvent(stream_, event, 0));
    // Timing events as mark() makes them: from this device's pool's flags (timing on).
    PARALAB_CUDA(cudaEventCreateWithFlags(&t0, cudaEventDefault));
    PARALAB_CUDA(cudaEventCreateWithFlags(&t1, cudaEventDefault));
    PARALAB_CUDA(cudaEventRecord(t0, stream_));
    add_inplace(scratch, scratch + 1, 1, stream_);
    PARALAB_CUDA(cudaEventRecord(t1, stream_));
    PARALAB_CUDA(cudaStreamSynchronize(stream_));
    float ms = 0.0f;
    PARALAB_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  } catch (const Error& e) {
    failure = e.what();
    cudaGetLastError();  // a refused call's error is not sticky: clear it for later calls
  }
  if (pref) blas().cublasLtMatmulPreferenceDestroy(pref);
  if (square) blas().cublasLtMatrixLayoutDestroy(square);
  if (op) blas().cublasLtMatmulDescDestroy(op);
  for (cudaEvent_t e : {event, t0, t1})
    if (e) cudaEventDestroy(e);
  if (one_value) cudnnDestroyTensorDescriptor(one_value);
  // A failure may leave work queued on the stream that reads scratch: let it end first (its
  // own error, if any, is the failure already noted).
  if (!failure.empty() && cudaStreamSynchronize(stream_) != cudaSuccess) cudaGetLastError();
  if (scratch) cudaFree(scratch);
  return failure;
}

CudaDevice::~CudaDevice() {
  // Both streams' work ends before anything it may use goes: cudaFree's implicit wait covers the
  // blocks it frees, not the streams of a green context destroyed below.
  for (cudaStream_t s : {stream_, comm_stream_})
    if (s && cudaStreamSynchronize(s) != cudaSuccess)
      log_error(name() + ": cudaStreamSynchronize failed before its teardown");
  ops_.reset();
  for (Staging& s : staging_) allocator_->deallocate(s.ptr);
  allocator_.reset();  // cudaFree of every block (cudaFree waits for the device's work first)
  if (cublas_ && blas().cublasDestroy(cublas_) != CUBLAS_STATUS_SUCCESS)
    log_error(name() + ": cublasDestroy failed");
  if (cublas_lt_ && blas().cublasLtDestroy(cublas_lt_) != CUBLAS_STATUS_SUCCESS)
    log_error(name() + ": cublasLtDestroy failed");
  if (cublas_workspace_ && cudaFree(cublas_workspace_) != cudaSuccess)
    log_error(name() + ": cudaFree of the cuBLAS workspace failed");
  if (cudnn_ && cudnnDestroy(cudnn_) != CUDNN_STATUS_SUCCESS)
    log_error(name() + ": cudnnDestroy failed");
  if (comm_stream_ && cudaStreamDestroy(comm_stream_) != cudaSuccess)
    log_error(name() + ": cudaStreamDestroy of the communication stream failed");
  if (share_.stream)
    release(share_);
  else if (stream_ && cudaStreamDestroy(stream_) != cudaSuccess)
    log_error(name() + ": cudaStreamDestroy failed");
}

std::string CudaDevice::name() const { return "cuda:" + std::to_string(ordinal_); }

nlohmann::json CudaDevice::describe() const {
  cudaDeviceProp prop{};
  PARALAB_CUDA(cudaGetDeviceProperties(&prop, gpu_));
  return {{"name", name()},
          {"kind", "cuda"},
          {"gpu", gpu_},
          {"gpu_model", prop.name},
          {"virtual", sharing_ > 1},
          {"devices_sharing_gpu", sharing_},
          {"sm_count", prop.multiProcessorCount},
          // With a green context, the SMs this device may use; a whole GPU, all of them; a
          // virtual device without one may use all SMs, contending with the others: no share.
          {"sm_share", share_.stream  ? nlohmann::json(share_.sm_count)
                       : sharing_ > 1 ? nlohmann::json(nullptr)
                                      : nlohmann::json(prop.multiProcessorCount)},
          {"green_context", share_.stream != nullptr},
          {"sm_share_note", sm_note_.empty() ? nlohmann::json(nullptr) : nlohmann::json(sm_note_)},
          {"peer_reads_staged", peer_reads_staged_},
          // Whether communication ran on a stream of its own (bind_comm_thread), and where.
          {"comm_stream", comm_stream_ == nullptr ? nlohmann::json(nullptr)
                          : comm_note_.empty()    ? nlohmann::json("on the device's SMs")
                                                  : nlohmann::json(comm_note_)},
          {"tf32", tf32_},
          {"allocator", allocator_json()},
          {"event_pool", event_pool_json()}};
}

// The caching allocator's counts at the time of describe(): bytes are rounded block sizes.
nlohmann::json CudaDevice::allocator_json() const {
  const AllocatorStats s = allocator_->stats();
  return {{"granularity_bytes", CachingAllocator::kGranularity},
          {"in_use_bytes", s.in_use_bytes},
          {"cached_bytes", s.cached_bytes},
          {"graph_bytes", s.graph_bytes},
          {"peak_in_use_bytes", s.peak_in_use_bytes},
          {"peak_reserved_bytes", s.peak_reserved_bytes},
          {"allocations", s.allocations},
          {"cache_hits", s.cache_hits},
          {"backing_allocations", s.backing_allocations},
          {"backing_frees", s.backing_frees},
          {"out_of_memory_retries", s.out_of_memory_retries}};
}

// Events made so far (the pools' sizes) and how many record()/mark() calls reused one.
nlohmann::json CudaDevice::event_pool_json() const {
  const auto order = order_events_->stats();
  const auto timing = timing_events_->stats();
  return {{"ordering_events", order.created},
          {"timing_events", timing.created},
          {"acquired", order.acquired + timing.acquired},
          {"reused", order.reused + timing.reused}};
}

void* CudaDevice::allocate(std::size_t bytes) {
  // The calling thread's current device is this one afterwards, as when every allocation was a
  // cudaMalloc: code that allocates and then launches may count on it.
  PARALAB_CUDA(cudaSetDevice(gpu_));
  void* ptr = allocator_->allocate(bytes);
  // On the communication thread the block may come from the cache with its last users still
  // queued on stream_ (freed on the compute thread, in stream_'s order): the communication
  // stream's first use of it waits for stream_'s work so far. A buffer grows a few times per run
  // (readable()'s staging, a transport's scratch for received messages), so this costs nothing
  // per message. Not in a capture: a block handed out there was freed before it began, and the
  // replays start after stream_'s earlier work.
  if (comm_thread_ == this && !capturing_) {
    try {
      CudaEvent freed(order_events_);
      PARALAB_CUDA(cudaEventRecord(freed.get(), stream_));
      PARALAB_CUDA(cudaStreamWaitEvent(comm_stream_, freed.get(), 0));
    } catch (...) {
      allocator_->deallocate(ptr);
      throw;
    }
  }
  return ptr;
}

// Why a freed block can go to the next allocation with no event and no wait: every write to this
// device's memory is queued on stream_ (copy_on_device, fill_zero, copy_2d and the ops write to
// this device only; a peer never writes here), so the block's next owner's work comes after its
// last owner's in stream order.
//
// What would break it is work on another stream reading the block. Here that is a peer's stream
// reading this device's buffer through the Transport (strategies/collectives/transport.cpp: the
// receiver copies or adds from the sender's memory, directly or via readable()). That stays safe
// without an event per free because (1) the in-flight Request holds the sender's tensor, so its
// block cannot be freed while the message is in flight, and (2) the sender's Transport::wait()
// makes stream_ wait on the receiver's `consumed` event before it returns, and every collective
// and the pipeline wait on all their sends. A block freed after that is reused only by work
// queued after that wait. A send whose handle is dropped without wait() (a rank failing
// mid-collective, after which the fabric aborts the run) could let a peer read a reused block:
// its data is wrong, never the memory unmapped, and the run has failed anyway. NCCL queues on
// stream_ itself. A whole collective step (group_mover.cpp) reads and writes the ranks' buffers
// on the mover's stream, after an event of every rank's and before every rank's stream waits on
// its end (LocalFabric's step()): later work on stream_ follows it as it follows a receive. A CUDA
// graph keeps using blocks freed while it was captured: end_capture() hands them to the graph,
// which restores them to the cache when it is destroyed. The communication stream
// (bind_comm_thread) writes only into buffers that live through the whole run (the replicas'
// gradients, for data_parallel's overlapped buckets), and the compute stream waits for its last
// event before it uses them again. Every block the communication thread allocates (its staging
// buffer, readable(); a transport's scratch, which the transport keeps for its life) is first used
// after the communication stream has been made to wait for stream_'s work so far (allocate), and
// the one it frees during a run, its staging buffer when that grows, is freed after stream_ has
// been made to wait for the communication stream's work so far.
void CudaDevice::deallocate(void* ptr) noexcept { allocator_->deallocate(ptr); }

void CudaDevice::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  PARALAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
  PARALAB_CUDA(cudaStreamSynchronize(stream()));  // src is pageable host memory the caller owns
}

void CudaDevice::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  PARALAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  PARALAB_CUDA(cudaStreamSynchronize(stream()));
}

void CudaDevice::copy_on_device(void* dst, const void* src, std::size_t bytes) {
  PARALAB_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
}

void CudaDevice::fill_zero(void* dst, std::size_t bytes) {
  PARALAB_CUDA(cudaMemsetAsync(dst, 0, bytes, stream()));
}

void CudaDevice::copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t rows) {
  if (width == 0 || rows == 0) return;
  PARALAB_CUDA(
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, stream()));
}

namespace {

// The blocks freed while it was captured stay the graph's until it is destroyed: every replay
// uses them. Replays queued before that come first on the stream, so the cache may then reuse
// them at once. The graph must not outlive its device (it holds its stream and allocator).
class CudaGraph final : public CapturedWork {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, CudaDevice& device,
            CudaDevice::CaptureHold hold, nlohmann::json census)
      : exec_(exec),
        stream_(stream),
        device_(device),
        hold_(std::move(hold)),
        census_(std::move(census)) {}
  ~CudaGraph() override {
    if (cudaGraphExecDestroy(exec_) != cudaSuccess) log_error("cudaGraphExecDestroy failed");
    device_.restore(std::move(hold_));
  }
  void launch() override {
    step_trace_before_launch();  // PARALAB_STEP_TRACE: a few launches traced (step_trace.h)
    PARALAB_CUDA(cudaGraphLaunch(exec_, stream_));
    step_trace_after_launch(stream_);
  }
  nlohmann::json describe() const override { return {{"census", census_}}; }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  CudaDevice& device_;
  CudaDevice::CaptureHold hold_;  // the capture's freed blocks and marks' events
  nlohmann::json census_;         // of the graph as captured (core/graph_census.h)
};

}  // namespace

// No cudaSetDevice in record(), mark(), wait() or begin_capture(): an event and a stream need
// only be of one context, whatever device is current (CUDA Runtime API, cudaEventRecord), and
// the event pools set the device when they create one. These calls run once or more per message
// in the collectives, from every rank's thread.
Event CudaDevice::record() {
  capture_fault_point();
  auto event = std::make_shared<CudaEvent>(order_events_);
  PARALAB_CUDA(cudaEventRecord(event->get(), stream()));
  return event;
}

const void* CudaDevice::readable(const void* src, std::size_t bytes) {
  if (!peer_reads_staged_ || bytes == 0) return src;
  cudaPointerAttributes attr{};
  PARALAB_CUDA(cudaPointerGetAttributes(&attr, src));
  if (attr.type != cudaMemoryTypeDevice || attr.device == gpu_) return src;
  const bool comm = comm_thread_ == this;
  Staging& staging = staging_[comm ? 1 : 0];
  if (staging.bytes < bytes) {
    // The old buffer's readers come before any later user of its block in stream_'s order (see
    // deallocate): on stream_ by being queued there; on the communication stream by stream_
    // waiting for them here (a buffer grows a few times per run, never in a capture: the
    // allocation would miss the cache first).
    if (staging.ptr && comm) {
      const Event read = record();  // on this thread's stream: the communication stream
      PARALAB_CUDA(cudaStreamWaitEvent(stream_, static_cast<const CudaEvent&>(*read).get(), 0));
    }
    allocator_->deallocate(staging.ptr);
    staging = {};
    staging.ptr = allocate(bytes);  // on the communication thread, ordered after stream_
    staging.bytes = bytes;
  }
  PARALAB_CUDA(cudaMemcpyAsync(staging.ptr, src, bytes, cudaMemcpyDefault, stream()));
  return staging.ptr;
}

// In a capture a plain cudaEventRecord is only a dependency for other streams; a mark must be
// an event record node, which every replay records again (cudaEventRecordExternal), so that
// elapsed_ms after a replay reads that replay's times. The graph's holder keeps the marks (and
// so their pooled events) as long as the graph. The communication stream is in the capture
// once it has waited on an event the compute stream recorded there (data_parallel's
// overlapped buckets); its marks then time each replay's allreduces. The flag is invalid on a
// stream that is not capturing, so that stream is asked.
TimeMark CudaDevice::mark() {
  capture_fault_point();
  auto event = std::make_shared<CudaEvent>(timing_events_);
  const auto host = std::chrono::steady_clock::now();
  const cudaStream_t s = stream();
  bool in_capture = false;
  if (capturing_.load(std::memory_order_relaxed)) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (s != stream_) PARALAB_CUDA(cudaStreamIsCapturing(s, &status));
    in_capture = s == stream_ || status == cudaStreamCaptureStatusActive;
  }
  if (in_capture) {
    PARALAB_CUDA(cudaEventRecordWithFlags(event->get(), s, cudaEventRecordExternal));
    std::lock_guard lock(capture_marks_mu_);
    capture_marks_.push_back(event);  // held with the graph (CaptureHold)
  } else
    PARALAB_CUDA(cudaEventRecord(event->get(), s));
  return {host, event};
}

double CudaDevice::elapsed_ms(const TimeMark& a, const TimeMark& b) {
  const auto* ea = dynamic_cast<const CudaEvent*>(a.event.get());
  const auto* eb = dynamic_cast<const CudaEvent*>(b.event.get());
  PARALAB_REQUIRE(ea && eb, name() + ": elapsed_ms between marks of another device");
  float ms = 0;
  PARALAB_CUDA(cudaEventElapsedTime(&ms, ea->get(), eb->get()));
  return ms;
}

void CudaDevice::wait(const Event& event) {
  if (!event) return;
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  PARALAB_REQUIRE(e != nullptr, name() + ": cannot wait on another backend's event");
  PARALAB_CUDA(cudaStreamWaitEvent(stream(), e->get(), 0));
}

void CudaDevice::begin_capture() {
  PARALAB_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  allocator_->begin_capture();
  (void)take_capture_marks();
  ++captures_begun_;
  taken_in_capture_ = 0;
  capturing_ = true;
}

void CudaDevice::join_capture(cudaEvent_t fork) {
  PARALAB_CUDA(cudaStreamWaitEvent(stream_, fork, 0));
  allocator_->begin_capture();
  (void)take_capture_marks();
  ++captures_begun_;
  taken_in_capture_ = 0;
  capturing_ = true;
}

void CudaDevice::capture_fault_point() {
  if (capture_fault_.at == 0 || !capturing_.load(std::memory_order_relaxed) ||
      captures_begun_.load() != capture_fault_.capture || ++taken_in_capture_ != capture_fault_.at)
    return;
  PARALAB_CUDA(cudaStreamSynchronize(stream()));  // not allowed in a capture: it fails
}

std::vector<Event> CudaDevice::take_capture_marks() {
  std::lock_guard lock(capture_marks_mu_);
  return std::exchange(capture_marks_, {});
}

CudaDevice::CaptureHold CudaDevice::finish_capture() {
  capturing_ = false;
  CaptureHold hold;
  hold.blocks = allocator_->end_capture();
  hold.marks = take_capture_marks();
  return hold;
}

void CudaDevice::restore(CaptureHold hold) noexcept {
  allocator_->restore(std::move(hold.blocks));
  // hold.marks' events go back to the pool as the last of their marks goes.
}

void CudaDevice::cancel_capture() noexcept {
  capturing_ = false;
  allocator_->abort_capture();
  (void)take_capture_marks();
  (void)cudaGetLastError();  // a call refused in the broken capture: not this thread's next error
}

std::unique_ptr<CapturedWork> CudaDevice::end_capture() {
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  // A graph that cannot be made is CaptureFailed: the stream is out of capture and nothing of
  // the work ran, so a caller may run the same work eagerly. A failed capture replays nothing:
  // its blocks go back to the cache.
  const auto failed = [&](const char* call, cudaError_t e) {
    (void)cudaGetLastError();
    return CaptureFailed(name() + ": " + call + ": " + cudaGetErrorName(e) + ": " +
                         cudaGetErrorString(e));
  };
  if (ended != cudaSuccess) {
    allocator_->abort_capture();
    (void)take_capture_marks();
    if (graph) cudaGraphDestroy(graph);
    throw failed("cudaStreamEndCapture", ended);
  }
  CaptureHold hold;
  hold.blocks = allocator_->end_capture();
  hold.marks = take_capture_marks();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  nlohmann::json census = made == cudaSuccess ? graph_census_of(graph) : nlohmann::json();
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    restore(std::move(hold));
    throw failed("cudaGraphInstantiate", made);
  }
  return std::make_unique<CudaGraph>(exec, stream_, *this, std::move(hold), std::move(census));
}

void CudaDevice::abort_capture() noexcept {
  capturing_ = false;
  allocator_->abort_capture();
  (void)take_capture_marks();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) != cudaSuccess ||
      status == cudaStreamCaptureStatusNone)
    return;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);  // fails for an invalidated capture; either way it ends
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // clear the capture's sticky-free error state
}

void CudaDevice::synchronize() {
  PARALAB_CUDA(cudaStreamSynchronize(stream_));
  std::lock_guard lock(comm_mu_);
  if (comm_stream_) PARALAB_CUDA(cudaStreamSynchronize(comm_stream_));
}

thread_local const CudaDevice* CudaDevice::comm_thread_ = nullptr;

void CudaDevice::bind_comm_thread() {
  bind_thread();
  {
    std::lock_guard lock(comm_mu_);
    if (!comm_stream_) {
      std::string why;
      if (share_.stream) comm_stream_ = share_stream(share_, &why);  // the same SMs
      if (!comm_stream_)
        PARALAB_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      if (!why.empty()) comm_note_ = "the communication stream is not on the SM share: " + why;
    }
  }
  comm_thread_ = this;
}

void CudaDevice::bind_thread() { PARALAB_CUDA(cudaSetDevice(gpu_)); }

int usable_gpus(std::string* why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why_none) {
      // cudaErrorInsufficientDriver also means no driver at all, where the runtime's words
      // ("driver version is insufficient") would send the user to upgrade one.
      int driver = 0, runtime = 0;
      const bool know = cudaDriverGetVersion(&driver) == cudaSuccess &&
                        cudaRuntimeGetVersion(&runtime) == cudaSuccess;
      const auto version = [](int v) {
        return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
      };
      if (e == cudaErrorInsufficientDriver && know && driver == 0)
        *why_none = "no usable GPU: no NVIDIA driver found (libcuda)";
      else if (e == cudaErrorInsufficientDriver && know)
        *why_none = "no usable GPU: the NVIDIA driver supports CUDA " + version(driver) +
                    ", this build's runtime needs " + version(runtime);
      else
        *why_none = std::string("no usable GPU: ") + cudaGetErrorString(e);
    }
    cudaGetLastError();  // clear the sticky error for later calls
    return 0;
  }
  if (count == 0 && why_none) *why_none = "no usable GPU: no CUDA device";
  return count;
}

nlohmann::json gpu_properties() {
  nlohmann::json out = nlohmann::json::array();
  for (int gpu = 0, n = usable_gpus(); gpu < n; ++gpu) {
    cudaDeviceProp prop{};
    PARALAB_CUDA(cudaGetDeviceProperties(&prop, gpu));
    out.push_back({{"gpu", gpu}, {"gpu_model", prop.name}, {"sm_count", prop.multiProcessorCount}});
  }
  return out;
}

std::vector<std::unique_ptr<Device>> make_cuda_devices(int count, const DeviceOptions& options) {
  (void)capture_fault_from_env();  // a malformed value fails before anything is made
  std::string why;
  const int gpus = usable_gpus(&why);
  if (gpus == 0) throw Error("cuda: " + why);
  // Each device's GPU: from the device list, else round robin.
  std::vector<int> gpu_of = options.gpus;
  if (gpu_of.empty()) {
    // Unavailable, not Error: the machine cannot give this run (bench_runner records it as
    // skipped with the reason), nothing is wrong with it.
    if (count > gpus && !options.virtual_devices)
      throw Unavailable("cuda: " + std::to_string(count) + " devices asked for, " +
                        std::to_string(gpus) +
                        " GPU(s) present and virtual_devices is false (true places several "
                        "devices on one GPU)");
    for (int i = 0; i < count; ++i) gpu_of.push_back(i % gpus);
  }
  PARALAB_REQUIRE(static_cast<int>(gpu_of.size()) == count,
                  "cuda: a device list of " + std::to_string(gpu_of.size()) + " for " +
                      std::to_string(count) + " devices");
  std::vector<int> sharing(static_cast<std::size_t>(gpus), 0);
  for (int g : gpu_of) {
    if (g < 0 || g >= gpus)
      throw Error("cuda: the device list names cuda:" + std::to_string(g) + ", but " +
                  std::to_string(gpus) + " GPU(s) are present");
    ++sharing[static_cast<std::size_t>(g)];
  }
  // Peer access between the GPUs in use, where the hardware allows it: copies and reduction
  // kernels then read a peer's memory directly. peer[a * gpus + b]: a can read b's memory.
  std::vector<bool> peer(static_cast<std::size_t>(gpus * gpus), false);
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b) {
      int can = 0;
      if (a == b || !sharing[static_cast<std::size_t>(a)] || !sharing[static_cast<std::size_t>(b)])
        continue;
      PARALAB_CUDA(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      peer[static_cast<std::size_t>(a * gpus + b)] = true;
      PARALAB_CUDA(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) PARALAB_CUDA(e);
      cudaGetLastError();
    }
  // Where several devices share a GPU, each gets an equal share of its SMs as a green context
  // when asked for and possible.
  std::vector<std::vector<SmShare>> shares(static_cast<std::size_t>(gpus));
  std::vector<std::string> notes(static_cast<std::size_t>(gpus));
  for (int g = 0; g < gpus; ++g) {
    const int n = sharing[static_cast<std::size_t>(g)];
    if (n < 2) continue;
    if (options.green_contexts)
      shares[static_cast<std::size_t>(g)] = split_sms(g, n, &notes[static_cast<std::size_t>(g)]);
    else
      notes[static_cast<std::size_t>(g)] = "green contexts off (green_contexts: false)";
    if (!notes[static_cast<std::size_t>(g)].empty())
      notes[static_cast<std::size_t>(g)] = "no SM share: " + notes[static_cast<std::size_t>(g)];
  }
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<std::size_t> next(static_cast<std::size_t>(gpus), 0);
  // A GPU of the group that cannot read another's memory, or be read by it: its devices stage
  // peers' data for the reduction kernels (CudaDevice::readable).
  std::vector<bool> staged(static_cast<std::size_t>(gpus), false);
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b)
      if (a != b && sharing[static_cast<std::size_t>(a)] && sharing[static_cast<std::size_t>(b)] &&
          !peer[static_cast<std::size_t>(a * gpus + b)])
        staged[static_cast<std::size_t>(a)] = true;
  for (int i = 0; i < count; ++i) {
    const auto g = static_cast<std::size_t>(gpu_of[static_cast<std::size_t>(i)]);
    auto& mine = shares[g];
    const std::size_t j = next[g]++;
    SmShare share = j < mine.size() ? std::exchange(mine[j], SmShare{}) : SmShare{};
    auto device = std::make_unique<CudaDevice>(i, static_cast<int>(g), sharing[g], options.tf32,
                                               share, notes[g], options.kernels);
    device->set_peer_reads_staged(staged[g]);
    devices.push_back(std::move(device));
  }
  return devices;
}

nlohmann::json library_versions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  const size_t cudnn = cudnnGetVersion();
  nlohmann::json v = {
      {"cuda_runtime", std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10)},
      {"cudnn", std::to_string(cudnn / 10000) + "." + std::to_string(cudnn % 10000 / 100) + "." +
                    std::to_string(cudnn % 100)},
      {"cublas", blas_version()}};
#if PARALAB_HAVE_NCCL
  v["nccl"] = nccl_version();
#endif
  return v;
}

}  // namespace paralab::cuda
