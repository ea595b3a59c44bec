// A collective's moves over virtual devices of one GPU as kernels' arguments (kernels.cuh:
// group_moves_k; the transport's whole steps and whole collectives, core/cuda/group_mover.cpp).
// Plain C++, so that the CPU emulation test builds the same arguments the launcher does.
//
// The moves come in phases (a collective's steps, in order); a phase's moves touch disjoint
// memory. One launch may hold several phases without a barrier across the GPU because of how it
// splits the work: block b takes floats [b T, (b + 1) T) of every move (T the launch's tile), and
// runs the phases in order with a block barrier between them. A float that one phase writes and
// a later one reads (or writes) is then handled by the same block in both, as long as the two
// moves start at the same address: a ring's segment lies at the same offset in every rank's
// buffer, a tree's chunk too, so each float's chain of adds and copies stays in one block.
// group_launches() closes a launch before a move that touches another phase's memory of the same
// launch from a different start, and where a launch's arguments are full.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace paralab::cuda {

// dst = src0 when sources is 0 (a copy); else dst = (dst + src0) + src1 over its 1 or 2 sources.
// Moves of one phase run together; phases run in order.
struct GroupMoveSpec {
  float* dst;
  const float* src0;
  const float* src1;
  int sources;
  int64_t floats;
  int phase = 0;
};

namespace own {

// Moves per launch: 112, a ring's 14 steps of 8 moves on 8 devices, keeps the arguments under
// the 4 KiB a kernel's parameters may take on every toolkit and driver.
constexpr int kMaxGroupMoves = 112;
constexpr int kMovePerThread = 8;  // floats per thread: its loads in flight at once
constexpr int kGroupMovesThreads = 256;
constexpr int kMinTileShift = 5;        // a block's floats of each move: 32 ...
constexpr int kMaxTileShift = 11;       // ... to 2,048
constexpr int64_t kTargetBlocks = 512;  // the tile that gives about this many blocks (>= 3 per SM)

struct GroupMovesArgs {
  int count = 0;
  int tile_shift = kMaxTileShift;  // T = 1 << tile_shift
  float* dst[kMaxGroupMoves] = {};
  const float* src0[kMaxGroupMoves] = {};
  const float* src1[kMaxGroupMoves] = {};
  int64_t floats[kMaxGroupMoves] = {};
  uint8_t sources[kMaxGroupMoves] = {};
  uint8_t starts_phase[kMaxGroupMoves] = {};  // 1 where a move begins a phase of the launch
};

static_assert(sizeof(GroupMovesArgs) <= 4096, "a kernel's parameters: at most 4 KiB everywhere");

// Whether a and b touch memory in a way that a launch holding both in different phases would get
// wrong: one writes what the other reads or writes, from a different start.
inline bool group_moves_clash(const GroupMoveSpec& a, const GroupMoveSpec& b) {
  // w writes n floats, p is touched over m: overlapping from another start. (A move reads its
  // src0, its src1 where it has one, and, adding, its dst.)
  auto clash = [](const float* w, int64_t n, const float* p, int64_t m) {
    return p && p != w && w < p + m && p < w + n;
  };
  return clash(a.dst, a.floats, b.dst, b.floats) || clash(a.dst, a.floats, b.src0, b.floats) ||
         clash(a.dst, a.floats, b.src1, b.floats) || clash(b.dst, b.floats, a.src0, a.floats) ||
         clash(b.dst, b.floats, a.src1, a.floats);
}

// Where each launch of moves[0 .. count) begins (the first is 0): at most kMaxGroupMoves moves a
// launch, and a new launch before a move that clashes with a move of an earlier phase in the
// current one. Phases must not decrease.
inline std::vector<int> group_launches(const GroupMoveSpec* moves, int count) {
  std::vector<int> starts;
  int begin = 0;
  for (int m = 0; m < count; ++m) {
    bool split = m == 0 || m - begin >= kMaxGroupMoves;
    for (int o = begin; o < m && !split; ++o)
      split = moves[o].phase != moves[m].phase && group_moves_clash(moves[o], moves[m]);
    if (split) {
      starts.push_back(m);
      begin = m;
    }
  }
  return starts;
}

// The arguments for moves[begin .. end) (one launch of group_launches), its tile the smallest
// power of two from 32 to 2,048 floats that needs at most about kTargetBlocks blocks for the
// largest move; returns the grid's blocks (0 when every move is empty). Each block has
// kGroupMovesThreads threads.
inline int64_t group_moves_args(GroupMovesArgs& a, const GroupMoveSpec* moves, int begin, int end) {
  a = GroupMovesArgs{};
  a.count = end - begin;
  int64_t most = 0;
  for (int m = begin; m < end; ++m) most = std::max(most, moves[m].floats);
  a.tile_shift = kMinTileShift;
  while (a.tile_shift < kMaxTileShift && (most >> a.tile_shift) > kTargetBlocks) ++a.tile_shift;
  for (int i = 0; i < a.count; ++i) {
    const GroupMoveSpec& s = moves[begin + i];
    a.dst[i] = s.dst;
    a.src0[i] = s.src0;
    a.src1[i] = s.src1;
    a.floats[i] = s.floats;
    a.sources[i] = static_cast<uint8_t>(s.sources);
    a.starts_phase[i] = i == 0 || s.phase != moves[begin + i - 1].phase;
  }
  const int64_t tile = int64_t{1} << a.tile_shift;
  return (most + tile - 1) / tile;
}

}  // namespace own
}  // namespace paralab::cuda
