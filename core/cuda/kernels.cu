// Launchers of the CUDA backend's own kernels (kernels.cuh, column_sums.cuh).
#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/column_sums.cuh"
#include "core/cuda/kernels.cuh"
#include "core/cuda/kernels.h"

namespace paralab::cuda {

namespace {

using own::kThreads;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  own::relu_forward_k<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
  PARALAB_CUDA_LAUNCHED();
}

void relu_backward(const float* y, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  own::relu_backward_k<<<blocks_for(n), kThreads, 0, s>>>(y, dy, dx, n);
  PARALAB_CUDA_LAUNCHED();
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
  own::add_bias_rows_k<<<blocks_for(rows * cols), kThreads, 0, s>>>(y, b, rows, cols);
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

void channel_sums(const float* dy, float* db, float* partial, int64_t n, int64_t c, int64_t hw,
                  cudaStream_t s) {
  if (c == 0) return;
  const ChannelSumsPartition part = channel_sums_partition(n, c);
  // Channels on the grid's x (2^31 - 1 blocks), parts on its y (at most 1024 here).
  PARALAB_REQUIRE(part.chunk * hw <= INT32_MAX && c <= INT32_MAX && n <= INT32_MAX,
                  "channel_sums: " + std::to_string(n) + " x " + std::to_string(c) + " x " +
                      std::to_string(hw) + " is beyond its 32-bit indexing");
  if (part.parts > 0) {
    channel_sums_partial<kChannelSumsThreads>
        <<<dim3(static_cast<unsigned>(c), static_cast<unsigned>(part.parts)), kChannelSumsThreads,
           0, s>>>(dy, partial, static_cast<int>(n), static_cast<int>(c), static_cast<int>(hw),
                   static_cast<int>(part.chunk));
    PARALAB_CUDA_LAUNCHED();
  }
  finish_channel_sums(partial, db, c, part.parts, s);
}

void finish_channel_sums(const float* partial, float* db, int64_t c, int64_t parts,
                         cudaStream_t s) {
  if (c == 0) return;
  channel_sums_finish<<<blocks_for(c), kThreads, 0, s>>>(partial, db, static_cast<int>(c),
                                                         static_cast<int>(parts));
  PARALAB_CUDA_LAUNCHED();
}

void softmax_xent(const float* logits, const int32_t* labels, float* dlogits, float* stats,
                  int64_t rows, int64_t classes, cudaStream_t s) {
  own::softmax_xent_k<<<1, kThreads, 0, s>>>(logits, labels, dlogits, stats, rows, classes);
  PARALAB_CUDA_LAUNCHED();
}

void sgd(float* p, const float* g, float step, int64_t n, cudaStream_t s) {
  own::sgd_k<<<blocks_for(n), kThreads, 0, s>>>(p, g, step, n);
  PARALAB_CUDA_LAUNCHED();
}

void sgd_at(float* p, const float* g, const float* step, int64_t n, cudaStream_t s) {
  own::sgd_at_k<<<blocks_for(n), kThreads, 0, s>>>(p, g, step, n);
  PARALAB_CUDA_LAUNCHED();
}

void set_scalar(float* p, float value, cudaStream_t s) {
  own::set_scalar_k<<<1, 1, 0, s>>>(p, value);
  PARALAB_CUDA_LAUNCHED();
}

static_assert(own::ScalarBlock::kMax == kSetScalarsMax);

void set_scalars(float* p, const float* values, int n, cudaStream_t s) {
  PARALAB_REQUIRE(n >= 1 && n <= own::ScalarBlock::kMax,
                  "set_scalars: " + std::to_string(n) + " values, at most " +
                      std::to_string(own::ScalarBlock::kMax));
  own::ScalarBlock block{};
  std::copy(values, values + n, block.v);
  own::set_scalars_k<<<1, own::ScalarBlock::kMax, 0, s>>>(p, block, n);
  PARALAB_CUDA_LAUNCHED();
}

void add_inplace(float* d, const float* x, int64_t n, cudaStream_t s) {
  own::add_k<<<blocks_for(n), kThreads, 0, s>>>(d, x, n);
  PARALAB_CUDA_LAUNCHED();
}

void group_moves(const GroupMoveSpec* moves, int count, cudaStream_t s) {
  const std::vector<int> starts = own::group_launches(moves, count);
  for (std::size_t l = 0; l < starts.size(); ++l) {
    const int end = l + 1 < starts.size() ? starts[l + 1] : count;
    own::GroupMovesArgs a;
    const int64_t blocks = own::group_moves_args(a, moves, starts[l], end);
    if (blocks == 0) continue;
    PARALAB_REQUIRE(blocks <= INT_MAX, std::string("group moves: too many floats in one move"));
    own::group_moves_k<<<static_cast<unsigned>(blocks), own::kGroupMovesThreads, 0, s>>>(a);
    PARALAB_CUDA_LAUNCHED();
  }
}

void gather_rows(const float* images, const int32_t* labels, const int32_t* idx, int64_t count,
                 int64_t row, float* x, int32_t* y, cudaStream_t s) {
  // A block per row (LeNet: 256 blocks of 784 floats).
  if (count <= 0) return;
  own::gather_k<<<static_cast<unsigned>(std::min<int64_t>(count, 65535 * 16)), kThreads, 0, s>>>(
      images, labels, idx, count, row, x, y);
  PARALAB_CUDA_LAUNCHED();
}

}  // namespace paralab::cuda
