#include <algorithm>
#include <string>

#include "core/cuda/channel_sums_plan.h"
#include "core/cuda/check.h"
#include "core/cuda/conv_relu_pool_fused.h"
#include "core/cuda/conv_relu_pool_kernels.cuh"
#include "core/cuda/kernels.h"

namespace paralab::cuda::crp {

namespace {

// Whether `tiles` is the narrow set (else the wide one): the kernels are templates on their
// tiles, so each launcher below has one branch per set.
bool narrow(const TileSet& tiles) {
  PARALAB_REQUIRE(
      &tiles == &kNarrowTiles || &tiles == &kWideTiles,
      std::string("conv_relu_pool: unknown tile set ") + (tiles.name ? tiles.name : "(unnamed)"));
  return &tiles == &kNarrowTiles;
}

template <const TileSet& T>
void forward_gemm_on(const Geometry& g, const float* x, const float* w, const float* b, float* y,
                     uint8_t* mask, cudaStream_t s) {
  constexpr Tile F = T.forward;
  const dim3 grid(static_cast<unsigned>(ceil_div(forward_rows(g), F.bm)),
                  static_cast<unsigned>(ceil_div(g.k, F.bn)));
  forward_gemm<F.bm, F.bn, F.bk, F.tm, F.tn><<<grid, F.threads(), 0, s>>>(g, x, w, b, y, mask);
}

template <const TileSet& T>
void filter_gemm_on(const Geometry& g, const Partition& part, const float* x, const float* dconv,
                    float* partial, cudaStream_t s) {
  constexpr Tile W = T.filter;
  const dim3 grid(static_cast<unsigned>(ceil_div(g.crs, W.bn)),
                  static_cast<unsigned>(ceil_div(g.k, W.bm)), static_cast<unsigned>(part.parts));
  filter_gemm_partial<W.bm, W.bn, W.bk, W.tm, W.tn>
      <<<grid, W.threads(), 0, s>>>(g, part.chunk, x, dconv, partial);
}

template <const TileSet& T>
void data_cols_gemm_on(const Geometry& g, int n_begin, int n_count, const float* dconv,
                       const float* w, float* cols, cudaStream_t s) {
  constexpr Tile D = T.data;
  const dim3 grid(static_cast<unsigned>(ceil_div(int64_t{n_count} * g.oh * g.ow, D.bn)),
                  static_cast<unsigned>(ceil_div(g.crs, D.bm)));
  data_cols_gemm<D.bm, D.bn, D.bk, D.tm, D.tn>
      <<<grid, D.threads(), 0, s>>>(g, n_begin, n_count, dconv, w, cols);
}

void require_int32(const Geometry& g) {
  PARALAB_REQUIRE(indexes_fit_int32(g),
                  "conv_relu_pool (own kernels): x (" + std::to_string(g.n) + "," +
                      std::to_string(g.c) + "," + std::to_string(g.h) + "," + std::to_string(g.w) +
                      ") with " + std::to_string(g.k) +
                      " filters is beyond the kernels' 32-bit indexing (split the batch)");
  PARALAB_REQUIRE(grids_fit(g), "conv_relu_pool (own kernels): " + std::to_string(g.k) +
                                    " filters of " + std::to_string(g.crs) +
                                    " values are more than the GEMMs' grids hold (65,535 tiles)");
}

}  // namespace

Geometry checked_geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r,
                          int64_t s) {
  PARALAB_REQUIRE(dims_fit_int32(n, c, h, w, k, r, s),
                  "conv_relu_pool: x (" + std::to_string(n) + "," + std::to_string(c) + "," +
                      std::to_string(h) + "," + std::to_string(w) + ") with " + std::to_string(k) +
                      " filters of " + std::to_string(r) + "x" + std::to_string(s) +
                      " has a dimension beyond 32 bits");
  return make_geometry(static_cast<int>(n), static_cast<int>(c), static_cast<int>(h),
                       static_cast<int>(w), static_cast<int>(k), static_cast<int>(r),
                       static_cast<int>(s));
}

void forward(const Geometry& g, const TileSet& tiles, const float* x, const float* w,
             const float* b, float* y, uint8_t* mask, cudaStream_t s) {
  require_int32(g);
  if (direct(g)) {
    const int64_t outputs = int64_t{g.n} * g.k * g.ph * g.pw;
    if (direct_patch_3x3(g))
      forward_direct<3, 3><<<element_blocks(outputs), kElementThreads, 0, s>>>(g, x, w, b, y, mask);
    else
      forward_direct<><<<element_blocks(outputs), kElementThreads, 0, s>>>(g, x, w, b, y, mask);
  } else {
    if (narrow(tiles))
      forward_gemm_on<kNarrowTiles>(g, x, w, b, y, mask, s);
    else
      forward_gemm_on<kWideTiles>(g, x, w, b, y, mask, s);
  }
  PARALAB_CUDA_LAUNCHED();
}

