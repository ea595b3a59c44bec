// ParaLab's own CUDA kernels for the conv -> ReLU -> avgpool stage and the column sums, run on
// the CPU by the emulator (tests/cuda_emulator.h) with the very grids the GPU gets
// (core/cuda/conv_relu_pool_plan.h), against the double-precision reference. This is where
// their index maps, tiles, bounds, partitions and reduction orders are tested on any machine;
// on a GPU, test_backends runs the same stage through the "cuda-fused" backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "tests/reference/reference.h"
#include "tests/test_util.h"
// The emulator, then the kernels it runs.
#include "tests/cuda_emulator.h"
// clang-format off
#include "core/cuda/conv_relu_pool_kernels.cuh"
#include "core/cuda/column_sums.cuh"
// clang-format on
#include "core/cuda/channel_sums_plan.h"
#include "core/cuda/kernel_log.h"

namespace paralab {
namespace {

using namespace cuda::crp;
using paralab::testing::all_close;
using paralab::testing::emulate;
using paralab::testing::to_double;
using paralab::testing::to_float;

// As test_backends: inputs are floats, the reference sums them in double; float32 accumulation
// over at most 1,250 terms errs by ~1e-6 relative, so rtol 1e-4 has a wide margin yet catches any
// wrong index or missing term (errors of order 1); atol covers sums that cancel to near zero.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

std::vector<float> random_floats(std::size_t n, uint64_t seed, double scale = 1.0) {
  ref::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One stage's inputs and what the kernels made of them.
struct Stage {
  Geometry g;
  std::vector<float> x, w, b, dy;
  std::vector<float> y;
  std::vector<uint8_t> mask;

  Stage(int n, int c, int h, int w_, int k, int r, int s, uint64_t seed)
      : g(make_geometry(n, c, h, w_, k, r, s)),
        x(random_floats(std::size_t(n) * c * h * w_, seed)),
        w(random_floats(std::size_t(k) * c * r * s, seed + 1, 1.0 / std::sqrt(c * r * s))),
        b(random_floats(std::size_t(k), seed + 2, 0.1)),
        dy(random_floats(std::size_t(n) * k * g.ph * g.pw, seed + 3)) {}

  std::size_t pooled() const { return std::size_t(g.n) * g.k * g.ph * g.pw; }
  ref::StageResult reference() const {
    return ref::conv_relu_pool(to_double(x), to_double(w), to_double(b), to_double(dy), g.n, g.c,
                               g.h, g.w, g.k, g.r, g.s);
  }
};

// The forward kernels, as the launcher would run them (direct or GEMM chosen by the caller).
void run_forward(Stage& st, bool gemm, const TileSet& tiles = kDefaultTiles) {
  st.y.assign(st.pooled(), -1.0f);
  st.mask.assign(st.pooled(), 0xff);
  const Geometry& g = st.g;
  if (!gemm) {
    if (direct_patch_3x3(g))
      emulate(dim3(element_blocks(int64_t(st.pooled()))), dim3(kElementThreads),
              forward_direct<3, 3>, g, st.x.data(), st.w.data(), st.b.data(), st.y.data(),
              st.mask.data());
    else
      emulate(dim3(element_blocks(int64_t(st.pooled()))), dim3(kElementThreads), forward_direct<>,
              g, st.x.data(), st.w.data(), st.b.data(), st.y.data(), st.mask.data());
  } else if (&tiles == &kNarrowTiles) {
    constexpr Tile F = kNarrowTiles.forward;
    emulate(dim3(unsigned(ceil_div(forward_rows(g), F.bm)), unsigned(ceil_div(g.k, F.bn))),
            dim3(F.threads()), forward_gemm<F.bm, F.bn, F.bk, F.tm, F.tn>, g, st.x.data(),
            st.w.data(), st.b.data(), st.y.data(), st.mask.data());
  } else {
    constexpr Tile F = kWideTiles.forward;
    emulate(dim3(unsigned(ceil_div(forward_rows(g), F.bm)), unsigned(ceil_div(g.k, F.bn))),
            dim3(F.threads()), forward_gemm<F.bm, F.bn, F.bk, F.tm, F.tn>, g, st.x.data(),
            st.w.data(), st.b.data(), st.y.data(), st.mask.data());
  }
}

struct Grads {
  std::vector<float> dw, db, dconv, dx;
};

// backward_data as the launcher runs it: dx from dconv, the columns GEMM and col2im per slice of
// the batch (slices of at most max_floats columns; the launcher's default bound by default).
template <const TileSet& T>
void run_data_slice(const Geometry& g, int n_begin, int n_count, const std::vector<float>& dconv,
                    const std::vector<float>& w, std::vector<float>& cols) {
  constexpr Tile D = T.data;
  emulate(dim3(unsigned(ceil_div(int64_t{n_count} * g.oh * g.ow, D.bn)),
               unsigned(ceil_div(g.crs, D.bm))),
          dim3(D.threads()), data_cols_gemm<D.bm, D.bn, D.bk, D.tm, D.tn>, g, n_begin, n_count,
          dconv.data(), w.data(), cols.data());
}

std::vector<float> run_data_gemm(const Stage& st, const std::vector<float>& dconv,
                                 const TileSet& tiles, int64_t max_floats = kColsMaxFloats) {
  const Geometry& g = st.g;
  std::vector<float> dx(std::size_t(g.n) * g.c * g.h * g.w, -1.0f);
  std::vector<float> cols(std::size_t(cols_floats(g, max_floats)), -1.0f);
  const Slices slices = data_slices(g, max_floats);
  for (int n_begin = 0; n_begin < g.n; n_begin += slices.examples) {
    const int n_count = std::min(slices.examples, g.n - n_begin);
    if (&tiles == &kNarrowTiles)
      run_data_slice<kNarrowTiles>(g, n_begin, n_count, dconv, st.w, cols);
    else
      run_data_slice<kWideTiles>(g, n_begin, n_count, dconv, st.w, cols);
    emulate(dim3(element_blocks(int64_t{n_count} * g.c * g.h * g.w)), dim3(kElementThreads),
            col2im_sum, g, n_begin, n_count, static_cast<const float*>(cols.data()), dx.data());
  }
  return dx;
}

// backward_weights and backward_data as the launcher runs them (generic_direct: the direct
// weight gradient's generic instance even where the launcher takes the 3 x 3 patch one).
Grads run_backward(const Stage& st, bool gemm, const TileSet& tiles = kDefaultTiles,
                   bool generic_direct = false) {
  const Geometry& g = st.g;
  Grads out;
  out.dw.assign(std::size_t(g.k) * g.crs, -1.0f);
  out.db.assign(std::size_t(g.k), -1.0f);
  out.dconv.assign(std::size_t(g.n) * g.k * g.oh * g.ow, -1.0f);
  out.dx.assign(std::size_t(g.n) * g.c * g.h * g.w, -1.0f);
  std::vector<float> partial(std::size_t(partial_floats(g)), -1.0f);
  const Partition part = partition(g.n);
  const dim3 per_filter(unsigned(g.k), unsigned(part.parts));
  emulate(dim3(element_blocks(int64_t(out.dconv.size()))), dim3(kElementThreads), conv_grad_all, g,
          st.dy.data(), st.mask.data(), out.dconv.data());
  if (!gemm) {
    if (direct_patch_3x3(g) && !generic_direct)
      emulate(per_filter, dim3(kReduceThreads),
              weights_direct_partial<kReduceThreads, kDirectSmallSlots, 3, 3>, g, part.chunk,
              st.x.data(), st.dy.data(), st.mask.data(), partial.data());
    else if (direct_small(g))
      emulate(per_filter, dim3(kReduceThreads),
              weights_direct_partial<kReduceThreads, kDirectSmallSlots>, g, part.chunk, st.x.data(),
              st.dy.data(), st.mask.data(), partial.data());
    else
      emulate(per_filter, dim3(kReduceThreads),
              weights_direct_partial<kReduceThreads, kDirectSlots>, g, part.chunk, st.x.data(),
              st.dy.data(), st.mask.data(), partial.data());
  } else {
    emulate(per_filter, dim3(kReduceThreads), bias_partial<kReduceThreads>, g, part.chunk,
            static_cast<const float*>(out.dconv.data()), partial.data());
    static_assert(kWideTiles.filter.bm == kNarrowTiles.filter.bm &&
                      kWideTiles.filter.bn == kNarrowTiles.filter.bn &&
                      kWideTiles.filter.bk == kNarrowTiles.filter.bk &&
                      kWideTiles.filter.tm == kNarrowTiles.filter.tm &&
                      kWideTiles.filter.tn == kNarrowTiles.filter.tn,
                  "one filter tile for both sets: a second set would need a branch here");
    constexpr Tile W = kWideTiles.filter;
    emulate(
        dim3(unsigned(ceil_div(g.crs, W.bn)), unsigned(ceil_div(g.k, W.bm)), unsigned(part.parts)),
        dim3(W.threads()), filter_gemm_partial<W.bm, W.bn, W.bk, W.tm, W.tn>, g, part.chunk,
        st.x.data(), static_cast<const float*>(out.dconv.data()), partial.data());
  }
  emulate(dim3(element_blocks(int64_t(g.k) * (g.crs + 1))), dim3(kElementThreads), sum_partials, g,
          part.parts, static_cast<const float*>(partial.data()), out.dw.data(), out.db.data());
  out.dx = run_data_gemm(st, out.dconv, tiles);
  return out;
}

// Shapes: LeNet's two stages at a small batch, and odd ones (a 7x7 conv output pooling to 3x3
// drops a row and a column; K, C and N not multiples of any tile; more than one row tile).
struct Shape7 {
  int n, c, h, w, k, r, s;
};
constexpr Shape7 kConv1{3, 1, 28, 28, 20, 3, 3};
constexpr Shape7 kConv2{3, 20, 13, 13, 50, 5, 5};
constexpr Shape7 kOdd{3, 4, 9, 8, 5, 3, 2};
constexpr Shape7 kWide{5, 3, 12, 11, 70, 3, 3};  // two column tiles forward; 35 rows of windows
// Several tiles each way and tails in both: 70 filters, 40 input channels (the input gradient's
// column tiles), an odd batch.
constexpr Shape7 kDeep{3, 40, 7, 6, 70, 3, 3};
// A batch that the weight gradient's fixed partition cuts into chunks of several examples, the
// last one shorter (33 = 16 x 2 + 1), as LeNet's 256 is cut into chunks of 8.
constexpr Shape7 kOddBatch{33, 2, 6, 5, 3, 3, 2};

Stage make_stage(const Shape7& s, uint64_t seed) {
  return Stage(s.n, s.c, s.h, s.w, s.k, s.r, s.s, seed);
}

void expect_forward_matches_reference(const Shape7& shape, bool gemm) {
  Stage st = make_stage(shape, 11);
  run_forward(st, gemm);
  const ref::StageResult r = st.reference();
  EXPECT_TRUE(all_close(st.y, r.y, kAtol, kRtol)) << (gemm ? "gemm" : "direct");
  // Each mask bit says whether ReLU passed that conv output: check it against the reference's
  // conv (in double; random data keeps every pre-activation far from 0 at these sizes).
  const auto conv = ref::conv2d_forward(to_double(st.x), to_double(st.w), to_double(st.b), st.g.n,
                                        st.g.c, st.g.h, st.g.w, st.g.k, st.g.r, st.g.s);
  const int OH = st.g.h - st.g.r + 1, OW = st.g.w - st.g.s + 1;
  int wrong = 0;
  for (std::size_t i = 0; i < st.pooled(); ++i) {
    const int pw = int(i % st.g.pw), ph = int(i / st.g.pw % st.g.ph);
    const std::size_t nk = i / (std::size_t(st.g.ph) * st.g.pw);
    for (int q = 0; q < 4; ++q) {
      const double a = conv[(nk * OH + 2 * ph + q / 2) * OW + 2 * pw + q % 2];
      wrong += ((st.mask[i] >> q) & 1) != (a > 0 ? 1 : 0);
    }
    wrong += (st.mask[i] >> 4) != 0;
  }
  EXPECT_EQ(wrong, 0) << "mask bits that disagree with the reference's ReLU";
}

// What a CUDA device's ops chose, as the results list it: restore() puts back an earlier
// entries(), forgetting what was noted since (layer_split's profiling pass); the first note of a
// key still wins after.
TEST(KernelLog, RestoreForgetsWhatWasNotedSince) {
  cuda::KernelLog log;
  log.note("a", 1);
  const nlohmann::json before = log.entries();
  log.note("b", 2);
  log.revise("a", 3);
  log.restore(before);
  EXPECT_EQ(log.entries(), nlohmann::json({{"a", 1}}));
  log.note("b", 4);
  log.note("b", 5);
  EXPECT_EQ(log.entries(), nlohmann::json({{"a", 1}, {"b", 4}}));
  log.restore(nullptr);
  EXPECT_EQ(log.entries(), nlohmann::json::object());
}

TEST(FusedKernels, DirectForwardMatchesReference) {
  expect_forward_matches_reference(kConv1, false);
  expect_forward_matches_reference(kOdd, false);
}

TEST(FusedKernels, GemmForwardMatchesReference) {
  expect_forward_matches_reference(kConv2, true);
  expect_forward_matches_reference(kOdd, true);
  expect_forward_matches_reference(kWide, true);
  expect_forward_matches_reference(kDeep, true);
}

TEST(FusedKernels, DirectAndGemmForwardAgreeToTheBit) {
  // Both accumulate over (c,r,s) in order with fmaf, then add the bias and pool alike.
  for (const Shape7& s : {kConv1, kOdd}) {
    Stage a = make_stage(s, 21), b = make_stage(s, 21);
    run_forward(a, false);
    run_forward(b, true);
    EXPECT_TRUE(bits_equal(a.y, b.y)) << "C=" << s.c;
    EXPECT_EQ(a.mask, b.mask) << "C=" << s.c;
  }
}

TEST(FusedKernels, ForwardOfAnExampleIsBitIdenticalAtEveryBatchSize) {
  // What tests/strategy_harness.h relies on: a shard sees the activations the batch sees.
  for (const bool gemm : {false, true}) {
    const Shape7 whole{7, 20, 13, 13, 50, 5, 5};
    Stage all = make_stage(whole, 31);
    run_forward(all, gemm);
    Stage part = make_stage({3, 20, 13, 13, 50, 5, 5}, 31);
    part.x.assign(all.x.begin() + 4 * 20 * 13 * 13, all.x.end());  // examples 4, 5, 6
    part.w = all.w;
    part.b = all.b;
    run_forward(part, gemm);
    EXPECT_TRUE(std::equal(part.y.begin(), part.y.end(), all.y.begin() + 4 * 50 * 16,
                           [](float p, float q) { return std::memcmp(&p, &q, 4) == 0; }))
        << (gemm ? "gemm" : "direct");
  }
}

void expect_backward_matches_reference(const Shape7& shape, bool gemm) {
  Stage st = make_stage(shape, 41);
  run_forward(st, !direct(st.g));
  const Grads got = run_backward(st, gemm);
  const ref::StageResult r = st.reference();
  const char* path = gemm ? "gemm" : "direct";
  EXPECT_TRUE(all_close(got.dw, r.dw, kAtol, kRtol)) << "dw, " << path;
  EXPECT_TRUE(all_close(got.db, r.db, kAtol, kRtol)) << "db, " << path;
  EXPECT_TRUE(all_close(got.dx, r.dx, kAtol, kRtol)) << "dx, " << path;
}

TEST(FusedKernels, DirectBackwardMatchesReference) {
  expect_backward_matches_reference(kConv1, false);
  expect_backward_matches_reference(kOdd, false);
}

TEST(FusedKernels, GemmBackwardMatchesReference) {
  expect_backward_matches_reference(kConv2, true);
  expect_backward_matches_reference(kOdd, true);
  expect_backward_matches_reference(kWide, true);
  expect_backward_matches_reference(kDeep, true);
}

// A stage whose values lie on grids coarse enough that every product and every partial sum is
// exact in float at LeNet's training batch: x in {-2..2}/4, w in {-4..4}/64, b in {-8..8}/256,
// dy in {-8..8}/16. Bounds at N = 256, the larger of the two stages each: a conv output adds
// <= 500 products (conv2) on a 2^-8 grid to below 2^4; dw <= 256 * 676 products (conv1) on a
// 2^-8 grid, each below 2^-4, to below 2^14; db as many values on a 2^-6 grid to below 2^15; dx
// <= 1,250 products (conv2) on a 2^-12 grid to below 2^4: at most 2^22 steps of a grid, within
// float's 24 bits. So the kernels must give the double-precision reference's values to the bit
// in any order, and the ReLU decides alike in float and in double (ties at exactly 0 included).
Stage exact_stage(const Shape7& s, uint64_t seed) {
  Stage st = make_stage(s, seed);
  ref::Rng rng(seed);
  const auto fill = [&rng](std::vector<float>& v, int half_range, float step) {
    for (float& x : v)
      x = step *
          static_cast<float>(static_cast<int>(rng.next_u64() % (2 * half_range + 1)) - half_range);
  };
  fill(st.x, 2, 0.25f);
  fill(st.w, 4, 1.0f / 64);
  fill(st.b, 8, 1.0f / 256);
  fill(st.dy, 8, 1.0f / 16);
  return st;
}

template <typename T>
int64_t count_unequal(const std::vector<T>& got, const std::vector<double>& want) {
  int64_t n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) n += double(got[i]) != want[i];
  return got.size() == want.size() ? n : -1;
}

TEST(FusedKernels, LeNetStagesAtItsTrainingBatchAreExact) {
  // LeNet's two stages at batch 256 (under sanitizers 64: the same code on fewer tiles), through
  // the launch grids, weight-gradient chunks and input-gradient slices the launcher uses there,
  // with each tile set; the stage's forward and backward as the launcher picks them.
  const int n = testing::kSanitizerBuild ? 64 : 256;
  for (const Shape7 s : {Shape7{n, 1, 28, 28, 20, 3, 3}, Shape7{n, 20, 13, 13, 50, 5, 5}}) {
    const Stage base = exact_stage(s, 91);
    const ref::StageResult r = base.reference();
    for (const TileSet* tiles : {&kWideTiles, &kNarrowTiles}) {
      Stage st = base;
      const bool gemm = !direct(st.g);
      run_forward(st, gemm, *tiles);
      const Grads got = run_backward(st, gemm, *tiles);
      const std::string at = "C=" + std::to_string(s.c) + (gemm ? " gemm" : " direct") +
                             (tiles == &kNarrowTiles ? " narrow" : " wide");
      EXPECT_EQ(count_unequal(st.y, r.y), 0) << "y, " << at;
      EXPECT_EQ(count_unequal(got.dw, r.dw), 0) << "dw, " << at;
      EXPECT_EQ(count_unequal(got.db, r.db), 0) << "db, " << at;
      EXPECT_EQ(count_unequal(got.dx, r.dx), 0) << "dx, " << at;
      if (!gemm) break;  // the direct kernels have no tiles
    }
  }
}

TEST(FusedKernels, NarrowTilesGiveTheWideTilesBits) {
  // Every tile computes each output with the same operations in the same order: the narrow set
  // (several threads loading each row of A, one pool window per thread; smaller tiles of the
  // input gradient's columns) changes no bit.
  // The weight gradient's tile is one for both sets (run_backward's static_assert): only the
  // forward and input-gradient GEMMs differ, so only they run twice.
  for (const Shape7& s : {kConv2, kOdd, kWide, kDeep}) {
    Stage wide = make_stage(s, 71), narrow = make_stage(s, 71);
    run_forward(wide, true, kWideTiles);
    run_forward(narrow, true, kNarrowTiles);
    EXPECT_TRUE(bits_equal(wide.y, narrow.y)) << "forward, K=" << s.k << " C=" << s.c;
    EXPECT_EQ(wide.mask, narrow.mask) << "K=" << s.k << " C=" << s.c;
  }
  for (const Shape7& s : {kOdd, kWide, kDeep}) {
    Stage st = make_stage(s, 73);
    run_forward(st, true);
    std::vector<float> dconv(std::size_t(st.g.n) * st.g.k * st.g.oh * st.g.ow, -1.0f);
    emulate(dim3(element_blocks(int64_t(dconv.size()))), dim3(kElementThreads), conv_grad_all, st.g,
            st.dy.data(), st.mask.data(), dconv.data());
    EXPECT_TRUE(
        bits_equal(run_data_gemm(st, dconv, kWideTiles), run_data_gemm(st, dconv, kNarrowTiles)))
        << "dx, K=" << s.k << " C=" << s.c;
  }
}

TEST(FusedKernels, InputGradientInSlicesHasTheBitsOfOneSlice) {
  // Each example's dx depends on its own columns only: a columns buffer bounded to one example,
  // or to two (the last slice shorter), gives the bits of the whole batch at once.
  Stage st = make_stage(kOddBatch, 79);
  run_forward(st, true);
  std::vector<float> dconv(std::size_t(st.g.n) * st.g.k * st.g.oh * st.g.ow, -1.0f);
  emulate(dim3(element_blocks(int64_t(dconv.size()))), dim3(kElementThreads), conv_grad_all, st.g,
          st.dy.data(), st.mask.data(), dconv.data());
  const int64_t per_example = int64_t{st.g.crs} * st.g.oh * st.g.ow;
  ASSERT_EQ(data_slices(st.g).count, 1);
  ASSERT_EQ(data_slices(st.g, per_example).count, st.g.n);
  ASSERT_EQ(data_slices(st.g, 2 * per_example + 1).examples, 2);
  ASSERT_EQ(data_slices(st.g, 2 * per_example + 1).count, (st.g.n + 1) / 2);
  const auto whole = run_data_gemm(st, dconv, kDefaultTiles);
  EXPECT_TRUE(bits_equal(whole, run_data_gemm(st, dconv, kDefaultTiles, per_example)));
  EXPECT_TRUE(bits_equal(whole, run_data_gemm(st, dconv, kNarrowTiles, 2 * per_example + 1)));
}

TEST(FusedKernels, DataSlicesBoundTheColumnsBuffer) {
  // LeNet's conv2 at batch 256: 500 x 64 columns per example, the whole batch in one slice.
  const Geometry lenet = make_geometry(256, 20, 13, 13, 50, 5, 5);
  EXPECT_EQ(data_slices(lenet).count, 1);
  EXPECT_EQ(cols_floats(lenet), 256 * 500 * 64);
  // At batch 1,000 the buffer would be 32 M floats: 524 examples a slice, two slices.
  const Geometry big = make_geometry(1000, 20, 13, 13, 50, 5, 5);
  EXPECT_EQ(data_slices(big).examples, int(kColsMaxFloats / (500 * 64)));
  EXPECT_EQ(data_slices(big).count, 2);
  EXPECT_LE(cols_floats(big), kColsMaxFloats);
  // One example larger than the bound still makes a slice of one.
  EXPECT_EQ(data_slices(lenet, 10).examples, 1);
  EXPECT_EQ(data_slices(lenet, 10).count, 256);
}

// The cuDNN path's passes around cuDNN's convolutions (conv_relu_pool.cpp): bias, ReLU and pool
// over a conv output computed elsewhere, and the conv output's gradient from dy and the mask.
TEST(FusedKernels, BiasReluPoolOverAConvOutputMatchesReference) {
  // conv2's 9 x 9 output pools in floor mode: its last row and column are read by no window.
  for (const Shape7& shape : {kConv1, kConv2, kOdd}) {
    Stage st = make_stage(shape, 83);
    const Geometry& g = st.g;
    const std::vector<float> conv = to_float(ref::conv2d_forward(
        to_double(st.x), to_double(st.w), std::vector<double>(std::size_t(g.k), 0.0), g.n, g.c, g.h,
        g.w, g.k, g.r, g.s));
    ASSERT_EQ(int64_t(conv.size()), conv_output_floats(g));
    std::vector<float> y(st.pooled(), -1.0f);
    std::vector<uint8_t> mask(st.pooled(), 0xff);
    emulate(dim3(element_blocks(int64_t(st.pooled()))), dim3(kElementThreads), bias_relu_pool_k, g,
            conv.data(), st.b.data(), y.data(), mask.data());
    EXPECT_TRUE(all_close(y, st.reference().y, kAtol, kRtol)) << "K=" << g.k;
    // The ReLU bits agree with the own forward kernel's, which sums in float: with these data no
    // pre-activation lies within rounding of 0.
    run_forward(st, g.crs > kDirectMaxCrs);
    int differ = 0;
    for (std::size_t i = 0; i < mask.size(); ++i) differ += mask[i] != st.mask[i];
    EXPECT_EQ(differ, 0) << "K=" << g.k;
  }
}

TEST(FusedKernels, ReluPoolBackwardFillsTheWholeConvOutputAndSumsItAsChannelSums) {
  // dconv over the whole conv output (conv_grad where a window reads, 0 in the rows and columns
  // none reads), and in the same pass the bias gradient's partial sums with the bits
  // channel_sums_partial makes of that dconv, on the same parts. Shapes: two with rows and
  // columns no window reads (kConv2: 9x9 pooled to 4x4) on the launcher's partition, a plane
  // larger than a block (LeNet's conv1: 676) and one much smaller (16) with several examples a
  // part and a shorter last part (small, so that the emulation stays quick under TSan).
  const auto launcher_chunk = [](const Shape7& s) {
    return int(cuda::channel_sums_partition(s.n, s.k).chunk);
  };
  for (const auto& [shape, chunk] :
       {std::pair{kConv2, launcher_chunk(kConv2)}, std::pair{kOdd, launcher_chunk(kOdd)},
        std::pair{Shape7{5, 1, 28, 28, 3, 3, 3}, 2}, std::pair{Shape7{7, 2, 6, 6, 3, 3, 3}, 3}}) {
    Stage st = make_stage(shape, 89);
    run_forward(st, !direct(st.g));
    const Geometry& g = st.g;
    std::vector<float> dconv(std::size_t(g.n) * g.k * g.oh * g.ow, -1.0f);
    emulate(dim3(element_blocks(int64_t(dconv.size()))), dim3(kElementThreads), conv_grad_all, g,
            st.dy.data(), st.mask.data(), dconv.data());
    const int parts = (g.n + chunk - 1) / chunk;
    std::vector<float> full(std::size_t(conv_output_floats(g)), -1.0f);
    std::vector<float> partial(std::size_t(parts) * g.k, -7.0f);
    emulate(dim3(unsigned(g.k), unsigned(parts)), dim3(cuda::kChannelSumsThreads),
            relu_pool_backward_sums<cuda::kChannelSumsThreads>, g, chunk, st.dy.data(),
            st.mask.data(), full.data(), partial.data());
    const int ch = g.h - g.r + 1, cw = g.w - g.s + 1;
    int wrong = 0;
    for (int nk = 0; nk < g.n * g.k; ++nk)
      for (int oh = 0; oh < ch; ++oh)
        for (int ow = 0; ow < cw; ++ow) {
          const float got = full[(std::size_t(nk) * ch + oh) * cw + ow];
          const float want =
              oh < g.oh && ow < g.ow ? dconv[(std::size_t(nk) * g.oh + oh) * g.ow + ow] : 0.0f;
          wrong += std::memcmp(&got, &want, sizeof got) != 0;
        }
    EXPECT_EQ(wrong, 0) << "K=" << g.k;
    std::vector<float> want(partial.size(), -8.0f);
    emulate(dim3(unsigned(g.k), unsigned(parts)), dim3(cuda::kChannelSumsThreads),
            cuda::channel_sums_partial<cuda::kChannelSumsThreads>,
            static_cast<const float*>(full.data()), want.data(), g.n, g.k, ch * cw, chunk);
    EXPECT_TRUE(bits_equal(partial, want)) << "K=" << g.k << " N=" << g.n;
  }
}

TEST(FusedKernels, TileSetsAreFoundByTheirExactName) {
  EXPECT_EQ(find_tile_set("wide"), &kWideTiles);
  EXPECT_EQ(find_tile_set("narrow"), &kNarrowTiles);
  EXPECT_EQ(find_tile_set("Wide"), nullptr);
  EXPECT_EQ(find_tile_set(""), nullptr);
  EXPECT_EQ(find_tile_set("narrow "), nullptr);
}

TEST(FusedKernels, BackwardSumsChunksOfSeveralExamples) {
  const Partition p = partition(kOddBatch.n);
  ASSERT_GT(p.chunk, 1);
  ASSERT_LT(int64_t{p.chunk} * p.parts, int64_t{kOddBatch.n} + p.chunk);
  ASSERT_NE(kOddBatch.n % p.chunk, 0) << "the last chunk should be shorter";
  expect_backward_matches_reference(kOddBatch, false);
  expect_backward_matches_reference(kOddBatch, true);
}

TEST(FusedKernels, WeightGradientChunkReadsOnlyItsOwnPositions) {
  // 4 conv positions an example and chunks of 2 examples: 8 positions, half of one 16-position
  // step of the tile, so a chunk's last step reaches into the next chunk. Infinities there, times
  // the zeros of the x tile past the chunk, would turn the chunk's sums into NaN.
  const Geometry g = make_geometry(33, 2, 4, 4, 3, 3, 3);
  const Partition part = partition(g.n);
  constexpr Tile W = kWideTiles.filter;
  const int per_n = g.oh * g.ow;
  ASSERT_EQ(per_n, 4);
  ASSERT_NE(part.chunk * per_n % W.bk, 0);
  const auto x = random_floats(std::size_t(g.n) * g.c * g.h * g.w, 3);
  auto dconv = random_floats(std::size_t(g.n) * g.k * per_n, 4);
  for (std::size_t i = std::size_t(part.chunk) * g.k * per_n; i < dconv.size(); ++i)
    dconv[i] = std::numeric_limits<float>::infinity();  // every chunk but the first
  std::vector<float> partial(std::size_t(partial_floats(g)), -1.0f);
  emulate(
      dim3(unsigned(ceil_div(g.crs, W.bn)), unsigned(ceil_div(g.k, W.bm)), unsigned(part.parts)),
      dim3(W.threads()), filter_gemm_partial<W.bm, W.bn, W.bk, W.tm, W.tn>, g, part.chunk, x.data(),
      static_cast<const float*>(dconv.data()), partial.data());
  int not_finite = 0;
  for (int k = 0; k < g.k; ++k)
    for (int j = 0; j < g.crs; ++j)
      not_finite += !std::isfinite(partial[std::size_t(k) * (g.crs + 1) + j]);
  EXPECT_EQ(not_finite, 0) << "of the first chunk's weight-gradient sums";
}

TEST(FusedKernels, BiasGradientIsTheSameBitsOnBothPaths) {
  // Same positions per thread, same tree: the direct path skips closed positions, the GEMM path
  // adds their zeros.
  // Two shapes: kOdd (filters of 24 values, the larger register set), and one whose block gives
  // some threads two windows (18 x 18 of them; 16 filters, 2 chunks), so that the order of the adds
  // across windows decides bits.
  for (const Shape7& shape : {kOdd, Shape7{2, 1, 38, 38, 16, 3, 3}}) {
    Stage st = make_stage(shape, 51);
    run_forward(st, false);
    EXPECT_TRUE(bits_equal(run_backward(st, false).db, run_backward(st, true).db))
        << "N=" << shape.n;
  }
}

TEST(FusedKernels, PatchWeightGradientGivesTheGenericKernelsBits) {
  // The 3 x 3 one-channel instance (each window's patch loaded once) against the generic one, on
  // random data with closed ReLU positions: the same fmas in the same order, so the same bits.
  for (const Shape7& shape :
       {kConv1, Shape7{3, 1, 9, 11, 5, 3, 3}, Shape7{2, 1, 38, 38, 16, 3, 3}}) {
    Stage st = make_stage(shape, 61);
    ASSERT_TRUE(direct_patch_3x3(st.g));
    run_forward(st, false);
    const Grads patch = run_backward(st, false), generic = run_backward(st, false, kDefaultTiles,
                                                                        /*generic_direct=*/true);
    EXPECT_TRUE(bits_equal(patch.dw, generic.dw)) << "dw, N=" << shape.n << " W=" << shape.w;
    EXPECT_TRUE(bits_equal(patch.db, generic.db)) << "db, N=" << shape.n << " W=" << shape.w;
  }
}

TEST(FusedKernels, PartitionCoversTheBatchInFixedChunks) {
  for (int n = 1; n <= 600; ++n) {
    const Partition p = partition(n);
    ASSERT_GE(p.chunk, 1);
    ASSERT_LE(p.parts, 32) << n;
    ASSERT_GE(int64_t{p.chunk} * p.parts, n) << n;
    ASSERT_LT(int64_t{p.chunk} * (p.parts - 1), n) << n << ": an empty last chunk";
  }
  EXPECT_EQ(partition(256).chunk, 8);
  EXPECT_EQ(partition(256).parts, 32);
}

TEST(FusedKernels, IndexesFitInt32OnlyBelowTwoToThe31) {
  EXPECT_TRUE(indexes_fit_int32(make_geometry(256, 1, 28, 28, 20, 3, 3)));
  EXPECT_TRUE(indexes_fit_int32(make_geometry(1000, 20, 13, 13, 50, 5, 5)));
  // 2,800,000 x 784 input values: past 2^31.
  EXPECT_FALSE(indexes_fit_int32(make_geometry(2'800'000, 1, 28, 28, 20, 3, 3)));
  // The input fits (1.3e8 values) but conv1's 20 x 26 x 26 positions per example do not.
  EXPECT_FALSE(indexes_fit_int32(make_geometry(170'000, 1, 28, 28, 20, 3, 3)));
  // Everything else fits, but one example's input-gradient columns (128 x 5 x 5 values at each
  // of 1020 x 1020 positions, 3.3e9) do not, and a slice holds at least one example.
  EXPECT_TRUE(indexes_fit_int32(make_geometry(1, 64, 1024, 1024, 1, 5, 5)));
  EXPECT_FALSE(indexes_fit_int32(make_geometry(1, 128, 1024, 1024, 1, 5, 5)));
  // A grid-stride loop's last step goes up to one stride (268,431,360) past its end: conv1's
  // output at 148,000 examples (2.0e9 values) fits an int, that step does not.
  EXPECT_TRUE(indexes_fit_int32(make_geometry(130'000, 1, 28, 28, 20, 3, 3)));
  EXPECT_FALSE(indexes_fit_int32(make_geometry(148'000, 1, 28, 28, 20, 3, 3)));
}

TEST(FusedKernels, GridsFitOnlyUpTo65535TilesOfFilters) {
  EXPECT_TRUE(grids_fit(make_geometry(256, 20, 13, 13, 50, 5, 5)));
  // Every index fits; the filters' tiles of 32 on the grid's y axis do not, past 65,535 x 32.
  const Geometry many_filters = make_geometry(1, 1, 4, 4, 65535 * 32 + 1, 3, 3);
  EXPECT_TRUE(indexes_fit_int32(many_filters));
  EXPECT_FALSE(grids_fit(many_filters));
  EXPECT_TRUE(grids_fit(make_geometry(1, 1, 4, 4, 65535 * 32, 3, 3)));
  EXPECT_FALSE(grids_fit(make_geometry(1, 65535 * 32 + 1, 1, 1, 1, 1, 1)));
}

TEST(FusedKernels, DimsFitInt32NamesEveryDimensionAndTheFilterSize) {
  EXPECT_TRUE(dims_fit_int32(256, 1, 28, 28, 20, 3, 3));
  const int64_t big = int64_t{INT32_MAX} + 1;
  EXPECT_FALSE(dims_fit_int32(big, 1, 28, 28, 20, 3, 3));  // wraps negative as an int
  EXPECT_FALSE(dims_fit_int32(1, 1, 28, 28, big, 3, 3));
  EXPECT_FALSE(dims_fit_int32(1, 1, 28, big, 20, 3, 3));
  // Each dimension fits, c r s does not.
  EXPECT_FALSE(dims_fit_int32(1, 1 << 20, 4096, 4096, 1, 4096, 4096));
  // Every factor just below 2^31: c r s would leave int64 (2^93).
  EXPECT_FALSE(dims_fit_int32(1, INT32_MAX, 1, 1, 1, INT32_MAX, INT32_MAX));
}

TEST(FusedKernels, ColumnSumsMatchReference) {
  for (const auto& [rows, cols] : {std::pair{256, 128}, std::pair{37, 10}, std::pair{1, 33}}) {
    const auto dy = random_floats(std::size_t(rows) * cols, 61);
    std::vector<float> db(std::size_t(cols), -1.0f);
    emulate(dim3(unsigned(ceil_div(cols, 32))), dim3(32 * 16), cuda::column_sums_tree<16>,
            dy.data(), db.data(), int64_t{rows}, int64_t{cols});
    std::vector<double> want(std::size_t(cols), 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) want[c] += dy[std::size_t(r) * cols + c];
    EXPECT_TRUE(all_close(db, want, kAtol, kRtol)) << rows << "x" << cols;
  }
}

// channel_sums' two kernels as its launcher runs them (kernels.cu), on a partition into parts of
// `chunk` examples: the partial sums per part, then the parts in order.
std::vector<float> channel_sums(const std::vector<float>& dy, int n, int c, int hw, int chunk) {
  const int parts = (n + chunk - 1) / chunk;
  std::vector<float> partial(std::size_t(parts) * c, -7.0f), db(std::size_t(c), -1.0f);
  emulate(dim3(unsigned(c), unsigned(parts)), dim3(cuda::kChannelSumsThreads),
          cuda::channel_sums_partial<cuda::kChannelSumsThreads>, dy.data(), partial.data(), n, c,
          hw, chunk);
  emulate(dim3(1), dim3(256), cuda::channel_sums_finish, partial.data(), db.data(), c, parts);
  return db;
}

TEST(FusedKernels, ChannelSumsMatchReference) {
  // Small batches, so that the emulator stays quick under TSan (a host thread per CUDA thread
  // there): parts of several examples with a shorter last one, a plane larger than a block
  // (LeNet's conv1: 676), one smaller (conv2: 81), one part, and the launcher's own partition of
  // a small batch.
  for (const auto& [n, c, hw, chunk] :
       {std::tuple{7, 3, 300, 3}, std::tuple{5, 2, 676, 2}, std::tuple{4, 5, 81, 4},
        std::tuple{1, 1, 5, 1},
        std::tuple{3, 4, 50, int(cuda::channel_sums_partition(3, 4).chunk)}}) {
    const auto dy = random_floats(std::size_t(n) * c * hw, 67);
    const auto db = channel_sums(dy, n, c, hw, chunk);
    std::vector<double> want(std::size_t(c), 0.0);
    for (int e = 0; e < n; ++e)
      for (int ch = 0; ch < c; ++ch)
        for (int q = 0; q < hw; ++q) want[ch] += dy[(std::size_t(e) * c + ch) * hw + q];
    EXPECT_TRUE(all_close(db, want, kAtol, kRtol))
        << n << "x" << c << "x" << hw << " chunk " << chunk;
  }
}

TEST(FusedKernels, ChannelSumsPartitionCoversTheBatch) {
  for (int64_t n : {1, 2, 7, 32, 255, 256, 1000})
    for (int64_t c : {1, 3, 20, 50, 384, 2000}) {
      const cuda::ChannelSumsPartition p = cuda::channel_sums_partition(n, c);
      ASSERT_GE(p.chunk * p.parts, n) << n << " " << c;
      ASSERT_LT(p.chunk * (p.parts - 1), n) << n << " " << c << ": an empty last part";
      EXPECT_LE(p.parts * c, std::max<int64_t>(1024 + c, c)) << n << " " << c;
    }
  // LeNet's conv1 at batch 256: 52 parts of 5 examples, 1040 blocks.
  EXPECT_EQ(cuda::channel_sums_partition(256, 20).chunk, 5);
  EXPECT_EQ(cuda::channel_sums_partition(256, 20).parts, 52);
  EXPECT_EQ(cuda::channel_sums_partition(0, 20).parts, 0);
}

}  // namespace
}  // namespace paralab
