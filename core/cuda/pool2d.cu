// Launchers of the pooling kernels (pool2d_kernels.cuh says how they work).
#include "core/cuda/check.h"
#include "core/cuda/pool2d.h"
#include "core/cuda/pool2d_kernels.cuh"

namespace paralab::cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride kernels: enough blocks for one element per thread, capped.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

void maxpool2d_forward(const float* x, float* y, int32_t* argmax, const PoolGeometry& g,
                       cudaStream_t s) {
  pool::max_forward<<<blocks_for(g.planes * g.oh * g.ow), kThreads, 0, s>>>(x, y, argmax, g);
  PARALAB_CUDA_LAUNCHED();
}

void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, const PoolGeometry& g,
                        cudaStream_t s) {
  pool::max_backward<<<blocks_for(g.planes * g.h * g.w), kThreads, 0, s>>>(dy, argmax, dx, g);
  PARALAB_CUDA_LAUNCHED();
}

void avgpool2d_forward(const float* x, float* y, const PoolGeometry& g, cudaStream_t s) {
  pool::avg_forward<<<blocks_for(g.planes * g.oh * g.ow), kThreads, 0, s>>>(x, y, g);
  PARALAB_CUDA_LAUNCHED();
}

void avgpool2d_backward(const float* dy, float* dx, const PoolGeometry& g, cudaStream_t s) {
  pool::avg_backward<<<blocks_for(g.planes * g.h * g.w), kThreads, 0, s>>>(dy, dx, g);
  PARALAB_CUDA_LAUNCHED();
}

}  // namespace paralab::cuda
