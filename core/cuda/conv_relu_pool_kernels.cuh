// ParaLab's own kernels for one conv -> ReLU -> avgpool 2x2 stage (the op in core/ops.h), private
// to conv_relu_pool_fused.cu and to the CPU emulation test (tests/test_fused_kernels.cpp), which
// runs these very functions with one host thread per CUDA thread.
//
// So that the emulation is faithful, the kernels use only blockIdx/threadIdx/blockDim/gridDim,
// static __shared__ arrays, __syncthreads() and fmaf: no warp shuffles, no atomics, no dynamic
// shared memory. Every reduction has a fixed order (a fixed partition of the batch, each thread's
// fixed stride, a fixed tree in shared memory), so results are bit-identical run after run.
//
// Shapes (Geometry in conv_relu_pool_plan.h): x (N,C,H,W), w (K,C,R,S), b (K), y (N,K,PH,PW).
// mask (N,K,PH,PW) bytes: bit q = 2 dh + dw of mask[n,k,ph,pw] is set when the conv output at
// (2 ph + dh, 2 pw + dw) plus its bias was > 0, i.e. ReLU passed it; backward needs nothing else.
// dconv (N,K,OH,OW) = d(loss)/d(conv output) over the positions the pool reads.
//
// Indices: every tensor of a stage holds fewer than 2^31 elements (the launchers check it), so
// index arithmetic is 32-bit (a 64-bit division costs several times a 32-bit one on a GPU), and
// the GEMM tiles' loaders step (c, r, s) along the reduction instead of dividing per element.
//
// Arithmetic, identical in the direct and the GEMM kernels (so that they agree to the bit): a
// conv output is fmaf-accumulated over j = (c, r, s) in ascending order from 0, then the bias is
// added, ReLU applied, and the four window values summed as (v0 + v1) + (v2 + v3), times 0.25.
#pragma once

#include <cstdint>

#include "core/cuda/conv_relu_pool_plan.h"

// #pragma unroll where nvcc compiles these kernels; nothing where the host compiler does (the
// CPU emulation of tests/cuda_emulator.h, which has no such pragma).
#if defined(__CUDACC__)
#define PARALAB_UNROLL _Pragma("unroll")
#else
#define PARALAB_UNROLL
#endif

namespace paralab::cuda::crp {

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }

// The pooled value and ReLU bits of one window from its four conv sums (bias not yet added).
__device__ __forceinline__ float pool_window(const float (&acc)[4], float bias, uint8_t& bits) {
  float v[4];
  bits = 0;
  for (int q = 0; q < 4; ++q) {
    const float a = acc[q] + bias;
    v[q] = a > 0.0f ? a : 0.0f;
    bits = static_cast<uint8_t>(bits | (a > 0.0f ? 1 << q : 0));
  }
  return ((v[0] + v[1]) + (v[2] + v[3])) * 0.25f;
}

// ---- forward -------------------------------------------------------------------------------

// Pooled output i = ((n K + k) PH + ph) PW + pw as (n K + k, ph, pw).
__device__ __forceinline__ void pooled_coords(const Geometry& g, int i, int& nk, int& ph, int& pw) {
  const int t = i / g.pw;
  pw = i - t * g.pw;
  ph = t % g.ph;
  nk = t / g.ph;
}

// Direct: one thread per pooled output (n,k,ph,pw), computing its window's four conv outputs.
// For small filters (kDirectMaxCrs), where a GEMM's tiles would be mostly padding. The window's
// four outputs read one (R+1) x (S+1) patch of each input channel: each patch value is loaded
// once and added to every output whose filter covers it. For each output the products still come
// in ascending (c, r, s), as the patch is walked row by row, so the sums are the GEMM's bits.
// kR, kS > 0: the filter is kR x kS (direct_patch_3x3 in conv_relu_pool_plan.h; LeNet's conv1),
// so the patch loops unroll, their tests are constants, and each weight is loaded once a channel
// instead of once for each output that uses it (9 loads, not 36); the same fmas in the same order.
template <int kR = 0, int kS = 0>
__global__ void forward_direct(Geometry g, const float* __restrict__ x, const float* __restrict__ w,
                               const float* __restrict__ b, float* __restrict__ y,
                               uint8_t* __restrict__ mask) {
  const int R = kR > 0 ? kR : g.r, S = kS > 0 ? kS : g.s;
  const int total = g.n * g.k * g.ph * g.pw;
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    int nk, ph, pw;
    pooled_coords(g, i, nk, ph, pw);
    const int k = nk % g.k, n = nk / g.k;
    const float* wk = w + k * g.crs;
    const float* xw = x + n * g.c * g.h * g.w + 2 * ph * g.w + 2 * pw;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c = 0; c < g.c; ++c) {
      const float* wc = wk + c * R * S;
      const float* xc = xw + c * g.h * g.w;
      PARALAB_UNROLL
      for (int pr = 0; pr <= R; ++pr) {
        PARALAB_UNROLL
        for (int pc = 0; pc <= S; ++pc) {
          const float v = xc[pr * g.w + pc];
          // Output q = 2 dh + dw takes v with weight (pr - dh, pc - dw) where that is in the
          // filter; q's products reach it in ascending (r, s) as (pr, pc) ascends.
          const bool top = (pr < R), left = (pc < S);
          const bool bottom = (pr > 0), right = (pc > 0);
          if (top && left) acc[0] = fmaf(v, wc[pr * S + pc], acc[0]);
          if (top && right) acc[1] = fmaf(v, wc[pr * S + pc - 1], acc[1]);
          if (bottom && left) acc[2] = fmaf(v, wc[(pr - 1) * S + pc], acc[2]);
          if (bottom && right) acc[3] = fmaf(v, wc[(pr - 1) * S + pc - 1], acc[3]);
        }
      }
    }
    uint8_t bits;
    y[i] = pool_window(acc, b[k], bits);
    mask[i] = bits;
  }
}

