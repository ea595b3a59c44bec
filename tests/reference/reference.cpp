// The plain double-precision reference; see reference.h for what each function computes.
#include "tests/reference/reference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/rng.h"

namespace paralab::ref {
namespace {

void require_size(const Vec& v, size_t expected, const char* what) {
  PARALAB_REQUIRE(v.size() == expected, std::string("ref: ") + what + " has " +
                                            std::to_string(v.size()) + " elements, expected " +
                                            std::to_string(expected));
}

void require_positive(std::initializer_list<int> dims, const char* what) {
  for (int d : dims)
    PARALAB_REQUIRE(d > 0, std::string("ref: ") + what + ": dimensions must be > 0");
}

size_t sz(int a) { return static_cast<size_t>(a); }

}  // namespace

Vec conv2d_forward(const Vec& x, const Vec& w, const Vec& b, int N, int C, int H, int W, int K,
                   int R, int S) {
  require_positive({N, C, H, W, K, R, S}, "conv2d_forward");
  PARALAB_REQUIRE(R <= H && S <= W, "ref: conv2d_forward: kernel larger than input");
  require_size(x, sz(N) * C * H * W, "conv2d_forward x");
  require_size(w, sz(K) * C * R * S, "conv2d_forward w");
  require_size(b, sz(K), "conv2d_forward b");
  const int OH = H - R + 1, OW = W - S + 1;
  Vec y(sz(N) * K * OH * OW);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          double acc = b[k];
          for (int c = 0; c < C; ++c)
            for (int r = 0; r < R; ++r)
              for (int s = 0; s < S; ++s)
                acc += w[((sz(k) * C + c) * R + r) * S + s] *
                       x[((sz(n) * C + c) * H + i + r) * W + j + s];
          y[((sz(n) * K + k) * OH + i) * OW + j] = acc;
        }
  return y;
}

void conv2d_backward(const Vec& x, const Vec& w, const Vec& dy, int N, int C, int H, int W, int K,
                     int R, int S, Vec& dx, Vec& dw, Vec& db) {
  require_positive({N, C, H, W, K, R, S}, "conv2d_backward");
  PARALAB_REQUIRE(R <= H && S <= W, "ref: conv2d_backward: kernel larger than input");
  const int OH = H - R + 1, OW = W - S + 1;
  require_size(x, sz(N) * C * H * W, "conv2d_backward x");
  require_size(w, sz(K) * C * R * S, "conv2d_backward w");
  require_size(dy, sz(N) * K * OH * OW, "conv2d_backward dy");
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(sz(K), 0.0);
  // Each forward term w[k,c,r,s] * x[n,c,i+r,j+s] sends dy[n,k,i,j] back to both factors.
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          const double g = dy[((sz(n) * K + k) * OH + i) * OW + j];
          db[k] += g;
          for (int c = 0; c < C; ++c)
            for (int r = 0; r < R; ++r)
              for (int s = 0; s < S; ++s) {
                const size_t wi = ((sz(k) * C + c) * R + r) * S + s;
                const size_t xi = ((sz(n) * C + c) * H + i + r) * W + j + s;
                dw[wi] += g * x[xi];
                dx[xi] += g * w[wi];
              }
        }
}

Vec relu_forward(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0.0 ? x[i] : 0.0;
  return y;
}

Vec relu_backward(const Vec& x, const Vec& dy) {
  require_size(dy, x.size(), "relu_backward dy");
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) dx[i] = x[i] > 0.0 ? dy[i] : 0.0;
  return dx;
}

Vec avgpool2_forward(const Vec& x, int N, int C, int H, int W) {
  require_positive({N, C, H, W}, "avgpool2_forward");
  require_size(x, sz(N) * C * H * W, "avgpool2_forward x");
  const int OH = H / 2, OW = W / 2;  // floor mode
  Vec y(sz(N) * C * OH * OW);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const size_t plane = sz(n) * C + c;
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          double sum = 0.0;
          for (int di = 0; di < 2; ++di)
            for (int dj = 0; dj < 2; ++dj) sum += x[(plane * H + 2 * i + di) * W + 2 * j + dj];
          y[(plane * OH + i) * OW + j] = 0.25 * sum;
        }
    }
  return y;
}

