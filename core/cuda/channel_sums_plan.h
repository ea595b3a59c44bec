// The fixed partition of a batch that channel_sums (kernels.h; kernels column_sums.cuh) sums a
// convolution's bias gradient by. Plain C++, so that the CPU emulation test
// (tests/test_fused_kernels.cpp) launches exactly the grid the GPU gets.
#pragma once

#include <algorithm>
#include <cstdint>

namespace paralab::cuda {

// chunk examples per part (the last may hold fewer), every part non-empty, about 1024 blocks
// (channels x parts; 8 per SM on a 132-SM GPU) however many channels, at most one part per
// example. It depends on n and c only, so the order of the sums, and their bits, do too.
// The block size of the partial sums (channel_sums_partial, and relu_pool_backward_sums, which
// makes the same sums): each thread's stride and the tree over the block, so the order of the
// adds and their bits, depend on it.
inline constexpr int kChannelSumsThreads = 256;

struct ChannelSumsPartition {
  int64_t chunk, parts;
};
inline ChannelSumsPartition channel_sums_partition(int64_t n, int64_t c) {
  if (n <= 0) return {0, 0};
  const int64_t wanted = std::clamp<int64_t>((1024 + c - 1) / std::max<int64_t>(c, 1), 1, n);
  const int64_t chunk = (n + wanted - 1) / wanted;
  return {chunk, (n + chunk - 1) / chunk};
}

}  // namespace paralab::cuda