// Steps a reduction index j kept as its digits (a, r, s) -- a over channels or filters, then the
// filter's rows r < r_count and columns s < s_count -- forward by `by` positions.
__device__ __forceinline__ void step_ars(int& a, int& r, int& s, int by, int r_count, int s_count) {
  s += by;
  while (s >= s_count) {
    s -= s_count;
    if (++r == r_count) {
      r = 0;
      ++a;
    }
  }
}

// The tiles in shared memory: As (BK x BM, stored transposed) has rows of BM + kApad floats, so
// that each row starts on 16 bytes (a thread's TM values of one step load as float4s) while the
// loaders that store a column of As per warp (FilterLoadA) spread it over the banks (a stride of
// 4 banks: at most 2-way conflicts on that store, once per step). A thread's TN columns of Bs are
// groups of 4 side by side (column_of), loaded as float4s: the thread tx takes columns 4 tx ..
// 4 tx + 3 of each group of 4 kCols columns. Which thread computes which output changes no bit:
// each output is its own fmaf chain over the reduction, in order.
inline constexpr int kApad = 4;
template <int TN, int kCols>
__device__ __forceinline__ int column_of(int tx, int jj) {
  static_assert(TN % 4 == 0, "a thread's columns come in groups of 4");
  return (jj / 4) * (4 * kCols) + 4 * tx + jj % 4;
}

// The main loop shared by the implicit GEMMs: C (BM x BN, TM x TN per thread) += A (BM x L) B (L x
// BN) over the reduction range [l_begin, l_end), BK at a time. Each loader takes the thread's
// share of a tile in two halves: fetch(l0) reads it from global memory into the loader's
// registers (zeros outside the matrices), store(tile) writes them to shared memory. The next
// step's fetch is issued before this step's arithmetic, so that its loads are in flight while the
// block multiplies (a double buffer in registers); loaders that step their indices expect the
// fetches in order, l_begin, l_begin + BK, ... As is stored transposed (As[l][m]) so that a thread
// reads its TM rows of one step side by side; a thread's columns are column_of(tx, 0 .. TN-1).
// Bs rows hold BN floats or more (kBRow: padded where a loader stores columns of it). kUnrollK
// unrolls the loop over a step's BK values (the next values' shared loads issued while the
// current ones multiply), where the registers it takes cost no blocks per SM.
template <int BM, int BN, int BK, int TM, int TN, bool kUnrollK = false, typename LoadA,
          typename LoadB, int kBRow>
__device__ __forceinline__ void gemm_mainloop(float (&As)[BK][BM + kApad], float (&Bs)[BK][kBRow],
                                              int l_begin, int l_end, LoadA& load_a, LoadB& load_b,
                                              float (&acc)[TM][TN]) {
  static_assert(kBRow >= BN && kBRow % 4 == 0, "Bs rows: BN floats or more, 16-byte aligned");
  constexpr int kCols = BN / TN;
  const int tx = static_cast<int>(threadIdx.x) % kCols, ty = static_cast<int>(threadIdx.x) / kCols;
  if (l_begin < l_end) {
    load_a.fetch(l_begin);
    load_b.fetch(l_begin);
  }
  for (int l0 = l_begin; l0 < l_end; l0 += BK) {
    load_a.store(As);
    load_b.store(Bs);
    __syncthreads();
    if (l0 + BK < l_end) {
      load_a.fetch(l0 + BK);
      load_b.fetch(l0 + BK);
    }
    const auto step = [&](int kk) {
      float a[TM], bv[TN];
      PARALAB_UNROLL
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty * TM + i];
      PARALAB_UNROLL
      for (int jj = 0; jj < TN; ++jj) bv[jj] = Bs[kk][column_of<TN, kCols>(tx, jj)];
      PARALAB_UNROLL
      for (int i = 0; i < TM; ++i) {
        PARALAB_UNROLL
        for (int jj = 0; jj < TN; ++jj) acc[i][jj] = fmaf(a[i], bv[jj], acc[i][jj]);
      }
    };
    if constexpr (kUnrollK) {
      PARALAB_UNROLL
      for (int kk = 0; kk < BK; ++kk) step(kk);
    } else {
      for (int kk = 0; kk < BK; ++kk) step(kk);
    }
    __syncthreads();  // before the next step overwrites the tiles others still read
  }
}

// A loader whose thread takes elements e = tid, tid + kThreads, ... of a BK x kWidth tile laid out
// row by row (e = kk * kWidth + col; kWidth a power of two in every tile, so / and % are shifts).
template <int BK, int kWidth, int kThreads>
struct StridedTile {
  static_assert((BK * kWidth) % kThreads == 0, "the threads share the tile evenly");
  static constexpr int kPer = BK * kWidth / kThreads;
  float v[kPer];
  template <int kRowLength>  // kWidth, or kWidth + kApad for an A tile
  __device__ void store(float (&tile)[BK][kRowLength]) const {
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int e = static_cast<int>(threadIdx.x) + t * kThreads;
      tile[e / kWidth][e % kWidth] = v[t];
    }
  }
};

