// The fully connected layers' bias gradient as a parallel, fixed-order column sum, private to
// kernels.cu and to the CPU emulation test (tests/test_fused_kernels.cpp); the same restricted
// CUDA as conv_relu_pool_kernels.cuh.
#pragma once

#include <cstdint>

namespace paralab::cuda {

// db (cols) = column sums of dy (rows, cols): block x covers 32 columns; its kLanes row lanes sum
// rows lane, lane + kLanes, ... in order, then a fixed tree over the lanes.
template <int kLanes>
__global__ void __launch_bounds__(32 * kLanes)
    column_sums_tree(const float* __restrict__ dy, float* __restrict__ db, int64_t rows,
                     int64_t cols) {
  __shared__ float red[kLanes][32];
  const int col_in = static_cast<int>(threadIdx.x) % 32, lane = static_cast<int>(threadIdx.x) / 32;
  const int64_t col = int64_t{blockIdx.x} * 32 + col_in;
  float s = 0.0f;
  if (col < cols)
    for (int64_t r = lane; r < rows; r += kLanes) s += dy[r * cols + col];
  red[lane][col_in] = s;
  __syncthreads();
  for (int half = kLanes / 2; half > 0; half /= 2) {
    if (lane < half) red[lane][col_in] += red[lane + half][col_in];
    __syncthreads();
  }
  if (lane == 0 && col < cols) db[col] = red[0][col_in];
}

// The bias gradient of a convolution: db (C) = sums of dy (N, C, HW) over examples and positions,
// in two passes with a fixed partition of the batch into parts of `chunk` examples (the partition
// depends on N and C only, so the bits do not depend on how the GPU schedules blocks).
// channel_sums_partial: block (c, p) sums part p's chunk x HW values of channel c, thread t the
// flat indices t, t + kThreads, ... in order, then a fixed tree, into partial[p * C + c].
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    channel_sums_partial(const float* __restrict__ dy, float* __restrict__ partial, int n, int c,
                         int hw, int chunk) {
  __shared__ float red[kThreads];
  const int ch = static_cast<int>(blockIdx.x), p = static_cast<int>(blockIdx.y);
  const int n_begin = p * chunk, n_end = n_begin + chunk < n ? n_begin + chunk : n;
  const int count = (n_end - n_begin) * hw;  // at most chunk x HW (checked by the launcher)
  float s = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    const int e = i / hw, q = i - e * hw;
    s += dy[(int64_t{n_begin + e} * c + ch) * hw + q];
  }
  red[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) red[threadIdx.x] += red[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[int64_t{p} * c + ch] = red[0];
}

// db[c] = partial[0 * C + c] + partial[1 * C + c] + ... in order of the parts.
__global__ void channel_sums_finish(const float* __restrict__ partial, float* __restrict__ db,
                                    int c, int parts) {
  for (int ch = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); ch < c;
       ch += static_cast<int>(blockDim.x * gridDim.x)) {
    float s = 0.0f;
    for (int p = 0; p < parts; ++p) s += partial[int64_t{p} * c + ch];
    db[ch] = s;
  }
}

}  // namespace paralab::cuda
