// The model ops (core/ops.h: Conv2d, Pool2d, Dropout, Resize, and ReLU and Linear at the models'
// shapes) on every backend against the double-precision reference, plus the reference's own
// checks for them (finite differences and hand-computed cases).
//
// Shapes: AlexNet's geometry (11x11 stride 4, 5x5 pad 2, 3x3 pad 1, max-pool 3/2) at reduced
// channel counts and batch, and odd sizes where floor mode drops rows and columns, so that a
// 2-core CPU runs the suite in seconds. The same tests run for "cpu" and, in CUDA builds, "cuda"
// (skipped with the reason when no GPU is usable). TF32 is off, so float32 tolerances serve both.
//
// Run: build-ops/tests/test_model_ops   (PARALAB_REPORT_ERRORS=1 prints each quantity's worst
// error)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/rng.h"
#include "tests/reference/reference.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

using testing::all_close;
using testing::to_float;

// Tolerances, |got - ref| <= atol + rtol * |ref| with atol a fraction of the tensor's largest
// reference value (sums that cancel to near zero have no relative accuracy of their own).
struct Tol {
  double rtol, atol_frac;
};
// Convolution: float32 sums of up to ~6,000 terms (conv1's weight gradient sums over N*OH*OW
// positions). Worst measured on the 2-core VM's CPU (AVX-512, AVX2 and SSE4.1 alike): 2.4e-6 of
// the tensor's largest value (conv1's dw at 224x224), elsewhere <= 6e-7. A wrong index, padding
// offset or stride errs by O(1) of it: 1e-4 / 1e-5 leaves a 4x margin and catches all of those.
constexpr Tol kConvTol{1e-4, 1e-5};
// Linear (6400 inputs per sum): the same reasoning; measured worst 6e-7 of the largest value.
constexpr Tol kLinearTol{1e-4, 1e-5};
// Selection and copies (max-pool forward, nearest resize, ReLU, the dropout mask): no arithmetic,
// so exact.
constexpr Tol kExactTol{0.0, 0.0};
// Max-pool backward adds at most 4 gradients (3/2 windows overlap twice per dimension), average
// pooling sums at most 9 values and divides, dropout scales once: a few float ulps, measured
// <= 1.4e-7 of the largest value.
constexpr Tol kFewRoundingsTol{1e-6, 1e-6};
// Bilinear resize computes its source coordinate in float (as PyTorch does), off by up to
// ~in * 2^-24 pixels against the reference's double: measured 8.5e-7 of the largest value for
// 20 -> 7; exact wherever in/out is a power of two (28 -> 224).
constexpr Tol kBilinearTol{1e-6, 1e-5};

double max_abs(const ref::Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// all_close with the tolerance above; PARALAB_REPORT_ERRORS=1 also prints the worst error
// relative to the tensor's largest value (the figures quoted in the tolerance comments).
::testing::AssertionResult close_to(const std::vector<float>& got, const ref::Vec& ref, Tol tol,
                                    const std::string& what) {
  const double scale = max_abs(ref);
  if (std::getenv("PARALAB_REPORT_ERRORS") && got.size() == ref.size()) {
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - ref[i]));
    std::cout << "[ error    ] " << what << ": max |err| " << worst << " = "
              << (scale > 0 ? worst / scale : 0.0) << " of max |ref| " << scale << "\n";
  }
  return all_close(got, ref, tol.atol_frac * scale, tol.rtol);
}

// Normal values rounded to float, so the reference sees exactly what the backend sees.
ref::Vec random_vec(std::size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// Small integers in [0, levels): many exact ties, sums exact in float.
ref::Vec integer_vec(std::size_t n, uint64_t seed, int levels) {
  Rng rng(seed);
  ref::Vec v(n);
  for (auto& x : v) x = static_cast<double>(rng.below(static_cast<uint64_t>(levels)));
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class ModelOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const std::string why = backend_unavailable(GetParam()); !why.empty())
      GTEST_SKIP() << GetParam() << ": " << why;
    devices_ = make_devices(GetParam(), 1, DeviceOptions{});
    dev_ = devices_[0].get();
    dev_->bind_thread();
  }
  Tensor put(const ref::Vec& v, Shape shape) {
    return Tensor::from_host(*dev_, std::move(shape), to_float(v));
  }
  Tensor empty(Shape shape) { return Tensor::empty(*dev_, std::move(shape)); }
  Ops& ops() { return dev_->ops(); }

  std::vector<std::unique_ptr<Device>> devices_;
  Device* dev_ = nullptr;
};

// --- Conv2d ---