// Forward as an implicit GEMM: rows m = 4 window + q over the pool windows (n,ph,pw) and their
// four positions q = 2 dh + dw, columns the K filters, reduction j = (c,r,s):
//   A[m][j] = x[n, c, 2ph+dh+r, 2pw+dw+s],  B[j][k] = w[k, j],
// with bias, ReLU, pooling and the mask in the epilogue: only the pooled output leaves the block.
// The A tiles' loaders: kThreads / BM threads share a row (thread t loads row t % BM at steps
// kk = t / BM, t / BM + kThreads / BM, ...), keeping (c, r, s) of their next element and stepping
// it (no division after the first).
template <int BM, int BK, int kThreads>
struct ForwardLoadA {
  static_assert(kThreads % BM == 0 && BK % (kThreads / BM) == 0, "whole rows per thread group");
  static constexpr int kPerRow = kThreads / BM, kPer = BK / kPerRow;
  const Geometry& g;
  const float* x;
  int row_base;  // this thread's row of the tile: offset of x[n,0,2ph+dh,2pw+dw], or -1
  int c, r, s;   // the digits of j0 + t / BM, j0 the next fetch's
  float v[kPer];
  __device__ ForwardLoadA(const Geometry& g_, const float* x_, int row_base_)
      : g(g_), x(x_), row_base(row_base_) {
    const int first = static_cast<int>(threadIdx.x) / BM, rs = g.r * g.s;
    c = first / rs;
    r = (first - c * rs) / g.s;
    s = first - c * rs - r * g.s;
  }
  __device__ void fetch(int j0) {
    int j = j0 + static_cast<int>(threadIdx.x) / BM;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t, j += kPerRow) {
      v[t] = row_base >= 0 && j < g.crs ? x[row_base + (c * g.h + r) * g.w + s] : 0.0f;
      step_ars(c, r, s, kPerRow, g.r, g.s);
    }
  }
  __device__ void store(float (&As)[BK][BM + kApad]) const {
    const int row = static_cast<int>(threadIdx.x) % BM, first = static_cast<int>(threadIdx.x) / BM;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) As[first + t * kPerRow][row] = v[t];
  }
};

// B[j][k] = w[k * crs + j], columns n0 ...: consecutive threads take consecutive j of one filter
// (consecutive floats of w; a warp reads 32 / BK runs of BK floats, not 32 filters' rows apart),
// and store them down a column of Bs, whose rows are padded by 4 floats so that those stores
// fall on distinct banks (row stride BN + 4: bank 4 kk + column, for BK = 8).
inline constexpr int kWeightBpad = 4;
template <int BN, int BK, int kThreads>
struct WeightLoadB {
  static_assert((BK * BN) % kThreads == 0, "the threads share the tile evenly");
  static constexpr int kPer = BK * BN / kThreads;
  const float* w;
  int crs, k_count, n0;
  float v[kPer];
  __device__ WeightLoadB(const float* w_, int crs_, int k_count_, int n0_)
      : w(w_), crs(crs_), k_count(k_count_), n0(n0_) {}
  __device__ void fetch(int j0) {
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int e = static_cast<int>(threadIdx.x) + t * kThreads;
      const int j = j0 + e % BK, k = n0 + e / BK;
      v[t] = j < crs && k < k_count ? w[k * crs + j] : 0.0f;
    }
  }
  __device__ void store(float (&Bs)[BK][BN + kWeightBpad]) const {
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int e = static_cast<int>(threadIdx.x) + t * kThreads;
      Bs[e % BK][e / BK] = v[t];
    }
  }
};

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    forward_gemm(Geometry g, const float* __restrict__ x, const float* __restrict__ w,
                 const float* __restrict__ b, float* __restrict__ y, uint8_t* __restrict__ mask) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  static_assert(TM % 4 == 0, "a thread's rows are whole pool windows");
  __shared__ __align__(16) float As[BK][BM + kApad];
  __shared__ __align__(16) float Bs[BK][BN + kWeightBpad];
  const int rows = static_cast<int>(forward_rows(g));
  const int m0 = static_cast<int>(blockIdx.x) * BM;
  const int n0 = static_cast<int>(blockIdx.y) * BN;

  // The row this thread loads: window (n,ph,pw) and position q of m0 + threadIdx.x % BM.
  int row_base = -1;
  if (const int m = m0 + static_cast<int>(threadIdx.x) % BM; m < rows) {
    const int q = m % 4;
    int t = m / 4;
    const int pw = t % g.pw;
    t /= g.pw;
    const int ph = t % g.ph;
    const int n = t / g.ph;
    row_base = n * g.c * g.h * g.w + (2 * ph + q / 2) * g.w + 2 * pw + q % 2;
  }
  float acc[TM][TN] = {};
  ForwardLoadA<BM, BK, kThreads> load_a(g, x, row_base);
  WeightLoadB<BN, BK, kThreads> load_b(w, g.crs, g.k, n0);
  // Few blocks an SM at LeNet's batch (wide 1, narrow about 4; ptxas: 127 and 47 registers, no
  // spill): the unrolled steps' registers cost none.
  gemm_mainloop<BM, BN, BK, TM, TN, /*kUnrollK=*/true>(As, Bs, 0, g.crs, load_a, load_b, acc);

  constexpr int kCols = BN / TN;
  const int tx = static_cast<int>(threadIdx.x) % kCols, ty = static_cast<int>(threadIdx.x) / kCols;
  for (int win = 0; win < TM / 4; ++win) {
    const int window = (m0 + ty * TM + win * 4) / 4;  // (n, ph, pw) flattened
    if (window * 4 >= rows) break;
    const int pw = window % g.pw;
    const int t = window / g.pw;
    const int ph = t % g.ph;
    const int n = t / g.ph;
    for (int jj = 0; jj < TN; ++jj) {
      const int k = n0 + column_of<TN, kCols>(tx, jj);
      if (k >= g.k) continue;
      const float sums[4] = {acc[win * 4][jj], acc[win * 4 + 1][jj], acc[win * 4 + 2][jj],
                             acc[win * 4 + 3][jj]};
      uint8_t bits;
      const int o = ((n * g.k + k) * g.ph + ph) * g.pw + pw;
      y[o] = pool_window(sums, b[k], bits);
      mask[o] = bits;
    }
  }
}