Vec avgpool2_backward(const Vec& dy, int N, int C, int H, int W) {
  require_positive({N, C, H, W}, "avgpool2_backward");
  const int OH = H / 2, OW = W / 2;
  require_size(dy, sz(N) * C * OH * OW, "avgpool2_backward dy");
  Vec dx(sz(N) * C * H * W, 0.0);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const size_t plane = sz(n) * C + c;
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          const double g = 0.25 * dy[(plane * OH + i) * OW + j];
          for (int di = 0; di < 2; ++di)
            for (int dj = 0; dj < 2; ++dj) dx[(plane * H + 2 * i + di) * W + 2 * j + dj] = g;
        }
    }
  return dx;
}

StageResult conv_relu_pool(const Vec& x, const Vec& w, const Vec& b, const Vec& dy, int N, int C,
                           int H, int W, int K, int R, int S) {
  const int OH = H - R + 1, OW = W - S + 1;
  StageResult r;
  const Vec conv = conv2d_forward(x, w, b, N, C, H, W, K, R, S);
  r.y = avgpool2_forward(relu_forward(conv), N, K, OH, OW);
  const Vec d_act = avgpool2_backward(dy, N, K, OH, OW);
  conv2d_backward(x, w, relu_backward(conv, d_act), N, C, H, W, K, R, S, r.dx, r.dw, r.db);
  return r;
}

Vec conv2d_forward(const Vec& x, const Vec& w, const Vec& b, const ConvGeom& g) {
  require_positive({g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.sh, g.sw}, "conv2d_forward");
  PARALAB_REQUIRE(g.ph >= 0 && g.pw >= 0 && g.OH() >= 1 && g.OW() >= 1,
                  "ref: conv2d_forward: kernel larger than the padded input");
  require_size(x, sz(g.N) * g.C * g.H * g.W, "conv2d_forward x");
  require_size(w, sz(g.K) * g.C * g.R * g.S, "conv2d_forward w");
  require_size(b, sz(g.K), "conv2d_forward b");
  const int OH = g.OH(), OW = g.OW();
  Vec y(sz(g.N) * g.K * OH * OW);
  for (int n = 0; n < g.N; ++n)
    for (int k = 0; k < g.K; ++k)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          double acc = b[k];
          for (int c = 0; c < g.C; ++c)
            for (int r = 0; r < g.R; ++r)
              for (int s = 0; s < g.S; ++s) {
                const int h = i * g.sh + r - g.ph, v = j * g.sw + s - g.pw;
                if (h < 0 || h >= g.H || v < 0 || v >= g.W) continue;  // zero padding
                acc += w[((sz(k) * g.C + c) * g.R + r) * g.S + s] *
                       x[((sz(n) * g.C + c) * g.H + h) * g.W + v];
              }
          y[((sz(n) * g.K + k) * OH + i) * OW + j] = acc;
        }
  return y;
}

void conv2d_backward(const Vec& x, const Vec& w, const Vec& dy, const ConvGeom& g, Vec& dx, Vec& dw,
                     Vec& db) {
  require_positive({g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.sh, g.sw}, "conv2d_backward");
  PARALAB_REQUIRE(g.ph >= 0 && g.pw >= 0 && g.OH() >= 1 && g.OW() >= 1,
                  "ref: conv2d_backward: kernel larger than the padded input");
  const int OH = g.OH(), OW = g.OW();
  require_size(x, sz(g.N) * g.C * g.H * g.W, "conv2d_backward x");
  require_size(w, sz(g.K) * g.C * g.R * g.S, "conv2d_backward w");
  require_size(dy, sz(g.N) * g.K * OH * OW, "conv2d_backward dy");
  dx.assign(x.size(), 0.0);
  dw.assign(w.size(), 0.0);
  db.assign(sz(g.K), 0.0);
  // Each forward term w[k,c,r,s] * x[n,c,h,v] sends dy[n,k,i,j] back to both factors; padding
  // terms are zero and send nothing.
  for (int n = 0; n < g.N; ++n)
    for (int k = 0; k < g.K; ++k)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j) {
          const double gy = dy[((sz(n) * g.K + k) * OH + i) * OW + j];
          db[k] += gy;
          for (int c = 0; c < g.C; ++c)
            for (int r = 0; r < g.R; ++r)
              for (int s = 0; s < g.S; ++s) {
                const int h = i * g.sh + r - g.ph, v = j * g.sw + s - g.pw;
                if (h < 0 || h >= g.H || v < 0 || v >= g.W) continue;
                const size_t wi = ((sz(k) * g.C + c) * g.R + r) * g.S + s;
                const size_t xi = ((sz(n) * g.C + c) * g.H + h) * g.W + v;
                dw[wi] += gy * x[xi];
                dx[xi] += gy * w[wi];
              }
        }
}