void check_conv(ModelOps& t, Device& dev, const ref::ConvGeom& g, uint64_t seed) {
  const std::string what =
      "conv x (" + std::to_string(g.N) + "," + std::to_string(g.C) + "," + std::to_string(g.H) +
      "," + std::to_string(g.W) + ") w (" + std::to_string(g.K) + "," + std::to_string(g.C) + "," +
      std::to_string(g.R) + "," + std::to_string(g.S) + ") stride " + std::to_string(g.sh) + "x" +
      std::to_string(g.sw) + " pad " + std::to_string(g.ph) + "x" + std::to_string(g.pw);
  const int OH = g.OH(), OW = g.OW();
  // Weights scaled like a trained layer's (1/sqrt(fan-in)), so outputs are O(1).
  const double w_scale = 1.0 / std::sqrt(static_cast<double>(g.C * g.R * g.S));
  const auto x = random_vec(std::size_t(g.N) * g.C * g.H * g.W, seed),
             w = random_vec(std::size_t(g.K) * g.C * g.R * g.S, seed + 1, w_scale),
             b = random_vec(g.K, seed + 2, 0.1),
             dy = random_vec(std::size_t(g.N) * g.K * OH * OW, seed + 3);
  auto put = [&](const ref::Vec& v, Shape s) {
    return Tensor::from_host(dev, std::move(s), to_float(v));
  };
  const Conv2dParams params{g.sh, g.sw, g.ph, g.pw};
  auto conv = dev.ops().make_conv2d(params);
  Tensor tx = put(x, {g.N, g.C, g.H, g.W}), tw = put(w, {g.K, g.C, g.R, g.S}), tb = put(b, {g.K});
  ASSERT_EQ(Conv2d::output_shape(tx.shape(), tw.shape(), params), (Shape{g.N, g.K, OH, OW}));
  Tensor ty = Tensor::empty(dev, {g.N, g.K, OH, OW});
  conv->forward(tx, tw, tb, ty);
  // Gradient buffers filled with junk: backward must overwrite, not accumulate.
  Tensor tdx = put(ref::Vec(x.size(), 7.0), {g.N, g.C, g.H, g.W}),
         tdw = put(ref::Vec(w.size(), 7.0), {g.K, g.C, g.R, g.S}),
         tdb = put(ref::Vec(g.K, 7.0), {g.K});
  Tensor tdy = put(dy, {g.N, g.K, OH, OW});
  conv->backward(tx, tw, tdy, &tdx, tdw, tdb);

  ref::Vec rdx, rdw, rdb;
  const ref::Vec ry = ref::conv2d_forward(x, w, b, g);
  ref::conv2d_backward(x, w, dy, g, rdx, rdw, rdb);
  EXPECT_TRUE(close_to(ty.to_host_f32(), ry, kConvTol, t.GetParam() + " y " + what));
  EXPECT_TRUE(close_to(tdx.to_host_f32(), rdx, kConvTol, t.GetParam() + " dx " + what));
  EXPECT_TRUE(close_to(tdw.to_host_f32(), rdw, kConvTol, t.GetParam() + " dw " + what));
  EXPECT_TRUE(close_to(tdb.to_host_f32(), rdb, kConvTol, t.GetParam() + " db " + what));

  // The first layer asks for no input gradient: dw and db are the same.
  Tensor tdw2 = Tensor::empty(dev, {g.K, g.C, g.R, g.S}), tdb2 = Tensor::empty(dev, {g.K});
  conv->backward(tx, tw, tdy, nullptr, tdw2, tdb2);
  EXPECT_TRUE(close_to(tdw2.to_host_f32(), rdw, kConvTol, t.GetParam() + " dw, no dx " + what));
  EXPECT_TRUE(close_to(tdb2.to_host_f32(), rdb, kConvTol, t.GetParam() + " db, no dx " + what));
}

TEST_P(ModelOps, Conv2dAlexNetGeometriesMatchReference) {
  // conv1's geometry at its real input size, 8 channels instead of 96: 224 -> 54.
  check_conv(*this, *dev_,
             {.N = 2, .C = 1, .H = 224, .W = 224, .K = 8, .R = 11, .S = 11, .sh = 4, .sw = 4}, 1);
  // conv1 on odd sizes: (65 - 11) / 4 = 13.5 and (67 - 11) / 4 = 14: floor mode drops the last
  // two input rows (never read, gradient 0), and the columns fit exactly.
  check_conv(*this, *dev_,
             {.N = 2, .C = 1, .H = 65, .W = 67, .K = 6, .R = 11, .S = 11, .sh = 4, .sw = 4}, 11);
  // conv2: 5x5 pad 2 keeps the size (13 -> 13).
  check_conv(*this, *dev_,
             {.N = 2, .C = 8, .H = 13, .W = 13, .K = 12, .R = 5, .S = 5, .ph = 2, .pw = 2}, 21);
  // conv3-5: 3x3 pad 1, 16 input channels (a multiple of oneDNN's blocks) and not.
  check_conv(*this, *dev_,
             {.N = 2, .C = 16, .H = 5, .W = 5, .K = 12, .R = 3, .S = 3, .ph = 1, .pw = 1}, 31);
  check_conv(*this, *dev_,
             {.N = 3, .C = 12, .H = 6, .W = 7, .K = 16, .R = 3, .S = 3, .ph = 1, .pw = 1}, 41);
  // Per-dimension stride, kernel and padding, so that a swapped H/W parameter fails.
  check_conv(
      *this, *dev_,
      {.N = 2, .C = 3, .H = 10, .W = 9, .K = 5, .R = 3, .S = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0},
      51);
}