// ---- around another library's convolution (the cuDNN path, conv_relu_pool.cpp) -------------
// conv is the whole conv output (N,K,CH,CW), CH = H-R+1 and CW = W-S+1, computed without bias
// elsewhere: its rows and columns OH, OW and beyond (floor mode) are read by no pool window.

// Bias, ReLU and the 2x2 average pool in one pass, one thread per pooled output: y and the mask
// as forward_direct writes them (pool_window), in place of three passes over conv (add the bias,
// ReLU, pool) and a stored activation.
__global__ void bias_relu_pool_k(Geometry g, const float* __restrict__ conv,
                                 const float* __restrict__ b, float* __restrict__ y,
                                 uint8_t* __restrict__ mask) {
  const int ch = g.h - g.r + 1, cw = g.w - g.s + 1;
  const int total = g.n * g.k * g.ph * g.pw;
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    int nk, ph, pw;
    pooled_coords(g, i, nk, ph, pw);
    const float* c = conv + (nk * ch + 2 * ph) * cw + 2 * pw;
    const float sums[4] = {c[0], c[1], c[cw], c[cw + 1]};
    uint8_t bits;
    y[i] = pool_window(sums, b[nk % g.k], bits);
    mask[i] = bits;
  }
}

// ---- backward ------------------------------------------------------------------------------

// d(loss)/d(conv output) at (n,k,oh,ow), oh < OH, ow < OW: the pool spreads dy/4 over its window,
// ReLU passes it where its bit is set.
__device__ __forceinline__ float conv_grad(const Geometry& g, const float* dy, const uint8_t* mask,
                                           int n, int k, int oh, int ow) {
  const int o = ((n * g.k + k) * g.ph + oh / 2) * g.pw + ow / 2;
  const int q = (oh & 1) * 2 + (ow & 1);
  return (mask[o] >> q) & 1 ? dy[o] * 0.25f : 0.0f;
}

// Sums red[j][0 .. kThreads) into red[j][0] for j < count, in a fixed tree: at each level
// red[j][t] += red[j][t + half] for t < half, the count x half adds of a level spread over all
// threads (each add its own; no thread's chain longer than a level's share).
template <int kRows, int kThreads>
__device__ __forceinline__ void block_tree_sum(float (&red)[kRows][kThreads], int count) {
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    for (int a = static_cast<int>(threadIdx.x); a < count * half; a += kThreads) {
      const int j = a / half, t = a - j * half;
      red[j][t] += red[j][t + half];
    }
    __syncthreads();
  }
}

// d(loss)/d(conv output) over the whole conv output (N,K,CH,CW) from dy and the mask, for
// another library's backward convolutions: conv_grad where a pool window reads, 0 in the rows
// and columns none reads (written every time, so the buffer needs no zeroing); and, in the same
// pass, the bias gradient's partial sums as channel_sums_partial (column_sums.cuh) makes them
// from that buffer: block (k, p) takes filter k's plane of part p's `chunk` examples
// (channel_sums_partition in channel_sums_plan.h), thread t the flat indices t, t + kThreads, ...
// of it in order, then the same tree, into partial[p K + k]. The same values in the same order
// as the two passes, so the same bits, without reading the 4x larger conv output back. A
// thread's (example, row, column) is divided out once and then stepped.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    relu_pool_backward_sums(Geometry g, int chunk, const float* __restrict__ dy,
                            const uint8_t* __restrict__ mask, float* __restrict__ dconv,
                            float* __restrict__ partial) {
  __shared__ float red[1][kThreads];
  const int ch = g.h - g.r + 1, cw = g.w - g.s + 1, hw = ch * cw;
  const int k = static_cast<int>(blockIdx.x), p = static_cast<int>(blockIdx.y);
  const int n_begin = p * chunk, n_end = imin(g.n, n_begin + chunk);
  const int count = (n_end - n_begin) * hw;
  int i = static_cast<int>(threadIdx.x);
  int e = i / hw, oh = (i - e * hw) / cw, ow = i - e * hw - oh * cw;
  // kThreads as (examples, rows, columns) to step by.
  const int de = kThreads / hw, dq = kThreads - de * hw, doh = dq / cw, dow = dq - doh * cw;
  float s = 0.0f;
  for (; i < count; i += kThreads) {
    const int n = n_begin + e;
    const float v = oh < g.oh && ow < g.ow ? conv_grad(g, dy, mask, n, k, oh, ow) : 0.0f;
    dconv[((n * g.k + k) * ch + oh) * cw + ow] = v;
    s += v;
    ow += dow;
    if (ow >= cw) {
      ow -= cw;
      ++oh;
    }
    oh += doh;
    if (oh >= ch) {
      oh -= ch;
      ++e;
    }
    e += de;
  }
  red[0][threadIdx.x] = s;
  block_tree_sum<1, kThreads>(red, 1);
  if (threadIdx.x == 0) partial[p * g.k + k] = red[0][0];
}