namespace {

void require_pool(const PoolGeom& g, const char* what) {
  require_positive({g.N, g.C, g.H, g.W, g.kh, g.kw, g.sh, g.sw}, what);
  PARALAB_REQUIRE(g.ph >= 0 && g.pw >= 0 && 2 * g.ph <= g.kh && 2 * g.pw <= g.kw,
                  std::string("ref: ") + what + ": padding must be in [0, window / 2]");
  PARALAB_REQUIRE(g.OH() >= 1 && g.OW() >= 1,
                  std::string("ref: ") + what + ": window larger than the padded input");
}

// The position (h, v) in plane-local coordinates of the first maximum of window (i, j).
std::pair<int, int> window_argmax(const double* plane, const PoolGeom& g, int i, int j) {
  int bh = -1, bv = -1;
  for (int r = 0; r < g.kh; ++r)
    for (int s = 0; s < g.kw; ++s) {
      const int h = i * g.sh + r - g.ph, v = j * g.sw + s - g.pw;
      if (h < 0 || h >= g.H || v < 0 || v >= g.W) continue;  // padding never wins
      if (bh < 0 || plane[sz(h) * g.W + v] > plane[sz(bh) * g.W + bv]) bh = h, bv = v;
    }
  return {bh, bv};
}

}  // namespace

Vec pool2d_forward(const Vec& x, const PoolGeom& g) {
  require_pool(g, "pool2d_forward");
  require_size(x, sz(g.N) * g.C * g.H * g.W, "pool2d_forward x");
  const int OH = g.OH(), OW = g.OW();
  Vec y(sz(g.N) * g.C * OH * OW);
  for (int p = 0; p < g.N * g.C; ++p) {
    const double* plane = x.data() + sz(p) * g.H * g.W;
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        double out = 0.0;
        if (g.max) {
          const auto [h, v] = window_argmax(plane, g, i, j);
          out = plane[sz(h) * g.W + v];
        } else {
          for (int r = 0; r < g.kh; ++r)
            for (int s = 0; s < g.kw; ++s) {
              const int h = i * g.sh + r - g.ph, v = j * g.sw + s - g.pw;
              if (h >= 0 && h < g.H && v >= 0 && v < g.W) out += plane[sz(h) * g.W + v];
            }
          out /= g.kh * g.kw;
        }
        y[(sz(p) * OH + i) * OW + j] = out;
      }
  }
  return y;
}

Vec pool2d_backward(const Vec& x, const Vec& dy, const PoolGeom& g) {
  require_pool(g, "pool2d_backward");
  require_size(x, sz(g.N) * g.C * g.H * g.W, "pool2d_backward x");
  const int OH = g.OH(), OW = g.OW();
  require_size(dy, sz(g.N) * g.C * OH * OW, "pool2d_backward dy");
  Vec dx(x.size(), 0.0);
  for (int p = 0; p < g.N * g.C; ++p) {
    const double* plane = x.data() + sz(p) * g.H * g.W;
    double* dplane = dx.data() + sz(p) * g.H * g.W;
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        const double gy = dy[(sz(p) * OH + i) * OW + j];
        if (g.max) {
          const auto [h, v] = window_argmax(plane, g, i, j);
          dplane[sz(h) * g.W + v] += gy;
          continue;
        }
        for (int r = 0; r < g.kh; ++r)
          for (int s = 0; s < g.kw; ++s) {
            const int h = i * g.sh + r - g.ph, v = j * g.sw + s - g.pw;
            if (h >= 0 && h < g.H && v >= 0 && v < g.W)
              dplane[sz(h) * g.W + v] += gy / (g.kh * g.kw);
          }
      }
  }
  return dx;
}