TEST_P(ModelOps, Conv2dOfAnExampleIsBitIdenticalAtEveryBatchSize) {
  // What the strategy tests rest on (see test_backends' ConvReluPool test of the same name): a
  // shard of a batch must see exactly the activations the whole batch sees, or a pre-activation
  // within rounding of zero may fall on the other side of ReLU or of a max-pool comparison.
  if (GetParam() == "cuda")
    GTEST_SKIP() << "cuda: cuDNN chooses its algorithms per batch size, so the order of a "
                    "convolution's sums may change with it";
  for (const ref::ConvGeom& g :
       {ref::ConvGeom{.N = 8, .C = 1, .H = 67, .W = 67, .K = 8, .R = 11, .S = 11, .sh = 4, .sw = 4},
        ref::ConvGeom{.N = 8, .C = 8, .H = 13, .W = 13, .K = 16, .R = 5, .S = 5, .ph = 2, .pw = 2},
        ref::ConvGeom{
            .N = 8, .C = 16, .H = 6, .W = 6, .K = 12, .R = 3, .S = 3, .ph = 1, .pw = 1}}) {
    const int64_t per_x = int64_t{g.C} * g.H * g.W, per_y = int64_t{g.K} * g.OH() * g.OW();
    const auto x = random_vec(std::size_t(g.N * per_x), 141),
               w = random_vec(std::size_t(g.K) * g.C * g.R * g.S, 142, 0.1),
               b = random_vec(g.K, 143, 0.1);
    auto conv = ops().make_conv2d({g.sh, g.sw, g.ph, g.pw});
    auto y_at = [&](int n) {
      Tensor y = empty({n, g.K, g.OH(), g.OW()});
      conv->forward(put(ref::Vec(x.begin(), x.begin() + n * per_x), {n, g.C, g.H, g.W}),
                    put(w, {g.K, g.C, g.R, g.S}), put(b, {g.K}), y);
      return y.to_host_f32();
    };
    const auto whole = y_at(g.N);
    for (int n : {1, 3}) {
      const auto part = y_at(n);
      EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin()))
          << "C=" << g.C << " R=" << g.R << ": batch " << n << " against " << g.N << " (" << per_y
          << " outputs per example)";
    }
  }
}

// --- Pool2d ---

void check_pool(ModelOps& t, Device& dev, const ref::PoolGeom& g, const ref::Vec& x,
                uint64_t seed) {
  const std::string what =
      std::string(g.max ? "max" : "avg") + " pool x (" + std::to_string(g.N) + "," +
      std::to_string(g.C) + "," + std::to_string(g.H) + "," + std::to_string(g.W) + ") window " +
      std::to_string(g.kh) + "x" + std::to_string(g.kw) + " stride " + std::to_string(g.sh) + "x" +
      std::to_string(g.sw) + " pad " + std::to_string(g.ph) + "x" + std::to_string(g.pw);
  const int OH = g.OH(), OW = g.OW();
  const auto dy = random_vec(std::size_t(g.N) * g.C * OH * OW, seed);
  const Pool2dParams params{
      g.max ? PoolMode::Max : PoolMode::Average, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw};
  auto pool = dev.ops().make_pool2d(params);
  auto put = [&](const ref::Vec& v, Shape s) {
    return Tensor::from_host(dev, std::move(s), to_float(v));
  };
  Tensor tx = put(x, {g.N, g.C, g.H, g.W});
  ASSERT_EQ(Pool2d::output_shape(tx.shape(), params), (Shape{g.N, g.C, OH, OW}));
  Tensor ty = Tensor::empty(dev, {g.N, g.C, OH, OW});
  pool->forward(tx, ty, /*training=*/true);
  Tensor tdx = put(ref::Vec(x.size(), 7.0), {g.N, g.C, g.H, g.W});
  pool->backward(put(dy, {g.N, g.C, OH, OW}), tdx);
  EXPECT_TRUE(close_to(ty.to_host_f32(), ref::pool2d_forward(x, g),
                       g.max ? kExactTol : kFewRoundingsTol, t.GetParam() + " y " + what));
  EXPECT_TRUE(close_to(tdx.to_host_f32(), ref::pool2d_backward(x, dy, g), kFewRoundingsTol,
                       t.GetParam() + " dx " + what));
}

ref::Vec pool_input(const ref::PoolGeom& g, uint64_t seed) {
  return random_vec(std::size_t(g.N) * g.C * g.H * g.W, seed);
}

