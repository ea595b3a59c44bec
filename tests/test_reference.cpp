// Tests of the double-precision reference (tests/reference), which every backend and strategy is
// later compared against: central finite differences for each layer and for the whole LeNet, plus
// hand-computed cases that pin the conventions (cross-correlation, W stored (in,out), floor-mode
// pooling, ties -> lowest index) which finite differences cannot see.
//
// Run: g++ -std=c++20 -O2 -Wall -Wextra -I. tests/reference/reference.cpp tests/test_reference.cpp
//        -lgtest -lgtest_main -pthread -o /tmp/t_ref && /tmp/t_ref
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tests/reference/reference.h"

namespace paralab::ref {
namespace {

// Finite-difference step: in double, rounding error is ~eps*|L|/h ~ 1e-10*|L| and the truncation
// error ~h^2*|L'''| ~ 1e-12, both far below the tolerances used here.
constexpr double kStep = 1e-6;

// |got - want| <= atol + rtol*|want| for every element; on failure names the worst element (by its
// index in the full tensor when got/want are a subset picked by `index_of`).
::testing::AssertionResult all_close(const Vec& got, const Vec& want, double atol, double rtol,
                                     const std::vector<size_t>* index_of = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != expected size " << want.size();
  size_t worst = 0, bad = 0;
  double worst_excess = -INFINITY;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    double excess = err - (atol + rtol * std::abs(want[i]));
    if (std::isnan(excess)) excess = INFINITY;  // a NaN is the worst possible element
    if (excess > 0.0) ++bad;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << bad << " of " << got.size() << " elements out of tolerance (atol " << atol << ", rtol "
     << rtol << "); worst at index " << (index_of ? (*index_of)[worst] : worst) << ": got "
     << got[worst] << ", expected " << want[worst] << ", |diff| "
     << std::abs(got[worst] - want[worst]);
  return ::testing::AssertionFailure() << os.str();
}

Vec random_normal(Rng& rng, size_t n, double scale = 1.0) {
  Vec v(n);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

double dot(const Vec& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// Central differences of loss() with respect to v[i] for each i in idx; v is perturbed in place and
// restored exactly.
Vec fd_grad(Vec& v, const std::function<double()>& loss, const std::vector<size_t>& idx) {
  Vec g;
  g.reserve(idx.size());
  for (size_t i : idx) {
    const double saved = v[i];
    v[i] = saved + kStep;
    const double lp = loss();
    v[i] = saved - kStep;
    const double lm = loss();
    v[i] = saved;
    g.push_back((lp - lm) / (2 * kStep));
  }
  return g;
}

std::vector<size_t> all_indices(const Vec& v) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  return idx;
}

Vec fd_grad(Vec& v, const std::function<double()>& loss) {
  return fd_grad(v, loss, all_indices(v));
}

Vec pick(const Vec& v, const std::vector<size_t>& idx) {
  Vec out;
  for (size_t i : idx) out.push_back(v[i]);
  return out;
}

// Layer gradient checks: L = sum(y * g) with a fixed random g, so dL/dy = g.
// Tolerance: the layers are linear in each input, so the differences are exact up to rounding
// (~1e-9 here); 1e-6 + 1e-5*|ref| passes with 100x margin, while a wrong index gives O(1) errors.
constexpr double kLayerAtol = 1e-6, kLayerRtol = 1e-5;

TEST(RefConv2d, GradientsMatchFiniteDifferences) {
  const int N = 2, C = 3, H = 7, W = 6, K = 4, R = 3, S = 2, OH = H - R + 1, OW = W - S + 1;
  Rng rng(11);
  Vec x = random_normal(rng, size_t{N} * C * H * W);
  Vec w = random_normal(rng, size_t{K} * C * R * S);
  Vec b = random_normal(rng, K);
  const Vec g = random_normal(rng, size_t{N} * K * OH * OW);
  auto loss = [&] { return dot(conv2d_forward(x, w, b, N, C, H, W, K, R, S), g); };

  // Pre-filled with junk of the wrong size: backward must overwrite, not accumulate.
  Vec dx(3, 7.0), dw(5, 7.0), db(1, 7.0);
  conv2d_backward(x, w, g, N, C, H, W, K, R, S, dx, dw, db);
  EXPECT_TRUE(all_close(dx, fd_grad(x, loss), kLayerAtol, kLayerRtol)) << "dx";
  EXPECT_TRUE(all_close(dw, fd_grad(w, loss), kLayerAtol, kLayerRtol)) << "dw";
  EXPECT_TRUE(all_close(db, fd_grad(b, loss), kLayerAtol, kLayerRtol)) << "db";
}

TEST(RefRelu, GradientMatchesFiniteDifferences) {
  Rng rng(12);
  Vec x = random_normal(rng, 50);
  // Keep every input at least 1e-2 from the kink at 0, where the difference quotient is wrong.
  for (double& v : x) v = std::copysign(0.01 + std::abs(v), v);
  const Vec g = random_normal(rng, x.size());
  auto loss = [&] { return dot(relu_forward(x), g); };
  EXPECT_TRUE(all_close(relu_backward(x, g), fd_grad(x, loss), kLayerAtol, kLayerRtol));
}

TEST(RefAvgpool2, GradientMatchesFiniteDifferencesOddSizes) {
  const int N = 2, C = 3, H = 7, W = 5;
  Rng rng(13);
  Vec x = random_normal(rng, size_t{N} * C * H * W);
  const Vec g = random_normal(rng, size_t{N} * C * (H / 2) * (W / 2));
  auto loss = [&] { return dot(avgpool2_forward(x, N, C, H, W), g); };
  EXPECT_TRUE(
      all_close(avgpool2_backward(g, N, C, H, W), fd_grad(x, loss), kLayerAtol, kLayerRtol));
}

TEST(RefLinear, GradientsMatchFiniteDifferences) {
  const int N = 3, in = 5, out = 4;
  Rng rng(14);
  Vec x = random_normal(rng, size_t{N} * in);
  Vec w = random_normal(rng, size_t{in} * out);
  Vec b = random_normal(rng, out);
  const Vec g = random_normal(rng, size_t{N} * out);
  auto loss = [&] { return dot(linear_forward(x, w, b, N, in, out), g); };

  Vec dx(2, 7.0), dw(2, 7.0), db(2, 7.0);  // junk: must be overwritten
  linear_backward(x, w, g, N, in, out, dx, dw, db);
  EXPECT_TRUE(all_close(dx, fd_grad(x, loss), kLayerAtol, kLayerRtol)) << "dx";
  EXPECT_TRUE(all_close(dw, fd_grad(w, loss), kLayerAtol, kLayerRtol)) << "dW";
  EXPECT_TRUE(all_close(db, fd_grad(b, loss), kLayerAtol, kLayerRtol)) << "db";
}

TEST(RefSoftmaxXent, GradientMatchesFiniteDifferences) {
  const int N = 4, classes = 7;
  Rng rng(15);
  Vec logits = random_normal(rng, size_t{N} * classes, 3.0);
  const std::vector<int> labels = {0, 6, 3, 3};
  Vec dlogits, scratch;
  int correct = 0;
  softmax_xent(logits, labels, N, classes, dlogits, correct);
  auto loss = [&] { return softmax_xent(logits, labels, N, classes, scratch, correct); };
  EXPECT_TRUE(all_close(dlogits, fd_grad(logits, loss), kLayerAtol, kLayerRtol));
}

// Hand-computed cases: exact small numbers, so a flipped kernel, a transposed weight or a
// mis-strided batch fails even where the finite differences would agree with the bug.
// Tolerance 1e-12: the results are sums of a few small integers/decimals, exact up to rounding.
constexpr double kExact = 1e-12;

TEST(RefConv2d, HandComputedCrossCorrelation) {
  // x (1,1,3,4) = 1..12, w (1,1,2,3) = 1..6, b = 0.5; y is (1,1,2,2).
  const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const Vec w = {1, 2, 3, 4, 5, 6};
  // y[0,0] = 1*1+2*2+3*3 + 4*5+5*6+6*7 = 106; each step right adds 21, each step down adds 84.
  // A flipped (true) convolution would give 62 at [0,0].
  EXPECT_TRUE(all_close(conv2d_forward(x, w, {0.5}, 1, 1, 3, 4, 1, 2, 3),
                        {106.5, 127.5, 190.5, 211.5}, kExact, kExact));

  // dy selects output [1,1]: dw is the window under it, dx is w placed at (1,1).
  Vec dx, dw, db;
  conv2d_backward(x, w, {0, 0, 0, 1}, 1, 1, 3, 4, 1, 2, 3, dx, dw, db);
  EXPECT_TRUE(all_close(dw, {6, 7, 8, 10, 11, 12}, kExact, kExact)) << "dw";
  EXPECT_TRUE(all_close(dx, {0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6}, kExact, kExact)) << "dx";
  EXPECT_TRUE(all_close(db, {1}, kExact, kExact)) << "db";
}

TEST(RefConv2d, HandComputedChannelMixAndBatch) {
  // 1x1 kernel: y[n,k] = b[k] + sum_c w[k,c] x[n,c]. x (2,2,1,2); w (2,2,1,1) = [[1,2],[3,4]].
  const Vec x = {1, 2, 10, 20, /* n=1 */ -1, -2, -10, -20};
  const Vec w = {1, 2, 3, 4};
  const Vec b = {0, 100};
  // n=0: k0 = x0 + 2*x1 = [21, 42]; k1 = 100 + 3*x0 + 4*x1 = [143, 186]; n=1 negates the sums.
  // Reading w as [c,k] would give k0 = [31, 62].
  EXPECT_TRUE(all_close(conv2d_forward(x, w, b, 2, 2, 1, 2, 2, 1, 1),
                        {21, 42, 143, 186, -21, -42, 57, 14}, kExact, kExact));
}

TEST(RefRelu, HandComputed) {
  const Vec x = {-1, 0, 2, -0.5, 3};
  EXPECT_TRUE(all_close(relu_forward(x), {0, 0, 2, 0, 3}, 0, 0));
  // At exactly 0 the gradient is 0.
  EXPECT_TRUE(all_close(relu_backward(x, {1, 2, 3, 4, 5}), {0, 0, 3, 0, 5}, 0, 0));
}

TEST(RefAvgpool2, HandComputedFloorMode) {
  // x (1,1,3,5) = 1..15; the last row and column are dropped, output (1,1,1,2).
  Vec x(15);
  std::iota(x.begin(), x.end(), 1.0);
  EXPECT_TRUE(all_close(avgpool2_forward(x, 1, 1, 3, 5), {4, 6}, kExact, kExact));
  EXPECT_TRUE(all_close(avgpool2_backward({4, 8}, 1, 1, 3, 5),
                        {1, 1, 2, 2, 0, 1, 1, 2, 2, 0, 0, 0, 0, 0, 0}, kExact, kExact));
  // LeNet's second pool: 9x9 -> 4x4.
  EXPECT_EQ(avgpool2_forward(Vec(81, 1.0), 1, 1, 9, 9).size(), 16u);
}

TEST(RefLinear, HandComputedWeightStoredInOut) {
  // x (2,2); W (2,3) = [[1,2,3],[4,5,6]] stored (in,out); y = x W + b.
  const Vec x = {1, 2, -1, 0};
  const Vec W = {1, 2, 3, 4, 5, 6};
  const Vec b = {0.5, 0, -0.5};
  // Row 0: [1+8, 2+10, 3+12] + b. Reading W as (out,in) would give 5 at [0,0].
  EXPECT_TRUE(
      all_close(linear_forward(x, W, b, 2, 2, 3), {9.5, 12, 14.5, -0.5, -2, -3.5}, kExact, kExact));
  Vec dx, dW, db;
  linear_backward(x, W, {1, 0, 0, 0, 0, 1}, 2, 2, 3, dx, dW, db);
  EXPECT_TRUE(all_close(dx, {1, 4, 3, 6}, kExact, kExact)) << "dx = dy W^T";
  EXPECT_TRUE(all_close(dW, {1, 0, -1, 2, 0, 0}, kExact, kExact)) << "dW = x^T dy";
  EXPECT_TRUE(all_close(db, {1, 0, 1}, kExact, kExact)) << "db";
}

TEST(RefSoftmaxXent, HandComputed) {
  const double l2 = std::log(2.0), l3 = std::log(3.0);
  const Vec logits = {
      0,    l3, 0,      // softmax (.2,.6,.2), label 1: loss ln(5/3), correct
      l2,   l2, 0,      // softmax (.4,.4,.2), label 1: loss ln(5/2), tie -> argmax 0, wrong
      1000, 0,  -1000,  // label 0: loss 0 (a naive exp overflows), correct
      1000, 0,  -1000,  // label 2: loss 2000, wrong
  };
  Vec dlogits;
  int correct = -1;
  const double loss = softmax_xent(logits, {1, 1, 0, 2}, 4, 3, dlogits, correct);
  EXPECT_NEAR(loss, std::log(25.0 / 6.0) + 2000.0, 1e-12 * 2000.0);
  EXPECT_EQ(correct, 2);
  EXPECT_TRUE(all_close(dlogits, {.2, -.4, .2, .4, -.6, .2, 0, 0, 0, 1, 0, -1}, kExact, kExact));
}

TEST(RefLayers, ShapeMismatchThrows) {
  EXPECT_THROW(conv2d_forward(Vec(11), Vec(6), Vec(1), 1, 1, 3, 4, 1, 2, 3), paralab::Error);
  EXPECT_THROW(linear_forward(Vec(4), Vec(5), Vec(3), 2, 2, 3), paralab::Error);
  Vec d;
  int c = 0;
  EXPECT_THROW(softmax_xent(Vec(6), {0, 3}, 2, 3, d, c), paralab::Error);  // label out of range
}

// ---- The whole LeNet ----

Vec random_images(Rng& rng, int N) {
  Vec images(size_t(N) * 28 * 28);
  for (double& v : images) v = rng.uniform();  // like Fashion-MNIST pixels in [0,1)
  return images;
}

TEST(RefLeNet, ParameterCountAndShapes) {
  const LeNetParams p = lenet_init(1);
  EXPECT_EQ(p.w1.size(), 20u * 1 * 3 * 3);
  EXPECT_EQ(p.b1.size(), 20u);
  EXPECT_EQ(p.w2.size(), 50u * 20 * 5 * 5);
  EXPECT_EQ(p.b2.size(), 50u);
  EXPECT_EQ(p.w3.size(), 800u * 128);
  EXPECT_EQ(p.b3.size(), 128u);
  EXPECT_EQ(p.w4.size(), 128u * 10);
  EXPECT_EQ(p.b4.size(), 10u);
  EXPECT_EQ(flatten(p).size(), 129068u);
  EXPECT_EQ(kLeNetParamCount, 129068);
}

TEST(RefLeNet, InitIsSeededNormalWithZeroBiases) {
  const LeNetParams a = lenet_init(5, 0.5), b = lenet_init(5, 0.5), c = lenet_init(6, 0.5);
  EXPECT_EQ(flatten(a), flatten(b));
  EXPECT_NE(flatten(a), flatten(c));
  for (const Vec* bias : {&a.b1, &a.b2, &a.b3, &a.b4})
    EXPECT_TRUE(std::all_of(bias->begin(), bias->end(), [](double v) { return v == 0.0; }));
  // w3 has 102,400 samples: the standard deviation of the sample std is ~0.5/sqrt(2*102400).
  double sum = 0, sum2 = 0;
  for (double v : a.w3) sum += v, sum2 += v * v;
  const double n = static_cast<double>(a.w3.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum2 / n), 0.5, 0.005);
}

TEST(RefLeNet, FlattenUnflattenRoundTripInBookOrder) {
  Vec flat(kLeNetParamCount);
  std::iota(flat.begin(), flat.end(), 0.0);
  const LeNetParams p = unflatten(flat);
  // Offsets of the first element of each tensor in book order w1,b1,w2,b2,w3,b3,w4,b4.
  EXPECT_EQ(p.w1.front(), 0);
  EXPECT_EQ(p.b1.front(), 180);
  EXPECT_EQ(p.w2.front(), 200);
  EXPECT_EQ(p.b2.front(), 25200);
  EXPECT_EQ(p.w3.front(), 25250);
  EXPECT_EQ(p.b3.front(), 127650);
  EXPECT_EQ(p.w4.front(), 127778);
  EXPECT_EQ(p.b4.front(), 129058);
  EXPECT_EQ(p.b4.back(), 129067);
  EXPECT_EQ(flatten(p), flat);
  const Vec random = flatten(lenet_init(3, 1.0));
  EXPECT_EQ(flatten(unflatten(random)), random);
  EXPECT_THROW(unflatten(Vec(kLeNetParamCount - 1)), paralab::Error);
}

TEST(RefLeNet, SgdArithmetic) {
  // Every parameter and gradient distinct, so mixing up two tensors changes the result.
  Vec pf(kLeNetParamCount), gf(kLeNetParamCount);
  for (size_t i = 0; i < pf.size(); ++i) pf[i] = 1.0 + 1e-3 * i, gf[i] = std::sin(0.1 * i);
  LeNetParams p = unflatten(pf);
  sgd(p, unflatten(gf), 0.1, 4);
  Vec want(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) want[i] = pf[i] - 0.1 * gf[i] / 4;
  // 1e-15 relative: one rounding of lr*g/B in either association order.
  EXPECT_TRUE(all_close(flatten(p), want, 0, 1e-15));

  LeNetParams q = unflatten(Vec(kLeNetParamCount, 1.0));
  sgd(q, unflatten(Vec(kLeNetParamCount, 2.0)), 0.1, 4);  // 1 - 0.1*2/4
  EXPECT_TRUE(all_close(flatten(q), Vec(kLeNetParamCount, 0.95), 0, 1e-15));
}

TEST(RefLeNet, ForwardOnlyLossAgreesAndGradientsAddOverTheBatch) {
  Rng rng(21);
  LeNetParams p = lenet_init(22, 0.1);
  const Vec images = random_images(rng, 2);
  const LeNetResult both = lenet_forward_backward(p, images, {3, 7}, 2);
  EXPECT_EQ(both.loss, lenet_loss(p, images, {3, 7}, 2));
  EXPECT_EQ(both.logits.size(), 20u);
  EXPECT_GE(both.correct, 0);
  EXPECT_LE(both.correct, 2);

  // The loss and its gradients are sums over samples, so each sample must stand alone.
  const Vec img0(images.begin(), images.begin() + 784), img1(images.begin() + 784, images.end());
  const LeNetResult r0 = lenet_forward_backward(p, img0, {3}, 1);
  const LeNetResult r1 = lenet_forward_backward(p, img1, {7}, 1);
  EXPECT_NEAR(both.loss, r0.loss + r1.loss, 1e-12);
  EXPECT_EQ(both.correct, r0.correct + r1.correct);
  Vec sum = flatten(r0.grads);
  const Vec g1 = flatten(r1.grads);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += g1[i];
  // 1e-12 + 1e-10 relative: the same terms summed in a different order.
  EXPECT_TRUE(all_close(flatten(both.grads), sum, 1e-12, 1e-10));
}

TEST(RefLeNet, GradientsMatchFiniteDifferences) {
  const int N = 3;
  Rng rng(31);
  // Scale 0.1 (not the tests' default 0.01) so that the gradients of the early layers are not tiny;
  // random biases so that every tensor is away from its special initial value.
  LeNetParams p = lenet_init(32, 0.1);
  for (Vec* b : {&p.b1, &p.b2, &p.b3, &p.b4})
    for (double& v : *b) v = 0.1 * rng.normal();
  const Vec images = random_images(rng, N);
  const std::vector<int> labels = {2, 9, 0};
  const LeNetResult res = lenet_forward_backward(p, images, labels, N);
  auto loss = [&] { return lenet_loss(p, images, labels, N); };

  struct Named {
    const char* name;
    Vec* param;
    const Vec* grad;
  };
  const Named tensors[] = {
      {"w1", &p.w1, &res.grads.w1}, {"b1", &p.b1, &res.grads.b1}, {"w2", &p.w2, &res.grads.w2},
      {"b2", &p.b2, &res.grads.b2}, {"w3", &p.w3, &res.grads.w3}, {"b3", &p.b3, &res.grads.b3},
      {"w4", &p.w4, &res.grads.w4}, {"b4", &p.b4, &res.grads.b4},
  };
  // 30 random coordinates per tensor, all of b1 and b4: 210 in all.
  // Tolerance: rounding in the difference quotient is ~eps*|L|/h ~ 1e-9 (L ~ 7); the loss is
  // piecewise smooth, and a ReLU input crossing 0 inside +-h would show up as an O(|grad|) error.
  // 1e-7 + 1e-5*|ref| keeps ~80x margin above the observed 1.2e-9, yet is far below most sampled
  // gradients (1e-3..1), so a wrong index or a dropped term fails.
  for (const Named& t : tensors) {
    std::vector<size_t> idx = all_indices(*t.param);
    for (size_t i = 0; i + 1 < idx.size(); ++i)  // partial Fisher-Yates shuffle
      std::swap(idx[i], idx[i + rng.next_u64() % (idx.size() - i)]);
    idx.resize(std::min<size_t>(idx.size(), 30));
    EXPECT_TRUE(all_close(pick(*t.grad, idx), fd_grad(*t.param, loss, idx), 1e-7, 1e-5, &idx))
        << t.name;
  }
}

}  // namespace
}  // namespace paralab::ref