// The four conv-output gradients of pooled output o = (n,k,ph,pw), in the order q = 2 dh + dw:
// conv_grad of its window, from one load of dy and one of the mask.
__device__ __forceinline__ void window_grads(const float* dy, const uint8_t* mask, int o,
                                             float (&d)[4]) {
  const float v = dy[o] * 0.25f;
  const int bits = mask[o];
  for (int q = 0; q < 4; ++q) d[q] = (bits >> q) & 1 ? v : 0.0f;
}

// Direct weight and bias gradients of a small filter (crs <= kSlots - 1): block (k, p) sums, over
// the pool windows of chunk p's examples, dconv * x for each of filter k's C R S weights and
// dconv for its bias, into partial[p][k][0 .. crs] (crs + 1 values). The chunks are summed by
// sum_partials. A thread takes whole windows (windows tid, tid + kThreads, ...; in each, the
// positions q = 0..3), so that one load of dy and of the mask serves four positions and the
// window's x values are loaded together; it skips positions whose gradient is 0 (ReLU closed, or
// dy 0), adding nothing, as bias_partial adds their zeros (same bits).
// With 16 slots the kernel fits 64 registers (ptxas: no spill on sm_90, 24 bytes on sm_80), so 4
// blocks share an SM (LeNet's conv1: 640 blocks in 1.2 waves on 132 SMs, not 1.6); 33 slots
// would spill there and take 128 (2 blocks).
// kR, kS > 0: one input channel and a kR x kS filter (direct_patch_3x3 in conv_relu_pool_plan.h;
// LeNet's conv1): a window's (kR + 1) x (kS + 1) patch of x is loaded once, into registers, and
// each position takes its kR kS values from it (16 loads a window for 3 x 3, not 36), with the
// same fmas in the same order, so the same bits.
template <int kThreads, int kSlots, int kR = 0, int kS = 0>
__global__ void __launch_bounds__(kThreads, kSlots <= 16 ? 4 : 2)
    weights_direct_partial(Geometry g, int chunk, const float* __restrict__ x,
                           const float* __restrict__ dy, const uint8_t* __restrict__ mask,
                           float* __restrict__ partial) {
  constexpr int kMax = kSlots - 1;  // weights; the last slot is the bias
  __shared__ float red[kSlots][kThreads];
  __shared__ int offset[kMax];  // x offset of weight j = (c,r,s): c H W + r W + s
  const int k = static_cast<int>(blockIdx.x), p = static_cast<int>(blockIdx.y);
  for (int j = static_cast<int>(threadIdx.x); j < g.crs; j += kThreads) {
    const int c = j / (g.r * g.s), rem = j % (g.r * g.s);
    offset[j] = c * g.h * g.w + (rem / g.s) * g.w + rem % g.s;
  }
  __syncthreads();
  // Every index into acc is a constant after unrolling (the loops run to kMax, predicated on
  // crs), so that acc lives in registers rather than in local memory.
  float acc[kSlots];
  PARALAB_UNROLL
  for (int j = 0; j < kSlots; ++j) acc[j] = 0.0f;
  const int n_begin = p * chunk, n_end = imin(g.n, n_begin + chunk);
  const int per_n = g.ph * g.pw;
  const int count = (n_end - n_begin) * per_n;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    const int e = i / per_n, window = i - e * per_n, n = n_begin + e;
    const int ph = window / g.pw, pw = window - ph * g.pw;
    float d[4];
    window_grads(dy, mask, ((n * g.k + k) * g.ph + ph) * g.pw + pw, d);
    const float* xw = x + n * g.c * g.h * g.w + 2 * ph * g.w + 2 * pw;
    if constexpr (kR > 0) {
      static_assert(kS > 0 && kR * kS <= kMax, "a filter of kR x kS weights and its bias");
      float patch[kR + 1][kS + 1];
      PARALAB_UNROLL
      for (int a = 0; a <= kR; ++a) {
        PARALAB_UNROLL
        for (int b = 0; b <= kS; ++b) patch[a][b] = xw[a * g.w + b];
      }
      PARALAB_UNROLL
      for (int q = 0; q < 4; ++q) {
        const bool open = d[q] != 0.0f;
        PARALAB_UNROLL
        for (int j = 0; j < kR * kS; ++j) {
          const float f = fmaf(d[q], patch[(q >> 1) + j / kS][(q & 1) + j % kS], acc[j]);
          acc[j] = open ? f : acc[j];
        }
        acc[kMax] = open ? acc[kMax] + d[q] : acc[kMax];
      }
    } else {
      PARALAB_UNROLL
      for (int q = 0; q < 4; ++q) {
        const float* xp = xw + (q >> 1) * g.w + (q & 1);
        const bool open = d[q] != 0.0f;
        // Written unconditionally (every position is inside x) so that the loads may issue
        // together (nvcc still branches around them on sm_90); a closed position keeps acc.
        PARALAB_UNROLL
        for (int j = 0; j < kMax; ++j)
          if (j < g.crs) {
            const float v = xp[offset[j]];
            acc[j] = open ? fmaf(d[q], v, acc[j]) : acc[j];
          }
        acc[kMax] = open ? acc[kMax] + d[q] : acc[kMax];
      }
    }
  }
  PARALAB_UNROLL
  for (int j = 0; j < kMax; ++j)
    if (j < g.crs) red[j][threadIdx.x] = acc[j];
  red[g.crs][threadIdx.x] = acc[kMax];
  block_tree_sum<kSlots, kThreads>(red, g.crs + 1);
  float* out = partial + (p * g.k + k) * (g.crs + 1);
  for (int j = static_cast<int>(threadIdx.x); j <= g.crs; j += kThreads) out[j] = red[j][0];
}