std::vector<int> dropout_mask(int N, int64_t F, float p, uint64_t seed, int64_t e0, int64_t f0) {
  PARALAB_REQUIRE(N > 0 && F > 0, "ref: dropout_mask: N and F must be > 0");
  PARALAB_REQUIRE(p >= 0.0f && p < 1.0f, "ref: dropout: p must be in [0, 1)");
  std::vector<int> keep(sz(N) * static_cast<size_t>(F));
  for (int n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      keep[sz(n) * static_cast<size_t>(F) + static_cast<size_t>(f)] =
          dropout_uniform(seed, e0 + n, f0 + f) >= p ? 1 : 0;
  return keep;
}

Vec dropout_forward(const Vec& x, int N, float p, uint64_t seed, int64_t e0, int64_t f0) {
  PARALAB_REQUIRE(N > 0 && x.size() % sz(N) == 0 && !x.empty(),
                  "ref: dropout_forward: x is not (N,F)");
  const auto keep = dropout_mask(N, static_cast<int64_t>(x.size() / sz(N)), p, seed, e0, f0);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = keep[i] ? x[i] / (1.0 - p) : 0.0;
  return y;
}

Vec dropout_backward(const Vec& dy, int N, float p, uint64_t seed, int64_t e0, int64_t f0) {
  return dropout_forward(dy, N, p, seed, e0, f0);  // the same linear map: its own adjoint
}

Vec resize_nearest(const Vec& x, int N, int C, int H, int W, int OH, int OW) {
  require_positive({N, C, H, W, OH, OW}, "resize_nearest");
  require_size(x, sz(N) * C * H * W, "resize_nearest x");
  Vec y(sz(N) * C * OH * OW);
  for (int p = 0; p < N * C; ++p)
    for (int i = 0; i < OH; ++i)
      for (int j = 0; j < OW; ++j) {
        const auto h = static_cast<size_t>(std::floor((i + 0.5) * H / OH));
        const auto v = static_cast<size_t>(std::floor((j + 0.5) * W / OW));
        y[(sz(p) * OH + i) * OW + j] = x[(sz(p) * H + h) * W + v];
      }
  return y;
}

Vec resize_bilinear(const Vec& x, int N, int C, int H, int W, int OH, int OW) {
  require_positive({N, C, H, W, OH, OW}, "resize_bilinear");
  require_size(x, sz(N) * C * H * W, "resize_bilinear x");
  struct Tap {
    size_t lo, hi;
    double frac;
  };
  auto tap = [](int i, int in, int out) {
    const double src = std::max(0.0, (i + 0.5) * in / out - 0.5);
    const int lo = std::min(static_cast<int>(src), in - 1);
    return Tap{sz(lo), sz(std::min(lo + 1, in - 1)), src - lo};
  };
  Vec y(sz(N) * C * OH * OW);
  for (int p = 0; p < N * C; ++p) {
    const double* plane = x.data() + sz(p) * H * W;
    for (int i = 0; i < OH; ++i) {
      const Tap th = tap(i, H, OH);
      for (int j = 0; j < OW; ++j) {
        const Tap tw = tap(j, W, OW);
        auto row = [&](size_t h) {
          return (1.0 - tw.frac) * plane[h * W + tw.lo] + tw.frac * plane[h * W + tw.hi];
        };
        y[(sz(p) * OH + i) * OW + j] = (1.0 - th.frac) * row(th.lo) + th.frac * row(th.hi);
      }
    }
  }
  return y;
}

Vec linear_forward(const Vec& x, const Vec& W, const Vec& b, int N, int in, int out) {
  require_positive({N, in, out}, "linear_forward");
  require_size(x, sz(N) * in, "linear_forward x");
  require_size(W, sz(in) * out, "linear_forward W");
  require_size(b, sz(out), "linear_forward b");
  Vec y(sz(N) * out);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < out; ++o) {
      double acc = b[o];
      for (int i = 0; i < in; ++i) acc += x[sz(n) * in + i] * W[sz(i) * out + o];
      y[sz(n) * out + o] = acc;
    }
  return y;
}

void linear_backward(const Vec& x, const Vec& W, const Vec& dy, int N, int in, int out, Vec& dx,
                     Vec& dW, Vec& db) {
  require_positive({N, in, out}, "linear_backward");
  require_size(x, sz(N) * in, "linear_backward x");
  require_size(W, sz(in) * out, "linear_backward W");
  require_size(dy, sz(N) * out, "linear_backward dy");
  dx.assign(x.size(), 0.0);
  dW.assign(W.size(), 0.0);
  db.assign(sz(out), 0.0);
  // dx = dy W^T, dW = x^T dy, db = column sums of dy.
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < out; ++o) {
      const double g = dy[sz(n) * out + o];
      db[o] += g;
      for (int i = 0; i < in; ++i) {
        dx[sz(n) * in + i] += g * W[sz(i) * out + o];
        dW[sz(i) * out + o] += g * x[sz(n) * in + i];
      }
    }
}

