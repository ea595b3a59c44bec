// Launchers of the CUDA backend's own kernels (kernels.cu; the kernels are in kernels.cuh and
// column_sums.cuh, private to it and to the CPU emulation tests). Each takes an explicit stream
// and checks the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/channel_sums_plan.h"
#include "core/cuda/group_moves.h"

namespace paralab::cuda {

// y = max(x, 0); y may alias x.
void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s);
// dx = y > 0 ? dy : 0; dx may alias dy.
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s);
// y (rows,cols) += b (cols) broadcast over rows.
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s);
// db (cols) = sum over rows of dy (rows,cols): 16 row lanes each sum rows lane, lane + 16, ... in
// order, then a fixed tree over the lanes (deterministic; column_sums.cuh).
void column_sums(const float* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s);
// db (c) = sums of dy (n, c, hw) over examples and positions (a convolution's bias gradient), in
// a fixed order: per part of channel_sums_partition(n, c), then over the parts in order
// (column_sums.cuh). partial holds channel_sums_partition(n, c).parts * c floats.
void channel_sums(const float* dy, float* db, float* partial, int64_t n, int64_t c, int64_t hw,
                  cudaStream_t s);
// channel_sums' second pass alone, for partial sums made elsewhere in its order (the cuDNN conv
// stage's relu_pool_backward): db (c) = partial[0 c + ch] + partial[1 c + ch] + ... in order.
void finish_channel_sums(const float* partial, float* db, int64_t c, int64_t parts, cudaStream_t s);
// Softmax cross-entropy summed over rows: stats[0] = loss, stats[1] = correct count;
// dlogits = softmax - onehot unless null. One thread block; deterministic.
void softmax_xent(const float* logits, const int32_t* labels, float* dlogits, float* stats,
                  int64_t rows, int64_t classes, cudaStream_t s);
// p -= step * g
void sgd(float* p, const float* g, float step, int64_t n, cudaStream_t s);
// p -= (*step) * g, *step read on the device when the kernel runs
void sgd_at(float* p, const float* g, const float* step, int64_t n, cudaStream_t s);
// *p = value
void set_scalar(float* p, float value, cudaStream_t s);
// p[i] = values[i] for i < n (n <= kSetScalarsMax, values on the host, read at the call): one
// launch. kSetScalarsMax is Ops::kMaxScalars (cuda_ops.cpp checks it).
constexpr int kSetScalarsMax = 64;
void set_scalars(float* p, const float* values, int n, cudaStream_t s);
// d += x (x may live on a peer GPU with peer access, or on this one)
void add_inplace(float* d, const float* x, int64_t n, cudaStream_t s);
// A collective's moves over virtual devices of one GPU, in phases (group_moves.h): as few
// kernels as group_launches() allows, often one. A phase's moves must not overlap each other.
void group_moves(const GroupMoveSpec* moves, int count, cudaStream_t s);
// x[i] = images[idx[i]] (row floats each), y[i] = labels[idx[i]] for i < count.
void gather_rows(const float* images, const int32_t* labels, const int32_t* idx, int64_t count,
                 int64_t row, float* x, int32_t* y, cudaStream_t s);

}  // namespace paralab::cuda
