// Launcher of the CUDA dropout kernel (dropout_kernels.cuh, launched by dropout.cu), with an
// explicit stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace paralab::cuda {

// out (n,f) = keep ? in * scale : 0, keep = dropout_uniform(seed, e0 + row, f0 + col) >= p
// (core/rng.h); out may alias in. The same call serves forward (x -> y) and backward (dy -> dx).
void dropout_apply(const float* in, float* out, int64_t n, int64_t f, float p, float scale,
                   uint64_t seed, int64_t e0, int64_t f0, cudaStream_t s);

}  // namespace paralab::cuda