// dconv (N,K,OH,OW) for the GEMM paths.
__global__ void conv_grad_all(Geometry g, const float* __restrict__ dy,
                              const uint8_t* __restrict__ mask, float* __restrict__ dconv) {
  const int total = g.n * g.k * g.oh * g.ow;
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    int t = i / g.ow;
    const int ow = i - t * g.ow;
    const int oh = t % g.oh;
    t /= g.oh;
    dconv[i] = conv_grad(g, dy, mask, t / g.k, t % g.k, oh, ow);
  }
}

// Bias gradient partials for the GEMM path: block (k, p) sums dconv over chunk p's positions
// into partial[p][k][crs] (the slot after filter k's weights), window by window in the order
// weights_direct_partial takes them (so both paths give the same bits).
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    bias_partial(Geometry g, int chunk, const float* __restrict__ dconv,
                 float* __restrict__ partial) {
  __shared__ float red[1][kThreads];
  const int k = static_cast<int>(blockIdx.x), p = static_cast<int>(blockIdx.y);
  const int n_begin = p * chunk, n_end = imin(g.n, n_begin + chunk);
  const int per_n = g.ph * g.pw;
  const int count = (n_end - n_begin) * per_n;
  float acc = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    const int e = i / per_n, window = i - e * per_n;
    const int ph = window / g.pw, pw = window - ph * g.pw;
    const float* d = dconv + (((n_begin + e) * g.k + k) * g.oh + 2 * ph) * g.ow + 2 * pw;
    acc += d[0];
    acc += d[1];
    acc += d[g.ow];
    acc += d[g.ow + 1];
  }
  red[0][threadIdx.x] = acc;
  block_tree_sum<1, kThreads>(red, 1);
  if (threadIdx.x == 0) partial[(p * g.k + k) * (g.crs + 1) + g.crs] = red[0][0];
}

// Weight gradient as an implicit GEMM per chunk: rows the K filters, columns j = (c,r,s), the
// reduction over chunk p's conv positions l = (n, oh, ow):
//   A[k][l] = dconv[n, k, oh, ow],  B[l][j] = x[n, c, oh+r, ow+s],
// into partial[p][k][j] (row stride crs + 1: the bias sits after the weights).
// The block's threads are a multiple of BK, so a thread loads one position l of the A tile in
// every step (rows tid / BK, + kThreads / BK, ...): it keeps l as (n, pos) and steps it by BK.
template <int BM, int BK, int kThreads>
struct FilterLoadA {
  static_assert(kThreads % BK == 0 && (BK * BM) % kThreads == 0, "one position per thread");
  static constexpr int kPer = BK * BM / kThreads;
  const Geometry& g;
  const float* dconv;
  int l_end;      // the chunk's end: positions beyond it belong to the next chunk
  int l, n, pos;  // this thread's position of the next fetch: l = n OH OW + pos
  float v[kPer];
  __device__ FilterLoadA(const Geometry& g_, const float* dconv_, int l_begin, int l_end_)
      : g(g_), dconv(dconv_), l_end(l_end_) {
    const int per_n = g.oh * g.ow;
    l = l_begin + static_cast<int>(threadIdx.x) % BK;
    n = l / per_n;
    pos = l - n * per_n;
  }
  __device__ void fetch(int /*l0: the position is stepped*/) {
    const int per_n = g.oh * g.ow;
    const int k0 = static_cast<int>(blockIdx.y) * BM + static_cast<int>(threadIdx.x) / BK;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int k = k0 + t * (kThreads / BK);
      v[t] = l < l_end && k < g.k ? dconv[(n * g.k + k) * per_n + pos] : 0.0f;
    }
    l += BK;
    for (pos += BK; pos >= per_n; pos -= per_n) ++n;
  }
  __device__ void store(float (&As)[BK][BM + kApad]) const {
    const int ll = static_cast<int>(threadIdx.x) % BK, row = static_cast<int>(threadIdx.x) / BK;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) As[ll][row + t * (kThreads / BK)] = v[t];
  }
};