double softmax_xent(const Vec& logits, const std::vector<int>& labels, int N, int classes,
                    Vec& dlogits, int& correct) {
  require_positive({N, classes}, "softmax_xent");
  require_size(logits, sz(N) * classes, "softmax_xent logits");
  PARALAB_REQUIRE(labels.size() == sz(N), "ref: softmax_xent: labels has " +
                                              std::to_string(labels.size()) +
                                              " entries, expected " + std::to_string(N));
  dlogits.assign(logits.size(), 0.0);
  correct = 0;
  double loss = 0.0;
  for (int n = 0; n < N; ++n) {
    const double* z = logits.data() + sz(n) * classes;
    double* dz = dlogits.data() + sz(n) * classes;
    const int label = labels[n];
    PARALAB_REQUIRE(label >= 0 && label < classes,
                    "ref: softmax_xent: label " + std::to_string(label) + " out of range");
    int argmax = 0;  // strict > keeps the lowest index on ties
    for (int c = 1; c < classes; ++c)
      if (z[c] > z[argmax]) argmax = c;
    if (argmax == label) ++correct;
    // Shifting by the maximum keeps every exp() <= 1, so nothing overflows.
    const double zmax = z[argmax];
    double sum = 0.0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - zmax);
    const double log_sum = std::log(sum);
    loss += log_sum - (z[label] - zmax);
    for (int c = 0; c < classes; ++c) dz[c] = std::exp(z[c] - zmax - log_sum);
    dz[label] -= 1.0;
  }
  return loss;
}

