// One collective step's moves over virtual devices of one GPU as a kernel's arguments
// (kernels.cuh: group_moves_k; the transport's whole steps, core/cuda/group_mover.cpp). Plain
// C++, so that the CPU emulation test builds the same arguments the launcher does.
#pragma once

#include <algorithm>
#include <cstdint>

namespace paralab::cuda {

// dst = src0 when sources is 0 (a copy); else dst = (dst + src0) + src1 over its 1 or 2 sources.
struct GroupMoveSpec {
  float* dst;
  const float* src0;
  const float* src1;
  int sources;
  int64_t floats;
};

namespace own {

constexpr int kMaxGroupMoves = 24;  // moves per launch (the arguments stay near 1 KiB)
constexpr int kMovePerThread = 8;   // floats per thread: its loads in flight at once

// Move m takes blocks first_block[m] .. first_block[m+1]-1, each blockDim.x * kMovePerThread
// consecutive floats of it.
struct GroupMovesArgs {
  int count = 0;
  int sources[kMaxGroupMoves] = {};
  float* dst[kMaxGroupMoves] = {};
  const float* src0[kMaxGroupMoves] = {};
  const float* src1[kMaxGroupMoves] = {};
  int64_t floats[kMaxGroupMoves] = {};
  int64_t first_block[kMaxGroupMoves + 1] = {};
};

// The arguments for moves[0 .. min(count, kMaxGroupMoves)) with `block` threads per block;
// returns how many moves they hold. The grid is a.first_block[a.count] blocks.
inline int group_moves_args(GroupMovesArgs& a, const GroupMoveSpec* moves, int count, int block) {
  const int64_t tile = int64_t{block} * kMovePerThread;
  a = GroupMovesArgs{};
  a.count = std::min(count, kMaxGroupMoves);
  for (int m = 0; m < a.count; ++m) {
    a.dst[m] = moves[m].dst;
    a.src0[m] = moves[m].src0;
    a.src1[m] = moves[m].src1;
    a.sources[m] = moves[m].sources;
    a.floats[m] = moves[m].floats;
    a.first_block[m + 1] = a.first_block[m] + (moves[m].floats + tile - 1) / tile;
  }
  return a.count;
}

}  // namespace own
}  // namespace paralab::cuda
