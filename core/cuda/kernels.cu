#include "core/cuda/check.h"
#include "core/cuda/column_sums.cuh"
#include "core/cuda/kernels.h"

namespace paralab::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

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
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
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

__global__ void add_k(float* d, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x)
    d[i] += x[i];
}

__global__ void gather_k(const float* images, const int32_t* labels, const int32_t* idx,
                         int64_t count, int64_t row, float* x, int32_t* y) {
  const int64_t n = count * row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = i / row, c = i % row;
    const int64_t src = idx[r];
    x[i] = images[src * row + c];
    if (c == 0) y[r] = labels[src];
  }
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  relu_forward_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  PARALAB_CUDA_LAUNCHED();
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  relu_backward_k<<<blocks_for(n), kThreads, 0, s>>>(y, dy, dx, n);
  PARALAB_CUDA_LAUNCHED();
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
  add_bias_rows_k<<<blocks_for(rows * cols), kThreads, 0, s>>>(y, b, rows, cols);
  PARALAB_CUDA_LAUNCHED();
}

void column_sums(const float* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s) {
  // 32 columns per block, 16 row lanes: LeNet's FC1 bias (128) takes 4 blocks of 512 threads.
  constexpr int kLanes = 16;
  if (cols == 0) return;  // no columns: nothing to sum (and a grid of 0 blocks is refused)
  column_sums_tree<kLanes>
      <<<static_cast<unsigned>((cols + 31) / 32), 32 * kLanes, 0, s>>>(dy, db, rows, cols);
  PARALAB_CUDA_LAUNCHED();
}

void softmax_xent(const float* logits, const int32_t* labels, float* dlogits, float* stats,
                  int64_t rows, int64_t classes, cudaStream_t s) {
  softmax_xent_k<<<1, kThreads, 0, s>>>(logits, labels, dlogits, stats, rows, classes);
  PARALAB_CUDA_LAUNCHED();
}

void sgd(float* p, const float* g, float step, int64_t n, cudaStream_t s) {
  sgd_k<<<blocks_for(n), kThreads, 0, s>>>(p, g, step, n);
  PARALAB_CUDA_LAUNCHED();
}

void sgd_at(float* p, const float* g, const float* step, int64_t n, cudaStream_t s) {
  sgd_at_k<<<blocks_for(n), kThreads, 0, s>>>(p, g, step, n);
  PARALAB_CUDA_LAUNCHED();
}

void set_scalar(float* p, float value, cudaStream_t s) {
  set_scalar_k<<<1, 1, 0, s>>>(p, value);
  PARALAB_CUDA_LAUNCHED();
}

void add_inplace(float* d, const float* x, int64_t n, cudaStream_t s) {
  add_k<<<blocks_for(n), kThreads, 0, s>>>(d, x, n);
  PARALAB_CUDA_LAUNCHED();
}

void gather_rows(const float* images, const int32_t* labels, const int32_t* idx, int64_t count,
                 int64_t row, float* x, int32_t* y, cudaStream_t s) {
  gather_k<<<blocks_for(count * row), kThreads, 0, s>>>(images, labels, idx, count, row, x, y);
  PARALAB_CUDA_LAUNCHED();
}

}  // namespace paralab::cuda
