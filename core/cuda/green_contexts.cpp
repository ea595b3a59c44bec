#include "core/cuda/green_contexts.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

namespace paralab::cuda {

namespace {

// The driver functions green contexts need, or why they are missing. Each is typed with
// cudaTypedefs.h's PFN_<symbol>_v<version> and looked up at that same version (PARALAB_DRIVER
// below, which will not compile otherwise): the driver returns the symbol's newest ABI not newer
// than the version asked for, and nothing when the symbol is newer than it (asking for
// cuGreenCtxStreamCreate, new in 12.5, at 12.4 finds nothing).
struct GreenApi {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetDevResource_v12040 get_resource = nullptr;
  PFN_cuDevSmResourceSplitByCount_v12040 split = nullptr;
  PFN_cuDevResourceGenerateDesc_v12040 generate_desc = nullptr;
  PFN_cuGreenCtxCreate_v12040 create = nullptr;
  PFN_cuGreenCtxStreamCreate_v12050 stream_create = nullptr;  // streams came with 12.5
  PFN_cuGreenCtxDestroy_v12040 destroy = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  std::string missing;  // empty when all were found
};

template <typename Fn>
void find(const char* symbol, int version, Fn& fn, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    if (missing.empty()) missing = std::string("the driver has no ") + symbol;
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

#define PARALAB_DRIVER(field, symbol, version)                                   \
  do {                                                                           \
    static_assert(std::is_same_v<decltype(g.field), PFN_##symbol##_v##version>); \
    find(#symbol, version, g.field, g.missing);                                  \
  } while (0)

const GreenApi& api() {
  static const GreenApi a = [] {
    GreenApi g;
    PARALAB_DRIVER(device_get, cuDeviceGet, 2000);
    PARALAB_DRIVER(get_resource, cuDeviceGetDevResource, 12040);
    PARALAB_DRIVER(split, cuDevSmResourceSplitByCount, 12040);
    PARALAB_DRIVER(generate_desc, cuDevResourceGenerateDesc, 12040);
    PARALAB_DRIVER(create, cuGreenCtxCreate, 12040);
    PARALAB_DRIVER(stream_create, cuGreenCtxStreamCreate, 12050);
    PARALAB_DRIVER(destroy, cuGreenCtxDestroy, 12040);
    PARALAB_DRIVER(error_string, cuGetErrorString, 6000);
    return g;
  }();
  return a;
}

// What kernel_contexts() needs: older than green contexts, and kept apart from them so that a
// driver without one still has the other.
struct GraphApi {
  PFN_cuGraphGetNodes_v10000 get_nodes = nullptr;
  PFN_cuGraphNodeGetType_v10000 node_type = nullptr;
  PFN_cuGraphKernelNodeGetParams_v12000 kernel_params = nullptr;
  PFN_cuStreamGetCtx_v9020 stream_ctx = nullptr;
  PFN_cuCtxFromGreenCtx_v12040 from_green = nullptr;
  std::string missing;
  // Kernel names for the description only (12.3): a driver without them leaves names empty.
  PFN_cuFuncGetName_v12030 func_name = nullptr;
  PFN_cuKernelGetName_v12030 kernel_name = nullptr;
};

const GraphApi& graph_api() {
  static const GraphApi a = [] {
    GraphApi g;
    PARALAB_DRIVER(get_nodes, cuGraphGetNodes, 10000);
    PARALAB_DRIVER(node_type, cuGraphNodeGetType, 10000);
    PARALAB_DRIVER(kernel_params, cuGraphKernelNodeGetParams, 12000);
    PARALAB_DRIVER(stream_ctx, cuStreamGetCtx, 9020);
    PARALAB_DRIVER(from_green, cuCtxFromGreenCtx, 12040);
    std::string optional;  // not required: a missing one costs the names only
    find("cuFuncGetName", 12030, g.func_name, optional);
    find("cuKernelGetName", 12030, g.kernel_name, optional);
    return g;
  }();
  return a;
}

#undef PARALAB_DRIVER

std::string describe(CUresult r, const char* call) {
  const char* s = nullptr;
  if (api().error_string) api().error_string(r, &s);
  return std::string(call) + " failed: " + (s ? s : "error " + std::to_string(int(r)));
}

// A kernel node's function name, as the driver gives it (mangled); "" where it cannot say.
std::string kernel_name(const GraphApi& g, const CUDA_KERNEL_NODE_PARAMS_v2& params) {
  const char* name = nullptr;
  if (params.func && g.func_name && g.func_name(&name, params.func) != CUDA_SUCCESS) name = nullptr;
  if (!name && params.kern && g.kernel_name && g.kernel_name(&name, params.kern) != CUDA_SUCCESS)
    name = nullptr;
  return name ? name : "";
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

cudaStream_t share_stream(const SmShare& share, std::string* why) {
  const GreenApi& g = api();
  CUstream stream = nullptr;
  if (!g.stream_create) {
    *why = "the driver has no cuGreenCtxStreamCreate";
    return nullptr;
  }
  if (const CUresult r = g.stream_create(&stream, share.context, CU_STREAM_NON_BLOCKING, 0);
      r != CUDA_SUCCESS) {
    *why = describe(r, "cuGreenCtxStreamCreate");
    return nullptr;
  }
  return stream;
}

void release(SmShare& share) noexcept {
  if (share.stream) cudaStreamDestroy(share.stream);
  if (share.context && api().destroy) api().destroy(share.context);
  share = SmShare{};
}

CUcontext work_context(const SmShare& share, cudaStream_t stream, std::string* why) {
  const GraphApi& g = graph_api();
  if (!g.missing.empty()) {
    *why = g.missing;
    return nullptr;
  }
  CUcontext ctx = nullptr;
  const CUresult r = share.context ? g.from_green(&ctx, share.context)
                                   : g.stream_ctx(reinterpret_cast<CUstream>(stream), &ctx);
  if (r != CUDA_SUCCESS) {
    *why = describe(r, share.context ? "cuCtxFromGreenCtx" : "cuStreamGetCtx");
    return nullptr;
  }
  return ctx;
}

std::vector<CUcontext> kernel_contexts(cudaGraph_t graph, std::string* why,
                                       std::vector<std::string>* names) {
  const GraphApi& g = graph_api();
  if (!g.missing.empty()) {
    *why = g.missing;
    return {};
  }
  const auto h = reinterpret_cast<CUgraph>(graph);
  std::size_t n = 0;
  CUresult r = g.get_nodes(h, nullptr, &n);
  std::vector<CUgraphNode> nodes(n);
  if (r == CUDA_SUCCESS && n) r = g.get_nodes(h, nodes.data(), &n);
  if (r != CUDA_SUCCESS) {
    *why = describe(r, "cuGraphGetNodes");
    return {};
  }
  std::vector<CUcontext> out;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    if ((r = g.node_type(node, &type)) != CUDA_SUCCESS) {
      *why = describe(r, "cuGraphNodeGetType");
      return {};
    }
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
    CUDA_KERNEL_NODE_PARAMS_v2 params{};
    if ((r = g.kernel_params(node, &params)) != CUDA_SUCCESS) {
      *why = describe(r, "cuGraphKernelNodeGetParams");
      return {};
    }
    out.push_back(params.ctx);
    if (names) names->push_back(kernel_name(g, params));
  }
  return out;
}

std::string kernel_node_name(cudaGraphNode_t node) {
  const GraphApi& g = graph_api();
  CUDA_KERNEL_NODE_PARAMS_v2 params{};
  if (!g.missing.empty() ||
      g.kernel_params(reinterpret_cast<CUgraphNode>(node), &params) != CUDA_SUCCESS)
    return "";
  return kernel_name(g, params);
}

}  // namespace paralab::cuda