void conv_grads(const Geometry& g, const float* dy, const uint8_t* mask, float* dconv,
                cudaStream_t s) {
  require_int32(g);
  const int64_t positions = int64_t{g.n} * g.k * g.oh * g.ow;
  conv_grad_all<<<element_blocks(positions), kElementThreads, 0, s>>>(g, dy, mask, dconv);
  PARALAB_CUDA_LAUNCHED();
}

void backward_weights(const Geometry& g, const TileSet& tiles, const float* x, const float* dy,
                      const uint8_t* mask, float* dconv, float* partial, float* dw, float* db,
                      cudaStream_t s) {
  require_int32(g);
  const Partition part = partition(g.n);
  PARALAB_REQUIRE(
      part.parts <= kMaxParts,
      std::string("conv_relu_pool: more weight-gradient chunks than sum_partials sums"));
  if (direct(g)) {
    const dim3 grid(static_cast<unsigned>(g.k), static_cast<unsigned>(part.parts));
    if (direct_patch_3x3(g))
      weights_direct_partial<kReduceThreads, kDirectSmallSlots, 3, 3>
          <<<grid, kReduceThreads, 0, s>>>(g, part.chunk, x, dy, mask, partial);
    else if (direct_small(g))
      weights_direct_partial<kReduceThreads, kDirectSmallSlots>
          <<<grid, kReduceThreads, 0, s>>>(g, part.chunk, x, dy, mask, partial);
    else
      weights_direct_partial<kReduceThreads, kDirectSlots>
          <<<grid, kReduceThreads, 0, s>>>(g, part.chunk, x, dy, mask, partial);
  } else {
    conv_grads(g, dy, mask, dconv, s);
    const dim3 bias_grid(static_cast<unsigned>(g.k), static_cast<unsigned>(part.parts));
    bias_partial<kReduceThreads>
        <<<bias_grid, kReduceThreads, 0, s>>>(g, part.chunk, dconv, partial);
    PARALAB_CUDA_LAUNCHED();
    if (narrow(tiles))
      filter_gemm_on<kNarrowTiles>(g, part, x, dconv, partial, s);
    else
      filter_gemm_on<kWideTiles>(g, part, x, dconv, partial, s);
  }
  PARALAB_CUDA_LAUNCHED();
  sum_partials<<<element_blocks(int64_t{g.k} * (g.crs + 1)), kElementThreads, 0, s>>>(
      g, part.parts, partial, dw, db);
  PARALAB_CUDA_LAUNCHED();
}

void backward_data(const Geometry& g, const TileSet& tiles, const float* dconv, const float* w,
                   float* cols, float* dx, cudaStream_t s) {
  require_int32(g);
  PARALAB_REQUIRE(reinterpret_cast<uintptr_t>(cols) % 16 == 0,
                  std::string("conv_relu_pool: the columns buffer is not 16-byte aligned"));
  const Slices slices = data_slices(g);
  const bool no_positions = g.oh == 0 || g.ow == 0;  // dx is all zeros: col2im adds nothing
  for (int n_begin = 0; n_begin < g.n; n_begin += slices.examples) {
    const int n_count = std::min(slices.examples, g.n - n_begin);
    if (!no_positions) {
      if (narrow(tiles))
        data_cols_gemm_on<kNarrowTiles>(g, n_begin, n_count, dconv, w, cols, s);
      else
        data_cols_gemm_on<kWideTiles>(g, n_begin, n_count, dconv, w, cols, s);
      PARALAB_CUDA_LAUNCHED();
    }
    col2im_sum<<<element_blocks(int64_t{n_count} * g.c * g.h * g.w), kElementThreads, 0, s>>>(
        g, n_begin, n_count, cols, dx);
    PARALAB_CUDA_LAUNCHED();
  }
}

void bias_relu_pool(const Geometry& g, const float* conv, const float* b, float* y, uint8_t* mask,
                    cudaStream_t s) {
  require_int32(g);
  const int64_t outputs = int64_t{g.n} * g.k * g.ph * g.pw;
  bias_relu_pool_k<<<element_blocks(outputs), kElementThreads, 0, s>>>(g, conv, b, y, mask);
  PARALAB_CUDA_LAUNCHED();
}

void relu_pool_backward(const Geometry& g, const float* dy, const uint8_t* mask, float* dconv,
                        float* partial, float* db, cudaStream_t s) {
  require_int32(g);
  const ChannelSumsPartition part = channel_sums_partition(g.n, g.k);
  if (part.parts > 0) {
    relu_pool_backward_sums<kChannelSumsThreads>
        <<<dim3(static_cast<unsigned>(g.k), static_cast<unsigned>(part.parts)), kChannelSumsThreads,
           0, s>>>(g, static_cast<int>(part.chunk), dy, mask, dconv, partial);
    PARALAB_CUDA_LAUNCHED();
  }
  finish_channel_sums(partial, db, g.k, part.parts, s);
}

}  // namespace paralab::cuda::crp
