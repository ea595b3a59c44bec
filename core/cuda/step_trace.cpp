#include "core/cuda/step_trace.h"

#include <cuda_runtime.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/step_trace_summary.h"

#if PARALAB_HAVE_CUPTI_HEADERS
#include <cupti.h>
#endif

namespace paralab::cuda {

namespace {

// A count from the environment: `fallback` when unset; an Error naming the variable when it is
// not a whole number of at least `least`.
int64_t env_count(const char* name, int64_t fallback, int64_t least) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < least)
    throw Error(std::string(name) + "=" + v + ": not a whole number of at least " +
                std::to_string(least));
  return n;
}

#if PARALAB_HAVE_CUPTI_HEADERS
// A kernel's name as ncu prints it ("void crp::data_gemm<128, ...>(...)"), or as CUPTI gave it
// where it does not demangle.
std::string demangled(const char* name) {
  if (!name) return "";
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && plain ? plain : name;
  std::free(plain);
  return out;
}
#endif

class Tracer {
 public:
  // Never destroyed: CUPTI may hand buffers back from its own thread as the process ends.
  static Tracer& get() {
    static Tracer* t = new Tracer;
    return *t;
  }

  // Launches may come from several threads at once (a step graph per device, each launched by
  // its rank's thread): each launch keeps its number between before() and after() (a thread's
  // own), starting and finishing hold state_mu_, and the trace ends once every traced launch is
  // queued (TraceWindow). The first traced launch starts the trace before it is queued, so the
  // last to be queued finds it started.
  void before() {
    if (path_.empty() || done_) return;
    launch_number_ = window_->begin();
    if (window_->first(launch_number_)) start();
  }

  void after(cudaStream_t stream) {
    if (path_.empty() || done_) return;
    const int64_t n = std::exchange(launch_number_, 0);
    if (!window_->traced(n)) return;
    std::lock_guard lock(state_mu_);
    if (std::find(streams_.begin(), streams_.end(), stream) == streams_.end())
      streams_.push_back(stream);
    if (window_->queued(n) && started_) finish_locked();
  }

#if PARALAB_HAVE_CUPTI_HEADERS
  // CUPTI's buffers: asked for when it has records to write, handed back full (or at a flush).
  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = kBufferBytes;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *max_records = 0;  // as many as fit
  }
  static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    get().read(buffer, valid);
    std::free(buffer);
  }
#endif

 private:
  Tracer() {
    if (const char* p = std::getenv("PARALAB_STEP_TRACE"); p && *p) path_ = p;
    if (path_.empty()) return;
    after_ = env_count("PARALAB_STEP_TRACE_AFTER", 50, 0);
    count_ = env_count("PARALAB_STEP_TRACE_LAUNCHES", 4, 1);
    window_ = std::make_unique<TraceWindow>(after_, count_);
  }

#if PARALAB_HAVE_CUPTI_HEADERS
  static constexpr size_t kBufferBytes = 8u << 20;
  static constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                  CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET};
  struct Api {
    decltype(&cuptiGetVersion) version = nullptr;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
  };

  // "" when CUPTI is loaded and its activities enabled; else why not.
  std::string load() {
    const std::string versioned = "libcupti.so." + std::to_string(CUDART_VERSION / 1000);
    const char* given = std::getenv("PARALAB_CUPTI_LIBRARY");
    void* lib = given && *given ? dlopen(given, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!lib) lib = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      return "cannot load " + (given && *given ? std::string(given) + ", " : std::string()) +
             versioned + " or libcupti.so (" + dlerror() +
             "): name it in PARALAB_CUPTI_LIBRARY or put its directory (the CUDA toolkit's "
             "extras/CUPTI/lib64, or the nvidia-cuda-cupti wheel's lib) in LD_LIBRARY_PATH";
    const auto resolve = [&](const char* symbol, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      return fn != nullptr;
    };
    if (!resolve("cuptiGetVersion", api_.version) || !resolve("cuptiActivityEnable", api_.enable) ||
        !resolve("cuptiActivityDisable", api_.disable) ||
        !resolve("cuptiActivityRegisterCallbacks", api_.register_callbacks) ||
        !resolve("cuptiActivityFlushAll", api_.flush_all) ||
        !resolve("cuptiActivityGetNextRecord", api_.next_record) ||
        !resolve("cuptiGetResultString", api_.result_string))
      return versioned + " lacks a CUPTI activity function the build's headers declare";
    // Records are read in the layouts of this build's headers, which a library of another CUDA
    // minor release may not write (CUPTI_API_VERSION is xxyyzz: CUDA major, minor, CUPTI's own
    // update); and 13.0's first release could deadlock disabling kernel records.
    uint32_t loaded = 0;
    if (const CUptiResult r = api_.version(&loaded); r != CUPTI_SUCCESS)
      return failed("cuptiGetVersion", r);
    if (const std::string why = cupti_version_mismatch(loaded, CUPTI_API_VERSION); !why.empty())
      return why;
    if (const CUptiResult r = api_.register_callbacks(&requested, &completed); r != CUPTI_SUCCESS)
      return failed("cuptiActivityRegisterCallbacks", r);
    for (std::size_t i = 0; i < std::size(kKinds); ++i)
      if (const CUptiResult r = api_.enable(kKinds[i]); r != CUPTI_SUCCESS) {
        for (std::size_t j = 0; j < i; ++j) api_.disable(kKinds[j]);
        return failed("cuptiActivityEnable", r);
      }
    return "";
  }

  std::string failed(const char* call, CUptiResult r) const {
    const char* s = nullptr;
    if (api_.result_string) api_.result_string(r, &s);
    return std::string(call) + " failed: " + (s ? s : "CUPTI error " + std::to_string(int(r)));
  }

  void read(uint8_t* buffer, size_t valid) {
    std::lock_guard lock(mu_);
    if (written_) return;  // records CUPTI hands back after the trace was written
    CUpti_Activity* rec = nullptr;
    while (api_.next_record && api_.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      TraceRecord t;
      // Each kind's record in the layout of this build's headers; the fields read here (kind,
      // start, end, name, bytes) lead every version of it.
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          t.kind = TraceRecord::Kind::Kernel;
          t.name = demangled(k->name);
          t.start_ns = k->start;
          t.end_ns = k->end;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          t.kind = TraceRecord::Kind::Copy;
          t.bytes = static_cast<int64_t>(m->bytes);
          t.start_ns = m->start;
          t.end_ns = m->end;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          t.kind = TraceRecord::Kind::Fill;
          t.bytes = static_cast<int64_t>(m->bytes);
          t.start_ns = m->start;
          t.end_ns = m->end;
          break;
        }
        default:
          continue;
      }
      // A record without both ends (the GPU's clock read 0 for it) is counted, not summed.
      if (t.start_ns == 0 || t.end_ns < t.start_ns) {
        ++incomplete_;
        continue;
      }
      records_.push_back(std::move(t));
    }
  }
