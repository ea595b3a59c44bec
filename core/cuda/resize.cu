// Launcher of the resize kernel (resize_kernels.cuh).
#include "core/cuda/check.h"
#include "core/cuda/resize.h"
#include "core/cuda/resize_kernels.cuh"

namespace paralab::cuda {

void resize_images(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t oh,
                   int64_t ow, bool bilinear, cudaStream_t s) {
  constexpr int kThreads = 256;
  const int64_t b = (planes * oh * ow + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
  resize::images<<<blocks, kThreads, 0, s>>>(x, y, planes, h, w, oh, ow, bilinear);
  PARALAB_CUDA_LAUNCHED();
}

}  // namespace paralab::cuda
