// ParaLab's own CUDA kernels for the model ops (pooling, dropout, resize) run on the CPU by the
// emulator (tests/cuda_emulator.h) against the double-precision reference, so that their index
// maps, window ranges, tie rule and masks are tested on machines without a GPU; on a GPU,
// test_model_ops runs the same kernels through the "cuda" backend. The kernels are grid-stride
// loops, so each runs with two grids (one block, several blocks) that must agree to the bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/reference/reference.h"
#include "tests/test_util.h"
// The emulator, then the kernels it runs.
#include "tests/cuda_emulator.h"
// clang-format off
#include "core/cuda/dropout_kernels.cuh"
#include "core/cuda/pool2d_kernels.cuh"
#include "core/cuda/resize_kernels.cuh"
// clang-format on

namespace paralab {
namespace {

using paralab::testing::all_close;
using paralab::testing::emulate;
using paralab::testing::to_double;
using paralab::testing::to_float;

// The grids each kernel runs with: one block of 64 threads striding over everything, and 5
// blocks of 32 (a count that divides none of the sizes below).
const dim3 kGrids[][2] = {{dim3(1), dim3(64)}, {dim3(5), dim3(32)}};

// Tolerances as in test_model_ops.cpp: selections exact; a few float roundings 1e-6 of the
// tensor's largest value; bilinear at sizes that are not powers of two 1e-5 (its coordinate is
// float).
double max_abs(const ref::Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

ref::Vec random_vec(std::size_t n, uint64_t seed) {
  ref::Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

ref::Vec integer_vec(std::size_t n, uint64_t seed, int levels) {
  ref::Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<double>(rng.next_u64() % static_cast<uint64_t>(levels));
  return v;
}

void check_pool(const ref::PoolGeom& r, const ref::Vec& x, uint64_t seed) {
  const cuda::PoolGeometry g{
      int64_t{r.N} * r.C, r.H, r.W, r.OH(), r.OW(), r.kh, r.kw, r.sh, r.sw, r.ph, r.pw};
  const std::string what = std::string(r.max ? "max" : "avg") + " " + std::to_string(r.H) + "x" +
                           std::to_string(r.W) + " window " + std::to_string(r.kh) + "x" +
                           std::to_string(r.kw) + " stride " + std::to_string(r.sh) + "x" +
                           std::to_string(r.sw) + " pad " + std::to_string(r.ph) + "x" +
                           std::to_string(r.pw);
  const auto xf = to_float(x);
  const auto dyf = to_float(random_vec(std::size_t(g.planes * g.oh * g.ow), seed));
  std::vector<std::vector<float>> ys, dxs;
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> y(dyf.size()), dx(xf.size(), 7.0f);
    std::vector<int32_t> argmax(dyf.size(), -7);
    if (r.max) {
      emulate(grid, block, cuda::pool::max_forward, xf.data(), y.data(), argmax.data(), g);
      emulate(grid, block, cuda::pool::max_backward, dyf.data(), argmax.data(), dx.data(), g);
    } else {
      emulate(grid, block, cuda::pool::avg_forward, xf.data(), y.data(), g);
      emulate(grid, block, cuda::pool::avg_backward, dyf.data(), dx.data(), g);
    }
    ys.push_back(y);
    dxs.push_back(dx);
  }
  const ref::Vec ry = ref::pool2d_forward(x, r), rdx = ref::pool2d_backward(x, to_double(dyf), r);
  const double y_tol = r.max ? 0.0 : 1e-6;
  EXPECT_TRUE(all_close(ys[0], ry, y_tol * max_abs(ry), y_tol)) << "y " << what;
  EXPECT_TRUE(all_close(dxs[0], rdx, 1e-6 * max_abs(rdx), 1e-6)) << "dx " << what;
  EXPECT_TRUE(bits_equal(ys[0], ys[1]) && bits_equal(dxs[0], dxs[1])) << "grids differ: " << what;
}

TEST(ModelKernels, PoolingMatchesReference) {
  const std::vector<ref::PoolGeom> cases = {
      {.N = 2, .C = 3, .H = 27, .W = 27, .kh = 3, .kw = 3, .sh = 2, .sw = 2},  // AlexNet 3/2
      {.N = 1, .C = 4, .H = 14, .W = 13, .kh = 3, .kw = 3, .sh = 2, .sw = 2},  // floor drops
      {.N = 2, .C = 2, .H = 9, .W = 7, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .max = false},
      {.N = 1, .C = 3, .H = 7, .W = 7, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
      {.N = 1,
       .C = 3,
       .H = 7,
       .W = 8,
       .kh = 3,
       .kw = 3,
       .sh = 2,
       .sw = 2,
       .ph = 1,
       .pw = 1,
       .max = false},
      {.N = 1, .C = 2, .H = 9, .W = 8, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0},
      {.N = 1,
       .C = 2,
       .H = 9,
       .W = 8,
       .kh = 2,
       .kw = 4,
       .sh = 1,
       .sw = 3,
       .ph = 0,
       .pw = 2,
       .max = false},
  };
  uint64_t seed = 1;
  for (const auto& r : cases) {
    check_pool(r, random_vec(std::size_t(r.N) * r.C * r.H * r.W, seed), seed + 1);
    seed += 2;
  }
}

TEST(ModelKernels, MaxPoolTiesGoToTheFirstMaximum) {
  for (int levels : {3, 1}) {
    const ref::PoolGeom r{.N = 1, .C = 3, .H = 13, .W = 11, .kh = 3, .kw = 3, .sh = 2, .sw = 2};
    check_pool(r, integer_vec(std::size_t(3) * 13 * 11, 5, levels), 6);
    const ref::PoolGeom padded{
        .N = 1, .C = 2, .H = 6, .W = 5, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
    check_pool(padded, integer_vec(std::size_t(2) * 6 * 5, 7, levels), 8);
  }
}

TEST(ModelKernels, DropoutMaskAndScaleAreTheCpuBackendsBits) {
  // The kernel against the CPU backend's arithmetic (core/cpu/dropout.cpp): the same hash, the
  // same float scale, so the same bits; and against the reference's mask and values.
  const int64_t n = 5, f = 37, e0 = 11, f0 = 300;
  const uint64_t seed = 77;
  const float p = 0.4f, scale = 1.0f / (1.0f - p);
  const auto x = random_vec(std::size_t(n * f), 9);
  const auto xf = to_float(x);
  std::vector<float> want(xf.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j)
      want[std::size_t(i * f + j)] =
          dropout_uniform(seed, e0 + i, f0 + j) >= p ? xf[std::size_t(i * f + j)] * scale : 0.0f;
  for (const auto& [grid, block] : kGrids) {
    std::vector<float> y(xf.size());
    emulate(grid, block, cuda::dropout::apply, xf.data(), y.data(), n, f, p, scale, seed, e0, f0);
    EXPECT_TRUE(bits_equal(y, want)) << "grid " << grid.x << "x" << block.x;
    const ref::Vec r = ref::dropout_forward(x, int(n), p, seed, e0, f0);
    EXPECT_TRUE(all_close(y, r, 0.0, 1e-6));
  }
}

TEST(ModelKernels, ResizeMatchesReference) {
  struct Case {
    int h, w, oh, ow;
    bool integers;  // 8-bit values: exact at power-of-two factors
  };
  for (const Case c : {Case{28, 28, 224, 224, true}, Case{13, 17, 29, 23, false},
                       Case{20, 9, 7, 30, false}, Case{1, 3, 4, 1, false}}) {
    const auto x = c.integers ? integer_vec(std::size_t(2) * c.h * c.w, 11, 256)
                              : random_vec(std::size_t(2) * c.h * c.w, 12);
    const auto xf = to_float(x);
    const std::string what = std::to_string(c.h) + "x" + std::to_string(c.w) + " -> " +
                             std::to_string(c.oh) + "x" + std::to_string(c.ow);
    for (bool bilinear : {false, true}) {
      std::vector<std::vector<float>> ys;
      for (const auto& [grid, block] : kGrids) {
        std::vector<float> y(std::size_t(2) * c.oh * c.ow);
        emulate(grid, block, cuda::resize::images, xf.data(), y.data(), int64_t{2}, int64_t{c.h},
                int64_t{c.w}, int64_t{c.oh}, int64_t{c.ow}, bilinear);
        ys.push_back(y);
      }
      const ref::Vec r = bilinear ? ref::resize_bilinear(x, 2, 1, c.h, c.w, c.oh, c.ow)
                                  : ref::resize_nearest(x, 2, 1, c.h, c.w, c.oh, c.ow);
      const double atol = (bilinear && !c.integers) ? 1e-5 * max_abs(r) : 0.0;
      EXPECT_TRUE(all_close(ys[0], r, atol, bilinear && !c.integers ? 1e-6 : 0.0))
          << (bilinear ? "bilinear " : "nearest ") << what;
      EXPECT_TRUE(bits_equal(ys[0], ys[1])) << "grids differ: " << what;
    }
  }
}

}  // namespace
}  // namespace paralab
