// Launcher of the dropout kernel (dropout_kernels.cuh).
#include "core/cuda/check.h"
#include "core/cuda/dropout.h"
#include "core/cuda/dropout_kernels.cuh"

namespace paralab::cuda {

void dropout_apply(const float* in, float* out, int64_t n, int64_t f, float p, float scale,
                   uint64_t seed, int64_t e0, int64_t f0, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t b = (n * f + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
  dropout::apply<<<blocks, kThreads, 0, s>>>(in, out, n, f, p, scale, seed, e0, f0);
  PARALAB_CUDA_LAUNCHED();
}

}  // namespace paralab::cuda
