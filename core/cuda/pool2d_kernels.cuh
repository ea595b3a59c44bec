// ParaLab's own pooling kernels, private to pool2d.cu and to the CPU emulation test
// (tests/test_model_kernels.cpp), which runs these very functions with one host thread per CUDA
// thread. Own kernels rather than cuDNN's so that max pooling's ties follow the stated rule (the
// first maximum in window order) on every GPU: forward records each window's winner, and
// backward GATHERS, one thread per input element summing over the few windows that hold it in a
// fixed order, so nothing is added atomically and results repeat to the bit.
//
// All kernels are grid-stride loops over their outputs: any grid gives the same results.
#pragma once

#include <cstdint>

#include "core/cuda/pool2d_geometry.h"

namespace paralab::cuda::pool {

__global__ void max_forward(const float* x, float* y, int32_t* argmax, PoolGeometry g) {
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n;
       o += int64_t{blockDim.x} * gridDim.x) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, plane = o / (g.ow * g.oh);
    const float* xp = x + plane * g.h * g.w;
    int64_t best = -1;
    float best_v = 0.0f;
    for (int64_t r = 0; r < g.kh; ++r) {
      const int64_t hh = i * g.sh + r - g.ph;
      if (hh < 0 || hh >= g.h) continue;  // padding never wins
      for (int64_t c = 0; c < g.kw; ++c) {
        const int64_t vv = j * g.sw + c - g.pw;
        if (vv < 0 || vv >= g.w) continue;
        const float v = xp[hh * g.w + vv];
        if (best < 0 || v > best_v) {  // strictly greater: the first maximum stays
          best = hh * g.w + vv;
          best_v = v;
        }
      }
    }
    y[o] = best_v;
    if (argmax) argmax[o] = static_cast<int32_t>(best);
  }
}

// The windows along one dimension that hold input index e: those i in [0, o) with
// i*s - p <= e <= i*s - p + k - 1, as [lo, hi] (empty when lo > hi: a row floor mode drops).
__device__ inline void windows_holding(int64_t e, int64_t k, int64_t s, int64_t p, int64_t o,
                                       int64_t& lo, int64_t& hi) {
  const int64_t top = e + p;
  lo = top - k + 1 > 0 ? (top - k + 1 + s - 1) / s : 0;
  hi = top / s < o - 1 ? top / s : o - 1;
}

__global__ void max_backward(const float* dy, const int32_t* argmax, float* dx, PoolGeometry g) {
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t vv = e % g.w, hh = (e / g.w) % g.h, plane = e / (g.w * g.h);
    const int64_t self = hh * g.w + vv;
    int64_t i0, i1, j0, j1;
    windows_holding(hh, g.kh, g.sh, g.ph, g.oh, i0, i1);
    windows_holding(vv, g.kw, g.sw, g.pw, g.ow, j0, j1);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = (plane * g.oh + i) * g.ow + j;
        if (argmax[o] == self) sum += dy[o];
      }
    dx[e] = sum;
  }
}

__global__ void avg_forward(const float* x, float* y, PoolGeometry g) {
  const int64_t n = g.planes * g.oh * g.ow;
  const float inv = 1.0f / static_cast<float>(g.kh * g.kw);
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n;
       o += int64_t{blockDim.x} * gridDim.x) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, plane = o / (g.ow * g.oh);
    const float* xp = x + plane * g.h * g.w;
    float sum = 0.0f;
    for (int64_t r = 0; r < g.kh; ++r) {
      const int64_t hh = i * g.sh + r - g.ph;
      if (hh < 0 || hh >= g.h) continue;  // padding adds zero
      for (int64_t c = 0; c < g.kw; ++c) {
        const int64_t vv = j * g.sw + c - g.pw;
        if (vv >= 0 && vv < g.w) sum += xp[hh * g.w + vv];
      }
    }
    y[o] = sum * inv;
  }
}

__global__ void avg_backward(const float* dy, float* dx, PoolGeometry g) {
  const int64_t n = g.planes * g.h * g.w;
  const float inv = 1.0f / static_cast<float>(g.kh * g.kw);
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t vv = e % g.w, hh = (e / g.w) % g.h, plane = e / (g.w * g.h);
    int64_t i0, i1, j0, j1;
    windows_holding(hh, g.kh, g.sh, g.ph, g.oh, i0, i1);
    windows_holding(vv, g.kw, g.sw, g.pw, g.ow, j0, j1);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) sum += dy[(plane * g.oh + i) * g.ow + j];
    dx[e] = sum * inv;
  }
}

}  // namespace paralab::cuda::pool
