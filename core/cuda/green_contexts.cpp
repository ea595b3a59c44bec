#include "core/cuda/green_contexts.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace paralab::cuda {

namespace {

// The driver functions green contexts need, or why they are missing.
struct GreenApi {
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&cuDevSmResourceSplitByCount) split = nullptr;
  decltype(&cuDevResourceGenerateDesc) generate_desc = nullptr;
  decltype(&cuGreenCtxCreate) create = nullptr;
  decltype(&cuGreenCtxStreamCreate) stream_create = nullptr;
  decltype(&cuGreenCtxDestroy) destroy = nullptr;
  decltype(&cuGetErrorString) error_string = nullptr;
  std::string missing;  // empty when all were found
};

template <typename Fn>
void find(const char* symbol, Fn& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  // 12040: the CUDA version that introduced green contexts, and these functions' ABI.
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12040, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    if (missing.empty()) missing = std::string("the driver has no ") + symbol;
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

const GreenApi& api() {
  static const GreenApi a = [] {
    GreenApi g;
    find("cuDeviceGet", g.device_get, g.missing);
    find("cuDeviceGetDevResource", g.get_resource, g.missing);
    find("cuDevSmResourceSplitByCount", g.split, g.missing);
    find("cuDevResourceGenerateDesc", g.generate_desc, g.missing);
    find("cuGreenCtxCreate", g.create, g.missing);
    find("cuGreenCtxStreamCreate", g.stream_create, g.missing);
    find("cuGreenCtxDestroy", g.destroy, g.missing);
    find("cuGetErrorString", g.error_string, g.missing);
    return g;
  }();
  return a;
}

std::string describe(CUresult r, const char* call) {
  const char* s = nullptr;
  if (api().error_string) api().error_string(r, &s);
  return std::string(call) + " failed: " + (s ? s : "error " + std::to_string(int(r)));
}

}  // namespace

std::vector<SmShare> split_sms(int gpu, int parts, std::string* why) {
  const GreenApi& g = api();
  if (!g.missing.empty()) {
    *why = g.missing;
    return {};
  }
  // The primary context first: green contexts retain it, and creating it here is cheaper.
  if (cudaSetDevice(gpu) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    cudaGetLastError();
    *why = "cannot initialise GPU " + std::to_string(gpu);
    return {};
  }
  CUdevice dev = 0;
  CUresult r = g.device_get(&dev, gpu);
  if (r != CUDA_SUCCESS) {
    *why = describe(r, "cuDeviceGet");
    return {};
  }
  CUdevResource whole{};
  if ((r = g.get_resource(dev, &whole, CU_DEV_RESOURCE_TYPE_SM)) != CUDA_SUCCESS) {
    *why = describe(r, "cuDeviceGetDevResource");
    return {};
  }
  const unsigned total = whole.sm.smCount;
  const unsigned align = std::max(1u, whole.sm.smCoscheduledAlignment);
  const unsigned each = total / static_cast<unsigned>(parts) / align * align;
  if (each == 0 || each < whole.sm.minSmPartitionSize) {
    *why = std::to_string(total) + " SMs cannot be split " + std::to_string(parts) +
           " ways (at least " + std::to_string(std::max(align, whole.sm.minSmPartitionSize)) +
           " each)";
    return {};
  }
  std::vector<CUdevResource> groups(static_cast<std::size_t>(parts));
  unsigned got = static_cast<unsigned>(parts);
  CUdevResource rest{};
  if ((r = g.split(groups.data(), &got, &whole, &rest, 0, each)) != CUDA_SUCCESS) {
    *why = describe(r, "cuDevSmResourceSplitByCount");
    return {};
  }
  if (got < static_cast<unsigned>(parts)) {
    *why = "the driver made " + std::to_string(got) + " SM groups of " + std::to_string(each) +
           ", not " + std::to_string(parts);
    return {};
  }
  std::vector<SmShare> shares;
  for (int i = 0; i < parts; ++i) {
    SmShare s;
    CUdevResourceDesc desc = nullptr;
    CUstream stream = nullptr;
    if ((r = g.generate_desc(&desc, &groups[static_cast<std::size_t>(i)], 1)) != CUDA_SUCCESS ||
        (r = g.create(&s.context, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM)) != CUDA_SUCCESS ||
        (r = g.stream_create(&stream, s.context, CU_STREAM_NON_BLOCKING, 0)) != CUDA_SUCCESS) {
      *why = describe(r, "creating a green context");
      release(s);
      for (SmShare& made : shares) release(made);
      return {};
    }
    s.stream = stream;
    s.sm_count = static_cast<int>(groups[static_cast<std::size_t>(i)].sm.smCount);
    shares.push_back(s);
  }
  return shares;
}

void release(SmShare& share) noexcept {
  if (share.stream) cudaStreamDestroy(share.stream);
  if (share.context && api().destroy) api().destroy(share.context);
  share = SmShare{};
}

}  // namespace paralab::cuda
