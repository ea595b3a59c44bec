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

}  // namespace paralab::cuda
