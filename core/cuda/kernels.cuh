// The CUDA backend's elementwise, loss, update and gather kernels, private to kernels.cu and to
// the CPU emulation test (tests/test_model_kernels.cpp); the same restricted CUDA as
// conv_relu_pool_kernels.cuh (no warp shuffles, atomics or dynamic shared memory). Every kernel
// but softmax_xent is a grid-stride loop, so any grid gives the same bits; softmax_xent runs as
// one block of kThreads threads and sums in a fixed order.
#pragma once

#include <cstdint>

#include "core/cuda/group_moves.h"

namespace paralab::cuda::own {

// softmax_xent's block size (its shared arrays' length; a power of two for the tree).
constexpr int kThreads = 256;

__global__ void relu_forward_k(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    y[i] = fmaxf(x[i], 0.0f);
}

__global__ void relu_backward_k(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void add_bias_rows_k(float* y, const float* b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    y[i] += b[i % cols];
}

// One block: each thread handles rows strided by the block size, then a fixed-order tree
// reduction in shared memory makes the totals independent of scheduling.
__global__ void softmax_xent_k(const float* z, const int32_t* labels, float* dz, float* stats,
                               int64_t rows, int64_t classes) {
  __shared__ double loss_sh[kThreads];
  __shared__ double correct_sh[kThreads];
  double loss = 0.0, correct = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float* row = z + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    const float m = row[best];
    float sum = 0.0f;
    for (int64_t c = 0; c < classes; ++c) sum += expf(row[c] - m);
    const int32_t label = labels[r];
    loss += static_cast<double>(logf(sum) + m - row[label]);
    correct += best == label ? 1.0 : 0.0;
    if (dz) {
      float* drow = dz + r * classes;
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < classes; ++c) drow[c] = expf(row[c] - m) * inv;
      drow[label] -= 1.0f;
    }
  }
  loss_sh[threadIdx.x] = loss;
  correct_sh[threadIdx.x] = correct;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      loss_sh[threadIdx.x] += loss_sh[threadIdx.x + stride];
      correct_sh[threadIdx.x] += correct_sh[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[0] = static_cast<float>(loss_sh[0]);
    stats[1] = static_cast<float>(correct_sh[0]);
  }
}

__global__ void sgd_k(float* p, const float* g, float step, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    p[i] -= step * g[i];
}

__global__ void sgd_at_k(float* p, const float* g, const float* step, int64_t n) {
  const float s = *step;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    p[i] -= s * g[i];
}

__global__ void set_scalar_k(float* p, float value) { *p = value; }

// set_scalars' values, passed by value as the kernel's argument (no host copy to wait for).
struct ScalarBlock {
  static constexpr int kMax = 64;
  float v[kMax];
};

__global__ void set_scalars_k(float* p, ScalarBlock values, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = values.v[i];
}

__global__ void add_k(float* d, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    d[i] += x[i];
}

// The minibatch gather: x row r = images row idx[r], y[r] = labels[idx[r]]. Block b copies rows
// b, b + gridDim.x, ..., its threads the row's floats t, t + blockDim.x, ... (no division per
// element: a 64-bit one took most of the 4.2 us this gather took per LeNet step on an H200).
__global__ void gather_k(const float* __restrict__ images, const int32_t* __restrict__ labels,
                         const int32_t* __restrict__ idx, int64_t count, int64_t row,
                         float* __restrict__ x, int32_t* __restrict__ y) {
  for (int64_t r = blockIdx.x; r < count; r += gridDim.x) {
    const int64_t src = idx[r];
    const float* from = images + src * row;
    float* to = x + r * row;
    for (int64_t c = threadIdx.x; c < row; c += blockDim.x) to[c] = from[c];
    if (threadIdx.x == 0) y[r] = labels[src];
  }
}

// A collective's moves over virtual devices of one GPU, all ranks at once (group_moves.h; the
// transport's whole steps and whole collectives): move m is dst = src0 (a copy), or
// dst = (dst + src0) + src1 over its sources in order (an add: the bits of adding the messages
// one by one). Block b takes floats [b T, (b + 1) T) of every move, phase after phase, with a
// block barrier between phases: what a phase writes, the next reads from the same block (the
// launcher puts moves that would break that in separate launches). Within a phase the block's
// threads share its moves' floats, kMovePerThread loads in flight each.
__global__ void group_moves_k(GroupMovesArgs a) {
  const int64_t tile = int64_t{1} << a.tile_shift;
  const int64_t base = blockIdx.x * tile;
  const int64_t stride = int64_t{blockDim.x} * kMovePerThread;
  for (int first = 0; first < a.count;) {
    int end = first + 1;
    while (end < a.count && !a.starts_phase[end]) ++end;
    const int64_t items = int64_t{end - first} << a.tile_shift;
    for (int64_t q0 = threadIdx.x; q0 < items; q0 += stride) {
      float v[kMovePerThread];
      int move[kMovePerThread];
      int64_t at[kMovePerThread];
      // All loads first, then the stores: independent loads in flight (a phase's moves do not
      // overlap).
      for (int j = 0; j < kMovePerThread; ++j) {
        const int64_t q = q0 + j * int64_t{blockDim.x};
        move[j] = -1;
        at[j] = 0;
        if (q >= items) continue;
        const int m = first + static_cast<int>(q >> a.tile_shift);
        const int64_t i = base + (q & (tile - 1));
        if (i >= a.floats[m]) continue;
        move[j] = m;
        at[j] = i;
        v[j] = a.sources[m] == 0 ? a.src0[m][i] : a.dst[m][i] + a.src0[m][i];
      }
      for (int j = 0; j < kMovePerThread; ++j)
        if (move[j] >= 0 && a.sources[move[j]] == 2) v[j] = v[j] + a.src1[move[j]][at[j]];
      for (int j = 0; j < kMovePerThread; ++j)
        if (move[j] >= 0) a.dst[move[j]][at[j]] = v[j];
    }
    __syncthreads();  // this phase's stores before the next phase's loads (a block's own floats)
    first = end;
  }
}

}  // namespace paralab::cuda::own