TEST_P(ModelOps, Pool2dAlexNetGeometriesMatchReference) {
  const std::vector<ref::PoolGeom> cases = {
      // After conv1: 54 -> 26 (max 3/2, exact fit).
      {.N = 2, .C = 8, .H = 54, .W = 54, .kh = 3, .kw = 3, .sh = 2, .sw = 2},
      // After conv5 at a size where floor mode drops a row and a column: 14 -> 6 reads 0..12.
      {.N = 2, .C = 12, .H = 14, .W = 13, .kh = 3, .kw = 3, .sh = 2, .sw = 2},
      // LeNet's average 2/2 on odd sizes: 9x7 -> 4x3.
      {.N = 2, .C = 5, .H = 9, .W = 7, .kh = 2, .kw = 2, .sh = 2, .sw = 2, .max = false},
      // Padding: max 3/1 pad 1 (the same size), average 3/2 pad 1 counting the padding.
      {.N = 2, .C = 3, .H = 7, .W = 7, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1},
      {.N = 2,
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
      // Per-dimension window, stride and padding.
      {.N = 1, .C = 4, .H = 9, .W = 8, .kh = 3, .kw = 2, .sh = 2, .sw = 1, .ph = 1, .pw = 0},
      {.N = 1,
       .C = 4,
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
  uint64_t seed = 100;
  for (const auto& g : cases) {
    check_pool(*this, *dev_, g, pool_input(g, seed), seed + 1);
    seed += 2;
  }
}

TEST_P(ModelOps, MaxPoolTiesGoToTheFirstMaximumInWindowOrder) {
  // Inputs from {0, 1, 2}: most windows hold tied maxima, and after ReLU (all zeros) every window
  // does. The gradient must go to the first maximum (row by row, left to right) of each window.
  for (int levels : {3, 1}) {
    const ref::PoolGeom g{.N = 2, .C = 3, .H = 13, .W = 11, .kh = 3, .kw = 3, .sh = 2, .sw = 2};
    check_pool(*this, *dev_, g, integer_vec(std::size_t(g.N) * g.C * g.H * g.W, 7, levels), 8);
    const ref::PoolGeom padded{
        .N = 1, .C = 2, .H = 6, .W = 5, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
    check_pool(*this, *dev_, padded, integer_vec(std::size_t(2) * 6 * 5, 9, levels), 10);
  }
  // By hand: a 2x2 window of equal values sends everything to its top-left element.
  auto pool = ops().make_pool2d(Pool2dParams::square(PoolMode::Max, 2, 2));
  Tensor x = put({5, 5, 5, 5}, {1, 1, 2, 2}), y = empty({1, 1, 1, 1}), dx = empty({1, 1, 2, 2});
  pool->forward(x, y, true);
  pool->backward(put({1.5}, {1, 1, 1, 1}), dx);
  EXPECT_EQ(dx.to_host_f32(), (std::vector<float>{1.5f, 0, 0, 0}));
}

TEST_P(ModelOps, MaxPoolBackwardUsesTheTrainingForwardNotALaterEvaluation) {
  const ref::PoolGeom g{.N = 2, .C = 3, .H = 9, .W = 9, .kh = 3, .kw = 3, .sh = 2, .sw = 2};
  const auto x = pool_input(g, 61), other = pool_input(g, 62), dy = random_vec(2 * 3 * 4 * 4, 63);
  auto pool = ops().make_pool2d(Pool2dParams::square(PoolMode::Max, 3, 2));
  Tensor y = empty({2, 3, 4, 4}), dx = empty({2, 3, 9, 9});
  pool->forward(put(x, {2, 3, 9, 9}), y, /*training=*/true);
  pool->forward(put(other, {2, 3, 9, 9}), y, /*training=*/false);
  pool->backward(put(dy, {2, 3, 4, 4}), dx);
  EXPECT_TRUE(close_to(dx.to_host_f32(), ref::pool2d_backward(x, dy, g), kFewRoundingsTol, "dx"));
  // Backward with no training forward of that shape is an error, not stale data.
  Tensor dx2 = empty({1, 3, 9, 9});
  EXPECT_EQ(error_of([&] {
              pool->backward(put(ref::Vec(3 * 16), {1, 3, 4, 4}), dx2);
            }),
            "pool2d (max) backward: no training forward for x (1,3,9,9)");
}

// --- ReLU and Linear at the models' shapes ---

TEST_P(ModelOps, ReluAndLinearAtAlexNetShapesMatchReference) {
  // ReLU on an odd NCHW activation, in place as the models use it.
  const auto x = random_vec(2 * 12 * 13 * 13, 71), dy = random_vec(x.size(), 72);
  auto relu = ops().make_relu();
  Tensor t = put(x, {2, 12, 13, 13}), g = put(dy, {2, 12, 13, 13});
  relu->forward(t, t);
  relu->backward(t, g, g);
  EXPECT_TRUE(close_to(t.to_host_f32(), ref::relu_forward(x), kExactTol, "relu y"));
  EXPECT_TRUE(close_to(g.to_host_f32(), ref::relu_backward(x, dy), kExactTol, "relu dx"));

  // FC1's input width (256 * 5 * 5 = 6400) at a reduced output width.
  const int N = 3, in = 6400, out = 40;
  const auto lx = random_vec(std::size_t(N) * in, 73),
             lw = random_vec(std::size_t(in) * out, 74, 1.0 / std::sqrt(in)),
             lb = random_vec(out, 75, 0.1), ldy = random_vec(std::size_t(N) * out, 76);
  auto linear = ops().make_linear();
  Tensor tx = put(lx, {N, in}), tw = put(lw, {in, out}), ty = empty({N, out});
  linear->forward(tx, tw, put(lb, {out}), ty);
  Tensor tdx = empty({N, in}), tdw = empty({in, out}), tdb = empty({out});
  linear->backward(tx, tw, put(ldy, {N, out}), &tdx, tdw, tdb);
  ref::Vec rdx, rdw, rdb;
  ref::linear_backward(lx, lw, ldy, N, in, out, rdx, rdw, rdb);
  EXPECT_TRUE(close_to(ty.to_host_f32(), ref::linear_forward(lx, lw, lb, N, in, out), kLinearTol,
                       "linear y"));
  EXPECT_TRUE(close_to(tdx.to_host_f32(), rdx, kLinearTol, "linear dx"));
  EXPECT_TRUE(close_to(tdw.to_host_f32(), rdw, kLinearTol, "linear dw"));
  EXPECT_TRUE(close_to(tdb.to_host_f32(), rdb, kLinearTol, "linear db"));
}

// --- Dropout ---

TEST_P(ModelOps, DropoutMatchesReference) {
  const int N = 4, C = 3, H = 5, W = 7;
  const float p = 0.5f;
  const DropoutKey key{42, 10, 0};
  const auto x = random_vec(std::size_t(N) * C * H * W, 81), dy = random_vec(x.size(), 82);
  auto drop = ops().make_dropout();
  Tensor y = empty({N, C, H, W}), dx = empty({N, C, H, W});
  drop->forward(put(x, {N, C, H, W}), y, p, key, /*training=*/true);
  drop->backward(put(dy, {N, C, H, W}), dx);
  const auto got = y.to_host_f32();
  // The mask itself, exactly (the inputs are never 0, so a 0 output is a dropped unit).
  const auto mask =
      ref::dropout_mask(N, C * H * W, p, key.seed, key.example_offset, key.feature_offset);
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if ((got[i] != 0.0f) != (mask[i] == 1) && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << "first at element " << first;
  EXPECT_TRUE(
      close_to(got, ref::dropout_forward(x, N, p, key.seed, 10, 0), kFewRoundingsTol, "dropout y"));
  EXPECT_TRUE(close_to(dx.to_host_f32(), ref::dropout_backward(dy, N, p, key.seed, 10, 0),
                       kFewRoundingsTol, "dropout dx"));
}

TEST_P(ModelOps, DropoutMaskIsTheSameWhenExamplesAreSplit) {
  // Data parallel: ranks hold examples [0, 2) and [2, 6) of the global batch.
  const int N = 6, F = 3 * 4 * 5;
  const float p = 0.3f;
  const auto x = random_vec(std::size_t(N) * F, 91);
  auto drop = ops().make_dropout();
  Tensor whole = empty({N, 3, 4, 5});
  drop->forward(put(x, {N, 3, 4, 5}), whole, p, {7, 100, 0}, true);
  std::vector<float> sharded;
  for (const auto& [e0, n] : {std::pair{0, 2}, std::pair{2, 4}}) {
    Tensor y = empty({n, 3, 4, 5});
    drop->forward(put(ref::Vec(x.begin() + e0 * F, x.begin() + (e0 + n) * F), {n, 3, 4, 5}), y, p,
                  {7, 100 + e0, 0}, true);
    const auto part = y.to_host_f32();
    sharded.insert(sharded.end(), part.begin(), part.end());
  }
  EXPECT_EQ(sharded, whole.to_host_f32());
}

TEST_P(ModelOps, DropoutMaskIsTheSameWhenChannelsAreSplit) {
  // Channel split: ranks hold channels [0, 2) and [2, 6) of (C,H,W) = (6,4,5) examples and pass
  // feature_offset = c0 * H * W.
  const int N = 3, C = 6, H = 4, W = 5, plane = H * W;
  const float p = 0.5f;
  const auto x = random_vec(std::size_t(N) * C * plane, 101), dy = random_vec(x.size(), 102);
  auto drop = ops().make_dropout();
  Tensor whole = empty({N, C, H, W}), whole_dx = empty({N, C, H, W});
  drop->forward(put(x, {N, C, H, W}), whole, p, {9, 0, 0}, true);
  drop->backward(put(dy, {N, C, H, W}), whole_dx);
  const auto y = whole.to_host_f32(), dx = whole_dx.to_host_f32();
  for (const auto& [c0, c] : {std::pair{0, 2}, std::pair{2, 4}}) {
    ref::Vec xs, dys;
    for (int n = 0; n < N; ++n)
      for (int i = c0 * plane; i < (c0 + c) * plane; ++i) {
        xs.push_back(x[std::size_t(n) * C * plane + i]);
        dys.push_back(dy[std::size_t(n) * C * plane + i]);
      }
    auto shard_op = ops().make_dropout();
    Tensor ys = empty({N, c, H, W}), dxs = empty({N, c, H, W});
    shard_op->forward(put(xs, {N, c, H, W}), ys, p, {9, 0, int64_t{c0} * plane}, true);
    shard_op->backward(put(dys, {N, c, H, W}), dxs);
    const auto got_y = ys.to_host_f32(), got_dx = dxs.to_host_f32();
    std::size_t k = 0, differ = 0;
    for (int n = 0; n < N; ++n)
      for (int i = c0 * plane; i < (c0 + c) * plane; ++i, ++k) {
        const std::size_t at = std::size_t(n) * C * plane + i;
        differ += got_y[k] != y[at];
        differ += got_dx[k] != dx[at];
      }
    EXPECT_EQ(differ, 0u) << "channels [" << c0 << ", " << c0 + c << ")";
  }
}

TEST_P(ModelOps, DropoutIsIdentityInEvaluationAndAtPZero) {
  const auto x = random_vec(2 * 50, 111), dy = random_vec(2 * 50, 112);
  const std::vector<float> xf = to_float(x), dyf = to_float(dy);
  auto drop = ops().make_dropout();
  Tensor tx = put(x, {2, 50}), y = empty({2, 50}), dx = empty({2, 50});
  drop->forward(tx, y, 0.5f, {1, 0, 0}, /*training=*/false);
  EXPECT_EQ(y.to_host_f32(), xf) << "evaluation";
  drop->forward(tx, y, 0.0f, {1, 0, 0}, /*training=*/true);
  EXPECT_EQ(y.to_host_f32(), xf) << "p = 0";
  drop->backward(put(dy, {2, 50}), dx);
  EXPECT_EQ(dx.to_host_f32(), dyf) << "p = 0 backward";
  // In place, y aliasing x and dx aliasing dy, as the models call it.
  Tensor inplace = put(x, {2, 50}), g = put(dy, {2, 50});
  drop->forward(inplace, inplace, 0.25f, {3, 4, 5}, true);
  drop->backward(g, g);
  EXPECT_TRUE(close_to(inplace.to_host_f32(), ref::dropout_forward(x, 2, 0.25f, 3, 4, 5),
                       kFewRoundingsTol, "in-place y"));
  EXPECT_TRUE(close_to(g.to_host_f32(), ref::dropout_backward(dy, 2, 0.25f, 3, 4, 5),
                       kFewRoundingsTol, "in-place dx"));
}

TEST_P(ModelOps, DropoutKeepsAFractionNearOneMinusP) {
  // 2^20 units: the kept fraction's standard deviation is sqrt(p(1-p)/n) <= 4.9e-4; 5 sigma is
  // a bound a correct hash misses once in ~2 million runs. Neighbouring units (the next feature,
  // the next example) must be kept independently: both kept with probability (1-p)^2.
  const int N = 256, F = 4096;
  const std::vector<float> ones(std::size_t(N) * F, 1.0f);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    auto drop = ops().make_dropout();
    Tensor x = Tensor::from_host(*dev_, {N, F}, ones), y = empty({N, F});
    drop->forward(x, y, p, {2024, 0, 0}, true);
    const auto got = y.to_host_f32();
    const double n = static_cast<double>(got.size()), q = 1.0 - p;
    const double sigma = std::sqrt(p * q / n);
    double kept = 0, kept_f = 0, kept_n = 0;
    for (int e = 0; e < N; ++e)
      for (int f = 0; f < F; ++f) {
        const bool k = got[std::size_t(e) * F + f] != 0.0f;
        kept += k;
        if (f + 1 < F) kept_f += k && got[std::size_t(e) * F + f + 1] != 0.0f;
        if (e + 1 < N) kept_n += k && got[std::size_t(e + 1) * F + f] != 0.0f;
      }
    EXPECT_NEAR(kept / n, q, 5 * sigma) << "p = " << p;
    EXPECT_NEAR(kept_f / (N * (F - 1.0)), q * q, 5 * sigma) << "neighbouring features, p = " << p;
    EXPECT_NEAR(kept_n / ((N - 1.0) * F), q * q, 5 * sigma) << "neighbouring examples, p = " << p;
  }
}

// --- Resize ---

TEST_P(ModelOps, ResizeFashionMnistTo224IsExact) {
  // The book's input pipeline: 28x28 8-bit images to 224x224. Factor 8: every coordinate and
  // weight is a multiple of 1/16, so bilinear sums of 8-bit values are exact in float.
  const int N = 2;
  const auto x = integer_vec(std::size_t(N) * 28 * 28, 121, 256);
  for (ResizeMode mode : {ResizeMode::Nearest, ResizeMode::Bilinear}) {
    auto resize = ops().make_resize(mode);
    Tensor y = empty({N, 1, 224, 224});
    resize->forward(put(x, {N, 1, 28, 28}), y);
    const ref::Vec want = mode == ResizeMode::Nearest
                              ? ref::resize_nearest(x, N, 1, 28, 28, 224, 224)
                              : ref::resize_bilinear(x, N, 1, 28, 28, 224, 224);
    EXPECT_TRUE(close_to(y.to_host_f32(), want, kExactTol, resize_mode_name(mode)));
  }
}

TEST_P(ModelOps, ResizeAnySizeMatchesReference) {
  // Up and down, odd factors, H and W different: nearest exactly; bilinear within a few roundings
  // (its coordinate is computed in float, like PyTorch's, against the reference's double).
  struct Case {
    int H, W, OH, OW;
  };
  for (const Case c :
       {Case{13, 17, 29, 23}, Case{20, 9, 7, 30}, Case{5, 5, 5, 5}, Case{1, 3, 4, 1}}) {
    const auto x = random_vec(std::size_t(2) * 3 * c.H * c.W, 131);
    const std::string what = std::to_string(c.H) + "x" + std::to_string(c.W) + " -> " +
                             std::to_string(c.OH) + "x" + std::to_string(c.OW);
    Tensor tx = put(x, {2, 3, c.H, c.W}), y = empty({2, 3, c.OH, c.OW});
    ops().make_resize(ResizeMode::Nearest)->forward(tx, y);
    EXPECT_TRUE(close_to(y.to_host_f32(), ref::resize_nearest(x, 2, 3, c.H, c.W, c.OH, c.OW),
                         kExactTol, "nearest " + what));
    ops().make_resize(ResizeMode::Bilinear)->forward(tx, y);
    EXPECT_TRUE(close_to(y.to_host_f32(), ref::resize_bilinear(x, 2, 3, c.H, c.W, c.OH, c.OW),
                         kBilinearTol, "bilinear " + what));
  }
}

// --- Bad arguments: one clear line each ---

TEST_P(ModelOps, BadArgumentsAreOneLineErrors) {
  std::vector<std::string> messages;
  auto expect = [&](const std::function<void()>& f, const std::string& want) {
    const std::string got = error_of(f);
    EXPECT_EQ(got, want);
    messages.push_back(got);
  };
  expect([&] { ops().make_conv2d({0, 1, 0, 0}); }, "conv2d: stride 0x1 must be >= 1");
  expect([&] { ops().make_conv2d({1, 1, -1, 0}); }, "conv2d: padding -1x0 must be >= 0");
  auto conv = ops().make_conv2d(Conv2dParams::square(4, 0));
  Tensor x = Tensor::zeros(*dev_, {2, 3, 9, 9}), w = Tensor::zeros(*dev_, {4, 3, 11, 11});
  Tensor b = Tensor::zeros(*dev_, {4}), y = Tensor::zeros(*dev_, {2, 4, 1, 1});
  expect([&] { conv->forward(x, w, b, y); },
         "conv2d: kernel 11x11 larger than the input 9x9 padded by 0x0");
  Tensor w2 = Tensor::zeros(*dev_, {4, 2, 3, 3}), y2 = Tensor::zeros(*dev_, {2, 4, 2, 2});
  expect([&] { conv->forward(x, w2, b, y2); },
         "conv2d: x (2,3,9,9) has 3 channels, w (4,2,3,3) expects 2");
  Tensor w3 = Tensor::zeros(*dev_, {4, 3, 3, 3}), y3 = Tensor::zeros(*dev_, {2, 4, 3, 3});
  expect([&] { conv->forward(x, w3, b, y3); },
         "conv2d forward: y is (2,4,3,3), expected (2,4,2,2)");
  Tensor dw_bad = Tensor::zeros(*dev_, {4, 3, 3, 2});
  expect([&] { conv->backward(x, w3, y2, nullptr, dw_bad, b); },
         "conv2d backward: dw (4,3,3,2) != w (4,3,3,3)");

  expect([&] { ops().make_pool2d(Pool2dParams::square(PoolMode::Max, 3, 0)); },
         "pool2d (max): stride 0x0 must be >= 1");
  expect([&] { ops().make_pool2d(Pool2dParams::square(PoolMode::Average, 3, 2, 2)); },
         "pool2d (avg): padding 2x2 must be >= 0 and at most half the window 3x3");
  auto pool = ops().make_pool2d(Pool2dParams::square(PoolMode::Max, 3, 2));
  Tensor small = Tensor::zeros(*dev_, {1, 1, 2, 5}), py = Tensor::zeros(*dev_, {1, 1, 1, 2});
  expect([&] { pool->forward(small, py, true); },
         "pool2d (max): window 3x3 larger than the input 2x5 padded by 0x0");
  Tensor px = Tensor::zeros(*dev_, {1, 2, 7, 7}), wrong = Tensor::zeros(*dev_, {1, 2, 4, 4});
  expect([&] { pool->forward(px, wrong, true); },
         "pool2d (max) forward: y is (1,2,4,4), expected (1,2,3,3)");
  expect([] { pool_mode_from_name("mean"); }, "pool2d: unknown mode \"mean\" (known: max, avg)");

  auto drop = ops().make_dropout();
  Tensor dx = Tensor::zeros(*dev_, {2, 5}), dy = Tensor::zeros(*dev_, {2, 5});
  expect([&] { drop->forward(dx, dy, 1.0f, {}, true); }, "dropout: p = 1.000000 must be in [0, 1)");
  expect([&] { drop->forward(dx, dy, -0.1f, {}, true); },
         "dropout: p = -0.100000 must be in [0, 1)");
  expect([&] { drop->forward(dx, dy, std::nanf(""), {}, true); },
         "dropout: p = nan must be in [0, 1)");
  Tensor dz = Tensor::zeros(*dev_, {5, 2});
  expect([&] { drop->forward(dx, dz, 0.5f, {}, true); },
         "dropout forward: x (2,5) and y (5,2) must have the same, non-empty shape");
  expect([&] { ops().make_dropout()->backward(dy, dx); }, "dropout backward: no training forward");

  auto resize = ops().make_resize(ResizeMode::Bilinear);
  Tensor rx = Tensor::zeros(*dev_, {2, 1, 28, 28}), ry = Tensor::zeros(*dev_, {1, 1, 224, 224});
  expect([&] { resize->forward(rx, ry); },
         "resize: x (2,1,28,28) and y (1,1,224,224) must be 4-D with the same N and C");
  expect([] { resize_mode_from_name("bicubic"); },
         "resize: unknown mode \"bicubic\" (known: nearest, bilinear)");

  for (const auto& m : messages) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

const std::vector<std::string> kBackends = {"cpu"
#if PARALAB_HAVE_CUDA
                                            ,
                                            "cuda"
#endif
};
INSTANTIATE_TEST_SUITE_P(Backends, ModelOps, ::testing::ValuesIn(kBackends),
                         [](const auto& param_info) { return param_info.param; });

// --- The reference itself: finite differences and hand-computed cases ---

// L = sum(y * g) with a fixed g, so dL/dy = g; central differences in double are exact to ~1e-9
// for these piecewise-linear layers (1e-6 + 1e-5 |ref| leaves 100x margin; a wrong index errs
// by O(1)).
constexpr double kFdStep = 1e-6, kFdAtol = 1e-6, kFdRtol = 1e-5;

ref::Vec fd_grad(ref::Vec& v, const std::function<double()>& loss) {
  ref::Vec g(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + kFdStep;
    const double lp = loss();
    v[i] = saved - kFdStep;
    const double lm = loss();
    v[i] = saved;
    g[i] = (lp - lm) / (2 * kFdStep);
  }
  return g;
}

double dot(const ref::Vec& a, const ref::Vec& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

TEST(ModelOpsReference, StridedPaddedConvGradientsMatchFiniteDifferences) {
  const ref::ConvGeom g{
      .N = 2, .C = 2, .H = 9, .W = 8, .K = 3, .R = 3, .S = 4, .sh = 2, .sw = 3, .ph = 1, .pw = 2};
  ref::Vec x = random_vec(std::size_t(g.N) * g.C * g.H * g.W, 1),
           w = random_vec(std::size_t(g.K) * g.C * g.R * g.S, 2), b = random_vec(g.K, 3);
  const ref::Vec dy = random_vec(std::size_t(g.N) * g.K * g.OH() * g.OW(), 4);
  auto loss = [&] { return dot(ref::conv2d_forward(x, w, b, g), dy); };
  ref::Vec dx, dw, db;
  ref::conv2d_backward(x, w, dy, g, dx, dw, db);
  EXPECT_TRUE(all_close(dx, fd_grad(x, loss), kFdAtol, kFdRtol)) << "dx";
  EXPECT_TRUE(all_close(dw, fd_grad(w, loss), kFdAtol, kFdRtol)) << "dw";
  EXPECT_TRUE(all_close(db, fd_grad(b, loss), kFdAtol, kFdRtol)) << "db";
}

TEST(ModelOpsReference, PoolGradientsMatchFiniteDifferences) {
  for (bool max : {true, false}) {
    const ref::PoolGeom g{.N = 2,
                          .C = 2,
                          .H = 8,
                          .W = 7,
                          .kh = 3,
                          .kw = 2,
                          .sh = 2,
                          .sw = 1,
                          .ph = 1,
                          .pw = 1,
                          .max = max};
    // Distinct values (no ties within 1e-3 of each other), so max pooling is differentiable.
    ref::Vec x(std::size_t(g.N) * g.C * g.H * g.W);
    std::iota(x.begin(), x.end(), 0.0);
    Rng rng(5);
    for (std::size_t i = x.size() - 1; i > 0; --i) std::swap(x[i], x[rng.below(i + 1)]);
    const ref::Vec dy = random_vec(std::size_t(g.N) * g.C * g.OH() * g.OW(), 6);
    auto loss = [&] { return dot(ref::pool2d_forward(x, g), dy); };
    EXPECT_TRUE(all_close(ref::pool2d_backward(x, dy, g), fd_grad(x, loss), kFdAtol, kFdRtol))
        << (max ? "max" : "avg");
  }
}

TEST(ModelOpsReference, HandComputedPaddingTiesAndResizeConventions) {
  // Conv 3x3 of ones, pad 1, on a 2x2 of ones: every output sums the 4 inputs.
  EXPECT_EQ(ref::conv2d_forward(
                {1, 1, 1, 1}, ref::Vec(9, 1.0), {0.5},
                {.N = 1, .C = 1, .H = 2, .W = 2, .K = 1, .R = 3, .S = 3, .ph = 1, .pw = 1}),
            (ref::Vec{4.5, 4.5, 4.5, 4.5}));
  // Average 3/1 pad 1 on a 2x2 of ones counts the padding: 4 / 9 at each output.
  const ref::PoolGeom avg{.N = 1,
                          .C = 1,
                          .H = 2,
                          .W = 2,
                          .kh = 3,
                          .kw = 3,
                          .sh = 1,
                          .sw = 1,
                          .ph = 1,
                          .pw = 1,
                          .max = false};
  EXPECT_EQ(ref::pool2d_forward({1, 1, 1, 1}, avg), ref::Vec(4, 4.0 / 9.0));
  // Max 2/2 over ties and negatives: padding (none here) aside, the first maximum wins.
  const ref::PoolGeom max{.N = 1, .C = 1, .H = 2, .W = 4, .kh = 2, .kw = 2, .sh = 2, .sw = 2};
  EXPECT_EQ(ref::pool2d_backward({-1, -1, 3, 0, -1, -1, 0, 3}, {10, 20}, max),
            (ref::Vec{10, 0, 20, 0, 0, 0, 0, 0}));
  // Max 3/1 pad 1 on negative inputs: padding is never the maximum.
  const ref::PoolGeom padded{
      .N = 1, .C = 1, .H = 1, .W = 2, .kh = 3, .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
  EXPECT_EQ(ref::pool2d_forward({-2, -3}, padded), (ref::Vec{-2, -2}));
  // PyTorch: interpolate([0, 1, 2, 3] as 1x4, size 1x8, bilinear, align_corners=False)
  // = [0, .25, .75, 1.25, 1.75, 2.25, 2.75, 3]; nearest takes each input twice.
  EXPECT_EQ(ref::resize_bilinear({0, 1, 2, 3}, 1, 1, 1, 4, 1, 8),
            (ref::Vec{0, .25, .75, 1.25, 1.75, 2.25, 2.75, 3}));
  EXPECT_EQ(ref::resize_nearest({0, 1, 2, 3}, 1, 1, 1, 4, 1, 8),
            (ref::Vec{0, 0, 1, 1, 2, 2, 3, 3}));
  // Downscaling 4 -> 3 (nearest-exact): centres 2/3, 2, 10/3 -> inputs 0, 2, 3.
  EXPECT_EQ(ref::resize_nearest({0, 1, 2, 3}, 1, 1, 1, 4, 1, 3), (ref::Vec{0, 2, 3}));
}

TEST(ModelOpsReference, DropoutUniformIsFixedAndSpreadsOverItsRange) {
  // Pinned values: a change of the hash changes every mask and every AlexNet result, and must be
  // deliberate.
  EXPECT_EQ(dropout_uniform(0, 0, 0), 2327157 * 0x1p-24f);
  EXPECT_EQ(dropout_uniform(0, 0, 1), 3093159 * 0x1p-24f);
  EXPECT_EQ(dropout_uniform(0, 1, 0), 4515257 * 0x1p-24f);
  EXPECT_EQ(dropout_uniform(2024, 127, 4095), 14141906 * 0x1p-24f);
  // 16 equal bins over 2^16 draws: each holds 4096 +- 5 sigma (sigma = 62).
  std::vector<int> bins(16, 0);
  for (int e = 0; e < 256; ++e)
    for (int f = 0; f < 256; ++f) {
      const float u = dropout_uniform(99, e, f);
      ASSERT_TRUE(u >= 0.0f && u < 1.0f);
      ++bins[static_cast<std::size_t>(u * 16)];
    }
  for (int b = 0; b < 16; ++b) EXPECT_NEAR(bins[b], 4096, 5 * 62) << "bin " << b;
}

}  // namespace
}  // namespace paralab
