// ParaLab's resize kernel, private to resize.cu and to the CPU emulation test
// (tests/test_model_kernels.cpp): one thread per output pixel (grid-stride), reading its input
// pixels through core/resize_coords.h, the coordinate rules the CPU loops use.
#pragma once

#include <cstdint>

#include "core/resize_coords.h"

namespace paralab::cuda::resize {

// x (planes,h,w) -> y (planes,oh,ow), nearest or bilinear.
__global__ void images(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t oh,
                       int64_t ow, bool bilinear) {
  const int64_t n = planes * oh * ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n;
       o += int64_t{blockDim.x} * gridDim.x) {
    const int64_t j = o % ow, i = (o / ow) % oh, plane = o / (ow * oh);
    const float* src = x + plane * h * w;
    if (!bilinear) {
      y[o] = src[resize_nearest_index(i, h, oh) * w + resize_nearest_index(j, w, ow)];
      continue;
    }
    const ResizeTap th = resize_linear_tap(i, h, oh), tw = resize_linear_tap(j, w, ow);
    const float* lo = src + th.lo * w;
    const float* hi = src + th.hi * w;
    // PyTorch's order of operations (upsample_bilinear2d), as the CPU loops.
    y[o] = (1.0f - th.frac) * ((1.0f - tw.frac) * lo[tw.lo] + tw.frac * lo[tw.hi]) +
           th.frac * ((1.0f - tw.frac) * hi[tw.lo] + tw.frac * hi[tw.hi]);
  }
}

}  // namespace paralab::cuda::resize