uint64_t Rng::next_u64() {
  // splitmix64 (Steele, Lea, Flood 2014).
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  // Box-Muller; 1 - u lies in (0, 1], so the log is finite.
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

namespace {

// Layer sizes of the book's LeNet.
constexpr int kIn = 28, kC1 = 20, kR1 = 3, kH1 = kIn - kR1 + 1, kP1 = kH1 / 2;  // 26, 13
constexpr int kC2 = 50, kR2 = 5, kH2 = kP1 - kR2 + 1, kP2 = kH2 / 2;            // 9, 4
constexpr int kFlat = kC2 * kP2 * kP2, kHidden = 128, kClasses = 10;            // 800

void require_lenet_shapes(const LeNetParams& p, const char* what) {
  require_size(p.w1, sz(kC1) * kR1 * kR1, what);
  require_size(p.b1, kC1, what);
  require_size(p.w2, sz(kC2) * kC1 * kR2 * kR2, what);
  require_size(p.b2, kC2, what);
  require_size(p.w3, sz(kFlat) * kHidden, what);
  require_size(p.b3, kHidden, what);
  require_size(p.w4, sz(kHidden) * kClasses, what);
  require_size(p.b4, kClasses, what);
}

// Every tensor, in book order, so flatten/unflatten/sgd cannot disagree on the order.
template <typename P>
auto tensors(P& p) {
  return std::array{&p.w1, &p.b1, &p.w2, &p.b2, &p.w3, &p.b3, &p.w4, &p.b4};
}

// Activations kept for the backward pass.
struct LeNetActivations {
  Vec a1, p1, a2, p2, a3, h3, logits;  // pre-ReLU a*, pooled p*, post-ReLU h3
};

LeNetParams lenet_zeros() {
  static_assert(kC1 * kR1 * kR1 + kC1 + kC2 * kC1 * kR2 * kR2 + kC2 + kFlat * kHidden + kHidden +
                    kHidden * kClasses + kClasses ==
                kLeNetParamCount);
  LeNetParams p;
  p.w1.assign(sz(kC1) * kR1 * kR1, 0.0);
  p.b1.assign(kC1, 0.0);
  p.w2.assign(sz(kC2) * kC1 * kR2 * kR2, 0.0);
  p.b2.assign(kC2, 0.0);
  p.w3.assign(sz(kFlat) * kHidden, 0.0);
  p.b3.assign(kHidden, 0.0);
  p.w4.assign(sz(kHidden) * kClasses, 0.0);
  p.b4.assign(kClasses, 0.0);
  return p;
}

LeNetActivations lenet_forward(const LeNetParams& p, const Vec& images, int N) {
  require_lenet_shapes(p, "lenet params");
  LeNetActivations act;
  act.a1 = conv2d_forward(images, p.w1, p.b1, N, 1, kIn, kIn, kC1, kR1, kR1);    // (N,20,26,26)
  act.p1 = avgpool2_forward(relu_forward(act.a1), N, kC1, kH1, kH1);             // (N,20,13,13)
  act.a2 = conv2d_forward(act.p1, p.w2, p.b2, N, kC1, kP1, kP1, kC2, kR2, kR2);  // (N,50,9,9)
  act.p2 = avgpool2_forward(relu_forward(act.a2), N, kC2, kH2, kH2);  // (N,50,4,4) = (N,800)
  act.a3 = linear_forward(act.p2, p.w3, p.b3, N, kFlat, kHidden);     // (N,128)
  act.h3 = relu_forward(act.a3);
  act.logits = linear_forward(act.h3, p.w4, p.b4, N, kHidden, kClasses);  // (N,10)
  return act;
}

}  // namespace

LeNetParams lenet_init(uint64_t seed, double scale) {
  Rng rng(seed);
  LeNetParams p = lenet_zeros();
  for (Vec* w : {&p.w1, &p.w2, &p.w3, &p.w4})
    for (double& v : *w) v = scale * rng.normal();
  return p;
}

LeNetResult lenet_forward_backward(const LeNetParams& p, const Vec& images,
                                   const std::vector<int>& labels, int N) {
  const LeNetActivations act = lenet_forward(p, images, N);
  LeNetResult res;
  res.logits = act.logits;
  Vec dlogits;
  res.loss = softmax_xent(act.logits, labels, N, kClasses, dlogits, res.correct);

  LeNetParams& g = res.grads;
  Vec dh3, dp2, dp1, dimages;
  linear_backward(act.h3, p.w4, dlogits, N, kHidden, kClasses, dh3, g.w4, g.b4);
  linear_backward(act.p2, p.w3, relu_backward(act.a3, dh3), N, kFlat, kHidden, dp2, g.w3, g.b3);
  const Vec da2 = relu_backward(act.a2, avgpool2_backward(dp2, N, kC2, kH2, kH2));
  conv2d_backward(act.p1, p.w2, da2, N, kC1, kP1, kP1, kC2, kR2, kR2, dp1, g.w2, g.b2);
  const Vec da1 = relu_backward(act.a1, avgpool2_backward(dp1, N, kC1, kH1, kH1));
  conv2d_backward(images, p.w1, da1, N, 1, kIn, kIn, kC1, kR1, kR1, dimages, g.w1, g.b1);
  return res;
}

double lenet_loss(const LeNetParams& p, const Vec& images, const std::vector<int>& labels, int N) {
  const LeNetActivations act = lenet_forward(p, images, N);
  Vec dlogits;
  int correct = 0;
  return softmax_xent(act.logits, labels, N, kClasses, dlogits, correct);
}

void sgd(LeNetParams& p, const LeNetParams& grads, double lr, int batch_size) {
  PARALAB_REQUIRE(batch_size > 0, "ref: sgd: batch_size must be > 0");
  require_lenet_shapes(p, "sgd params");
  require_lenet_shapes(grads, "sgd grads");
  const auto dst = tensors(p);
  const auto src = tensors(grads);
  for (size_t t = 0; t < dst.size(); ++t)
    for (size_t i = 0; i < dst[t]->size(); ++i) (*dst[t])[i] -= lr * (*src[t])[i] / batch_size;
}

Vec flatten(const LeNetParams& p) {
  require_lenet_shapes(p, "flatten params");
  Vec flat;
  flat.reserve(kLeNetParamCount);
  for (const Vec* t : tensors(p)) flat.insert(flat.end(), t->begin(), t->end());
  return flat;
}

LeNetParams unflatten(const Vec& flat) {
  require_size(flat, kLeNetParamCount, "unflatten flat");
  LeNetParams p = lenet_zeros();
  auto it = flat.begin();
  for (Vec* t : tensors(p)) {
    std::copy(it, it + static_cast<std::ptrdiff_t>(t->size()), t->begin());
    it += static_cast<std::ptrdiff_t>(t->size());
  }
  return p;
}

}  // namespace paralab::ref
