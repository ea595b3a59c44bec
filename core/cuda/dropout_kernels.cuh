// ParaLab's dropout kernel, private to dropout.cu and to the CPU emulation test
// (tests/test_model_kernels.cpp). Each thread hashes its own global coordinates with
// dropout_uniform (core/rng.h), the function the CPU backend and the reference call, so the mask
// is the same bits on every backend and in every sharding. A grid-stride loop: any grid gives
// the same result.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace paralab::cuda::dropout {

// out (n,f) = keep ? in * scale : 0, keep = dropout_uniform(seed, e0 + row, f0 + col) >= p.
__global__ void apply(const float* in, float* out, int64_t n, int64_t f, float p, float scale,
                      uint64_t seed, int64_t e0, int64_t f0) {
  const int64_t total = n * f;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{blockDim.x} * gridDim.x) {
    const bool keep = dropout_uniform(seed, e0 + k / f, f0 + k % f) >= p;
    out[k] = keep ? in[k] * scale : 0.0f;
  }
}

}  // namespace paralab::cuda::dropout