#endif

  void start() {
    std::lock_guard lock(state_mu_);
#if PARALAB_HAVE_CUPTI_HEADERS
    error_ = load();
#else
    error_ = "this build has no CUPTI headers (cupti.h; CMake says where it looked)";
#endif
    started_ = true;
    if (!error_.empty()) finish_locked();
  }

  // After the last traced launch (or at once, when tracing could not start): every record
  // collected, the trace written beside its summary, atomically. The traced launches' streams
  // are waited for, not the device: another thread may be capturing a graph on this GPU, and a
  // device-wide synchronisation would break its capture.
  void finish_locked() {
    if (done_) return;
    done_ = true;
    nlohmann::json out = {{"after_launches", after_}, {"launches", count_}};
#if PARALAB_HAVE_CUPTI_HEADERS
    if (error_.empty()) {
      for (cudaStream_t s : streams_)
        if (cudaStreamSynchronize(s) != cudaSuccess) (void)cudaGetLastError();
      for (CUpti_ActivityKind k : kKinds) api_.disable(k);
      if (const CUptiResult r = api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
          r != CUPTI_SUCCESS)
        error_ = failed("cuptiActivityFlushAll", r);
    }
#endif
    std::lock_guard lock(mu_);
    written_ = true;
    if (!error_.empty()) {
      out["error"] = error_;
    } else {
      uint64_t first = UINT64_MAX;
      for (const TraceRecord& r : records_) first = std::min(first, r.start_ns);
      nlohmann::json list = nlohmann::json::array();
      for (const TraceRecord& r : records_)
        list.push_back({{"kind", r.kind == TraceRecord::Kind::Kernel ? "kernel"
                                 : r.kind == TraceRecord::Kind::Copy ? "copy"
                                                                     : "fill"},
                        {"name", r.name},
                        {"start_ns", r.start_ns - first},
                        {"end_ns", r.end_ns - first},
                        {"bytes", r.bytes}});
      out["summary"] = trace_summary(records_, static_cast<int>(count_));
      if (incomplete_) out["incomplete_records"] = incomplete_;
      out["records"] = std::move(list);
    }
    const std::string tmp = path_ + ".partial";
    {
      std::ofstream f(tmp);
      f << out.dump(1) << "\n";
      if (!f) {
        log_error("step trace: cannot write " + tmp);
        return;
      }
    }
    if (std::rename(tmp.c_str(), path_.c_str()) != 0)
      log_error("step trace: cannot rename " + tmp + " to " + path_);
  }

  std::string path_;
  int64_t after_ = 0, count_ = 0;
  std::unique_ptr<TraceWindow> window_;  // queued() under state_mu_
  // This thread's launch between before() and after().
  static inline thread_local int64_t launch_number_ = 0;
  std::atomic<bool> done_{false};
  std::mutex state_mu_;                // start and finish
  bool started_ = false;               // under state_mu_
  std::vector<cudaStream_t> streams_;  // the traced launches' streams, under state_mu_
  std::mutex mu_;  // records_, incomplete_, written_ (CUPTI's thread adds records)
  bool written_ = false;
  std::vector<TraceRecord> records_;
  int64_t incomplete_ = 0;
  std::string error_;
#if PARALAB_HAVE_CUPTI_HEADERS
  Api api_;
#endif
};

}  // namespace

std::string cupti_version_mismatch(uint32_t loaded, uint32_t built) {
  const auto name = [](uint32_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + " (API version " +
           std::to_string(v) + ")";
  };
  if (loaded / 100 != built / 100)
    return "the CUPTI library loaded is CUDA " + name(loaded) + ", this build's headers CUDA " +
           name(built) + ": its records may have other layouts; load the library of the " +
           "headers' release (PARALAB_CUPTI_LIBRARY)";
  if (loaded == 130000)
    return "CUPTI 13.0 before Update 1 (API version 130000) can deadlock disabling kernel "
           "records; load 13.0 Update 1 or later (PARALAB_CUPTI_LIBRARY)";
  return "";
}

void step_trace_before_launch() { Tracer::get().before(); }
void step_trace_after_launch(CUstream_st* stream) { Tracer::get().after(stream); }

}  // namespace paralab::cuda
