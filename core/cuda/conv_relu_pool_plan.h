// The host-side arithmetic of ParaLab's own conv -> ReLU -> avgpool kernels
// (conv_relu_pool_kernels.cuh): the stage's geometry, the tile shapes, the fixed partition of a
// batch for deterministic reductions, and the launch grids. Plain C++, so that the CPU emulation
// test (tests/test_fused_kernels.cpp) launches exactly the grids the GPU gets.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string_view>

// Helpers the kernels call too.
#ifdef __CUDACC__
#define PARALAB_HOST_DEVICE __host__ __device__
#else
#define PARALAB_HOST_DEVICE
#endif

namespace paralab::cuda::crp {

// x (N,C,H,W), w (K,C,R,S): the conv output (N,K,H-R+1,W-S+1) pools 2x2 in floor mode to
// (N,K,PH,PW); only its first OH = 2 PH rows and OW = 2 PW columns are ever read, so they are
// the only ones computed.
struct Geometry {
  int n, c, h, w, k, r, s;
  int ph, pw;  // pooled output
  int oh, ow;  // conv positions the pool reads: 2 ph, 2 pw
  int crs;     // c r s: one output's reduction length, one filter's size
};

inline Geometry make_geometry(int n, int c, int h, int w, int k, int r, int s) {
  Geometry g{n, c, h, w, k, r, s, (h - r + 1) / 2, (w - s + 1) / 2, 0, 0, c * r * s};
  g.oh = 2 * g.ph;
  g.ow = 2 * g.pw;
  return g;
}

// Whether a tensor's 64-bit dimensions, and a filter's size c r s, fit make_geometry's int.
inline bool dims_fit_int32(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r,
                           int64_t s) {
  constexpr int64_t kMax = INT32_MAX;
  // c r first: with each factor below 2^31 neither product leaves int64.
  return n <= kMax && c <= kMax && h <= kMax && w <= kMax && k <= kMax && r <= kMax && s <= kMax &&
         c * r <= kMax && c * r * s <= kMax;
}

// Stages whose filters have at most this many values (LeNet's conv1: 1x3x3 = 9) take the direct
// kernels: one thread per pooled output forward; per-filter register accumulators backward.
inline constexpr int kDirectMaxCrs = 32;
inline bool direct(const Geometry& g) { return g.crs <= kDirectMaxCrs; }

// Tiles of the implicit GEMMs: BM x BN outputs per block, BK of the reduction per step, TM x TN
// outputs per thread, (BM/TM)(BN/TN) threads. TM is a multiple of 4 in the forward GEMM, whose
// rows come in 2x2 pooling windows, so that a thread pools its own outputs.
struct Tile {
  int bm, bn, bk, tm, tn;
  constexpr int threads() const { return (bm / tm) * (bn / tn); }
};

// Two sets: "wide" (large tiles, 8x8 or 4x8 outputs per thread) and "narrow" (small tiles, 4x4
// per thread: more blocks and warps, for grids that leave SMs idle; LeNet's conv2 forward at
// batch 256 is 128 wide blocks of 4 warps on a 132-SM GPU, 512 narrow ones); the weight
// gradient's tile is the same in both. Every tile computes
// each output with the same operations in the same order, so both sets give the same bits
// (tests/test_fused_kernels.cpp checks it); which is faster is measured (scripts/gpu-check.sh
// speed), and PARALAB_OWN_TILES=wide|narrow picks one (own_tiles in fused_conv_relu_pool.cpp).
struct TileSet {
  const char* name;
  Tile forward;  // rows: pool windows x 4; cols: K
  Tile filter;   // rows: K; cols: C R S; reduction: positions
  Tile data;     // the input gradient's columns GEMM: rows C R S; cols: positions; reduction: K
};
inline constexpr TileSet kWideTiles{
    "wide", {128, 64, 8, 8, 8}, {64, 64, 16, 4, 4}, {64, 128, 8, 4, 8}};
inline constexpr TileSet kNarrowTiles{
    "narrow", {64, 32, 8, 4, 4}, {64, 64, 16, 4, 4}, {64, 64, 8, 4, 4}};
inline constexpr const TileSet* kTileSets[] = {&kWideTiles, &kNarrowTiles};
inline constexpr const TileSet& kDefaultTiles = kWideTiles;

// The set of that name, or null.
inline const TileSet* find_tile_set(std::string_view name) {
  for (const TileSet* t : kTileSets)
    if (name == t->name) return t;
  return nullptr;
}

inline constexpr int kReduceThreads = 256;  // weights_direct_partial, bias_partial
// weights_direct_partial keeps crs + 1 sums per thread in registers: 16 slots for filters of up
// to 15 values (LeNet's conv1: 9), 33 up to kDirectMaxCrs.
inline constexpr int kDirectSmallSlots = 16;
inline constexpr int kDirectSlots = kDirectMaxCrs + 1;
inline bool direct_small(const Geometry& g) { return g.crs < kDirectSmallSlots; }
// One input channel and a 3 x 3 filter (LeNet's conv1): the direct kernels' instances for it
// (forward_direct<3, 3>: each weight loaded once; weights_direct_partial<.., 3, 3>: each pool
// window's 4 x 4 patch of x loaded once).
inline bool direct_patch_3x3(const Geometry& g) { return g.c == 1 && g.r == 3 && g.s == 3; }
inline constexpr int kElementThreads = 256;

// The batch cut into P chunks of `chunk` examples (the last may be shorter). Weight and bias
// gradients are summed per chunk, then over the chunks in order: the partition depends on N
// only, so the sums' order, and their bits, do not depend on how the GPU schedules blocks.
struct Partition {
  int chunk, parts;
};
inline constexpr int kMaxParts = 32;  // enough blocks to fill a GPU at LeNet's sizes
inline Partition partition(int n) {
  const int wanted = std::min(n, kMaxParts);
  const int chunk = (n + wanted - 1) / wanted;
  return {chunk, (n + chunk - 1) / chunk};
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of the forward GEMM: every conv position a pool window reads, 4 per window.
PARALAB_HOST_DEVICE inline int64_t forward_rows(const Geometry& g) {
  return int64_t{g.n} * g.ph * g.pw * 4;
}
// The input gradient's columns (C R S values per conv position the pool reads) for a slice of
// the batch at a time, so that their buffer stays within max_floats (64 MiB by default; LeNet's
// conv2 at batch 256 takes 31 MiB, one slice). Each example's dx depends on its own columns only,
// so the slicing changes no bit (tests/test_fused_kernels.cpp checks it).
inline constexpr int64_t kColsMaxFloats = int64_t{1} << 24;
struct Slices {
  int examples, count;  // examples per slice (the last may have fewer), slices
};
inline Slices data_slices(const Geometry& g, int64_t max_floats = kColsMaxFloats) {
  const int64_t per_example = int64_t{g.crs} * g.oh * g.ow;
  const int64_t fit = per_example > 0 ? std::max<int64_t>(1, max_floats / per_example) : g.n;
  const int examples = static_cast<int>(std::min<int64_t>(g.n, fit));
  return {examples, examples > 0 ? (g.n + examples - 1) / examples : 0};
}
// Floats of the columns buffer: one slice's.
inline int64_t cols_floats(const Geometry& g, int64_t max_floats = kColsMaxFloats) {
  return int64_t{data_slices(g, max_floats).examples} * g.crs * g.oh * g.ow;
}

// Floats of the partial sums: P chunks x K filters x (C R S weights + 1 bias).
inline int64_t partial_floats(const Geometry& g) {
  return int64_t{partition(g.n).parts} * g.k * (g.crs + 1);
}

// Values of the whole conv output (N,K,H-R+1,W-S+1), which the cuDNN path's bias_relu_pool and
// relu_pool_backward index.
inline int64_t conv_output_floats(const Geometry& g) {
  return int64_t{g.n} * g.k * (g.h - g.r + 1) * (g.w - g.s + 1);
}

// The most blocks of a grid-stride elementwise kernel (element_blocks), and so its largest
// stride: a loop over `total` items steps its index up to total - 1 + stride.
inline constexpr int64_t kMaxElementBlocks = 65535 * 16;
inline constexpr int64_t kMaxElementStride = kMaxElementBlocks * kElementThreads;

// Whether every index the kernels compute fits in 32 bits (they index with int): the input, the
// whole conv output (so also the positions the pool reads and the pooled output), each with a
// grid-stride loop's last step past its end, the GEMMs' rows, the input gradient's columns (one
// slice's, rounded up to a tile) and the partial sums.
inline bool indexes_fit_int32(const Geometry& g) {
  constexpr int64_t kMax = INT32_MAX;
  const int64_t n = g.n;
  return n * g.c * g.h * g.w + kMaxElementStride < kMax &&
         conv_output_floats(g) + kMaxElementStride < kMax && forward_rows(g) + 64 * 4 < kMax &&
         (cols_floats(g) + int64_t{g.crs} * 256) < kMax && int64_t{g.k} * (g.crs + 1) * 64 < kMax;
}

// The grid of a grid-stride elementwise kernel over `count` items.
inline int element_blocks(int64_t count) {
  return static_cast<int>(
      std::clamp<int64_t>(ceil_div(count, kElementThreads), 1, kMaxElementBlocks));
}

// Whether the GEMMs' second grid dimension stays within CUDA's 65,535 blocks: filters (forward,
// filter gradient) or filter values c*r*s (input gradient), in tiles of at least 32 in every set.
inline bool grids_fit(const Geometry& g) {
  constexpr int64_t kMaxY = int64_t{65535} * 32;
  return g.k <= kMaxY && g.crs <= kMaxY;
}

}  // namespace paralab::cuda::crp
