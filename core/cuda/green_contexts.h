// Green contexts: an equal, disjoint share of a GPU's SMs for each virtual device on it, so that
// k virtual devices model k smaller GPUs instead of k streams contending for all SMs.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion, so that ParaLab never
// links libcuda (CI machines have none) and runs on drivers older than green contexts (12.4),
// where virtual devices fall back to plain streams and say why.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace paralab::cuda {

struct SmShare {
  CUgreenCtx context = nullptr;
  cudaStream_t stream = nullptr;  // a non-blocking stream of that green context
  int sm_count = 0;
};

// Splits GPU `gpu`'s SMs into `parts` equal shares (rounded down to the architecture's
// alignment), each a green context with a stream. Empty, with *why set, when the driver lacks
// green contexts or the SMs cannot be split that many ways.
std::vector<SmShare> split_sms(int gpu, int parts, std::string* why);

// Another non-blocking stream on the share's green context (its SMs), e.g. a device's
// communication stream; null, with *why set, if the driver refuses. The caller destroys it
// (cudaStreamDestroy) before the share is released.
cudaStream_t share_stream(const SmShare& share, std::string* why);

// Destroys a share's stream and context (for destructors: never throws).
void release(SmShare& share) noexcept;

// The context a device's kernels should run in: its share's green context as a CUcontext
// (cuCtxFromGreenCtx), or `stream`'s context without a share. Null, with *why set, if the driver
// cannot say.
CUcontext work_context(const SmShare& share, cudaStream_t stream, std::string* why);
// The context of each kernel node of `graph` (cuGraphKernelNodeGetParams): whether a graph
// captured from several devices' streams keeps each device's kernels on its own SM share. Empty,
// with *why set, if the driver cannot say. With `names`, each node's kernel name too, in the same
// order (as the driver gives it, mangled; empty where the driver cannot say).
std::vector<CUcontext> kernel_contexts(cudaGraph_t graph, std::string* why,
                                       std::vector<std::string>* names = nullptr);
// A kernel node's function name as the driver gives it (mangled); "" where it cannot say.
std::string kernel_node_name(cudaGraphNode_t node);

}  // namespace paralab::cuda