// The block's threads are a multiple of BN, so a thread loads one column j of the tile in every
// step: its x offset (c H + r) W + s is worked out once (x_col, -1 past the filter's values). Its
// rows ll = tid / BN, + kThreads / BN, ... are positions it keeps as (n, oh, ow), stepped by BK.
template <int BN, int BK, int kThreads>
struct FilterLoadB {
  static_assert(kThreads % BN == 0 && BK % (kThreads / BN) == 0, "whole columns per thread");
  static constexpr int kPerCol = kThreads / BN, kPer = BK / kPerCol;
  const Geometry& g;
  const float* x;
  int l_end;  // the chunk's end: positions beyond it belong to the next chunk
  int x_col;
  int l[kPer], n[kPer], oh[kPer], ow[kPer];
  float v[kPer];
  __device__ FilterLoadB(const Geometry& g_, const float* x_, int l_begin, int l_end_, int x_col_)
      : g(g_), x(x_), l_end(l_end_), x_col(x_col_) {
    const int per_n = g.oh * g.ow;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      l[t] = l_begin + static_cast<int>(threadIdx.x) / BN + t * kPerCol;
      n[t] = l[t] / per_n;
      const int pos = l[t] - n[t] * per_n;
      oh[t] = pos / g.ow;
      ow[t] = pos - oh[t] * g.ow;
    }
  }
  __device__ void fetch(int /*l0: the positions are stepped*/) {
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      v[t] = l[t] < l_end && x_col >= 0 ? x[n[t] * g.c * g.h * g.w + oh[t] * g.w + ow[t] + x_col]
                                        : 0.0f;
      l[t] += BK;
      step_ars(n[t], oh[t], ow[t], BK, g.oh, g.ow);
    }
  }
  __device__ void store(float (&Bs)[BK][BN]) const {
    const int col = static_cast<int>(threadIdx.x) % BN, first = static_cast<int>(threadIdx.x) / BN;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) Bs[first + t * kPerCol][col] = v[t];
  }
};

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    filter_gemm_partial(Geometry g, int chunk, const float* __restrict__ x,
                        const float* __restrict__ dconv, float* __restrict__ partial) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  __shared__ __align__(16) float As[BK][BM + kApad];
  __shared__ __align__(16) float Bs[BK][BN];
  // blockIdx.x: column tile (weights), blockIdx.y: row tile (filters), blockIdx.z: chunk.
  const int p = static_cast<int>(blockIdx.z);
  const int per_n = g.oh * g.ow;
  const int l_begin = p * chunk * per_n;
  const int l_end = imin(g.n, (p + 1) * chunk) * per_n;
  int x_col = -1;  // this thread's column j = (c, r, s) of the B tile, as an x offset
  if (const int j = static_cast<int>(blockIdx.x) * BN + static_cast<int>(threadIdx.x) % BN;
      j < g.crs) {
    const int rs = g.r * g.s, c = j / rs, r = (j - c * rs) / g.s;
    x_col = (c * g.h + r) * g.w + j - c * rs - r * g.s;
  }
  float acc[TM][TN] = {};
  FilterLoadA<BM, BK, kThreads> load_a(g, dconv, l_begin, l_end);
  FilterLoadB<BN, BK, kThreads> load_b(g, x, l_begin, l_end, x_col);
  gemm_mainloop<BM, BN, BK, TM, TN>(As, Bs, l_begin, l_end, load_a, load_b, acc);
  constexpr int kCols = BN / TN;
  const int tx = static_cast<int>(threadIdx.x) % kCols, ty = static_cast<int>(threadIdx.x) / kCols;
  for (int i = 0; i < TM; ++i) {
    const int k = static_cast<int>(blockIdx.y) * BM + ty * TM + i;
    if (k >= g.k) break;
    float* out = partial + (p * g.k + k) * (g.crs + 1);
    for (int jj = 0; jj < TN; ++jj) {
      const int j = static_cast<int>(blockIdx.x) * BN + column_of<TN, kCols>(tx, jj);
      if (j < g.crs) out[j] = acc[i][jj];
    }
  }
}

// dw (K, C R S) and db (K) from partial[p][k][0 .. crs], summed over p = 0, 1, ... in order.
// parts <= kMaxParts: a thread loads its parts' values first, all in flight at once, then adds
// them in order.
__global__ void sum_partials(Geometry g, int parts, const float* __restrict__ partial,
                             float* __restrict__ dw, float* __restrict__ db) {
  const int width = g.k * (g.crs + 1);
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < width; i += stride) {
    float v[kMaxParts];
    PARALAB_UNROLL
    for (int p = 0; p < kMaxParts; ++p) v[p] = p < parts ? partial[p * width + i] : 0.0f;
    float s = 0.0f;
    PARALAB_UNROLL
    for (int p = 0; p < kMaxParts; ++p)
      if (p < parts) s += v[p];
    const int k = i / (g.crs + 1);
    const int j = i - k * (g.crs + 1);
    if (j < g.crs)
      dw[k * g.crs + j] = s;
    else
      db[k] = s;
  }
}

// Input gradient, in two kernels per slice of the batch (examples n_begin .. n_begin + count;
// data_slices in conv_relu_pool_plan.h bounds the buffer between them):
// (1) the columns GEMM: rows j = (c,r,s), columns m = (n - n_begin, oh, ow) over the conv
//     positions the pool reads, reduction over the K filters,
//       cols[j][m] = sum over k of w[k, j] dconv[n, k, oh, ow],
//     fmaf-accumulated over k ascending from 0: only the products the input gradient needs (an
//     implicit GEMM over input pixels and (k,r,s) multiplies about 4x as many, the zeros of dconv
//     outside the window and the padding of C to a tile, at LeNet's conv2);
// (2) col2im: dx[n, c, ih, iw] = the sum over (r, s) ascending of cols[(c,r,s)][(n, ih-r, iw-s)]
//     where that conv position is one the pool reads, added in that order from 0.
// The columns are stored j-major (cols[j * columns + m]), so that the GEMM's consecutive threads
// write, and col2im's consecutive threads (consecutive iw) read, consecutive floats.
template <int BM, int BK, int kThreads>
struct ColsLoadA : StridedTile<BK, BM, kThreads> {  // A[j][k] = w[k * crs + j], rows j0 ...
  const Geometry& g;
  const float* w;
  __device__ ColsLoadA(const Geometry& g_, const float* w_) : g(g_), w(w_) {}
  __device__ void fetch(int k0) {
    const int j0 = static_cast<int>(blockIdx.y) * BM;
    PARALAB_UNROLL
    for (int t = 0; t < this->kPer; ++t) {
      const int e = static_cast<int>(threadIdx.x) + t * kThreads;  // consecutive weights
      const int j = j0 + e % BM, k = k0 + e / BM;
      this->v[t] = j < g.crs && k < g.k ? w[k * g.crs + j] : 0.0f;
    }
  }
};

// The block's threads are a multiple of BN, so a thread loads one column m of the B tile in
// every step: its dconv offset at k = 0 is worked out once (col_base, -1 past the slice).
template <int BN, int BK, int kThreads>
struct ColsLoadB {  // B[k][m] = dconv[n, k, oh, ow]
  static_assert(kThreads % BN == 0 && BK % (kThreads / BN) == 0, "whole columns per thread");
  static constexpr int kPerCol = kThreads / BN, kPer = BK / kPerCol;
  const Geometry& g;
  const float* dconv;
  int col_base;
  float v[kPer];
  __device__ ColsLoadB(const Geometry& g_, const float* dconv_, int col_base_)
      : g(g_), dconv(dconv_), col_base(col_base_) {}
  __device__ void fetch(int k0) {
    const int per_n = g.oh * g.ow, first = static_cast<int>(threadIdx.x) / BN;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int k = k0 + first + t * kPerCol;
      v[t] = col_base >= 0 && k < g.k ? dconv[col_base + k * per_n] : 0.0f;
    }
  }
  __device__ void store(float (&Bs)[BK][BN]) const {
    const int col = static_cast<int>(threadIdx.x) % BN, first = static_cast<int>(threadIdx.x) / BN;
    PARALAB_UNROLL
    for (int t = 0; t < kPer; ++t) Bs[first + t * kPerCol][col] = v[t];
  }
};

// Rows (j) on blockIdx.y, columns (m) on blockIdx.x.
template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    data_cols_gemm(Geometry g, int n_begin, int n_count, const float* __restrict__ dconv,
                   const float* __restrict__ w, float* __restrict__ cols) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  static_assert(kThreads % BN == 0, "each thread loads one column of the B tile");
  __shared__ __align__(16) float As[BK][BM + kApad];
  __shared__ __align__(16) float Bs[BK][BN];
  const int per_n = g.oh * g.ow, columns = n_count * per_n;
  const int m0 = static_cast<int>(blockIdx.x) * BN;
  int col_base = -1;
  if (const int m = m0 + static_cast<int>(threadIdx.x) % BN; m < columns) {
    const int e = m / per_n;
    col_base = (n_begin + e) * g.k * per_n + m - e * per_n;
  }
  float acc[TM][TN] = {};
  ColsLoadA<BM, BK, kThreads> load_a(g, w);
  ColsLoadB<BN, BK, kThreads> load_b(g, dconv, col_base);
  gemm_mainloop<BM, BN, BK, TM, TN>(As, Bs, 0, g.k, load_a, load_b, acc);
  constexpr int kCols = BN / TN;
  const int tx = static_cast<int>(threadIdx.x) % kCols, ty = static_cast<int>(threadIdx.x) / kCols;
  for (int i = 0; i < TM; ++i) {
    const int j = static_cast<int>(blockIdx.y) * BM + ty * TM + i;
    if (j >= g.crs) break;
#if defined(__CUDACC__)
    // A thread's columns come in groups of 4 side by side from a multiple of 4, and columns
    // (n_count OH OW; OH and OW are even) is a multiple of 4: a group is wholly in or wholly out,
    // and goes as one 16-byte store (cols is 16-byte aligned, backward_data checks it), a warp's
    // stores whole sectors instead of one float in every 16 bytes. (The emulation stores the same
    // values one by one.)
    PARALAB_UNROLL
    for (int jj = 0; jj < TN; jj += 4) {
      const int m = m0 + column_of<TN, kCols>(tx, jj);
      if (m < columns)
        *reinterpret_cast<float4*>(cols + j * columns + m) =
            make_float4(acc[i][jj], acc[i][jj + 1], acc[i][jj + 2], acc[i][jj + 3]);
    }
#else
    for (int jj = 0; jj < TN; ++jj) {
      const int m = m0 + column_of<TN, kCols>(tx, jj);
      if (m < columns) cols[j * columns + m] = acc[i][jj];
    }
#endif
  }
}

// dx of examples n_begin .. n_begin + n_count from their columns (above): one thread per value.
__global__ void col2im_sum(Geometry g, int n_begin, int n_count, const float* __restrict__ cols,
                           float* __restrict__ dx) {
  const int per_n = g.oh * g.ow, columns = n_count * per_n;
  const int total = n_count * g.c * g.h * g.w;
  const int stride = static_cast<int>(blockDim.x * gridDim.x);
  float* out = dx + n_begin * g.c * g.h * g.w;
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += stride) {
    int t = i / g.w;
    const int iw = i - t * g.w;
    const int ih = t % g.h;
    t /= g.h;
    const int c = t % g.c, e = t / g.c;
    const float* col = cols + e * per_n;
    float acc = 0.0f;
    for (int r = 0; r < g.r; ++r) {
      const int oh = ih - r;
      if (oh < 0 || oh >= g.oh) continue;
      for (int s = 0; s < g.s; ++s) {
        const int ow = iw - s;
        if (ow < 0 || ow >= g.ow) continue;
        acc += col[((c * g.r + r) * g.s + s) * columns + oh * g.ow + ow];
      }
    }
    out[i] = acc;
  }
}

}  // namespace paralab::cuda::crp
