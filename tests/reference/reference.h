// The plain double-precision reference: the ground truth every backend op and every strategy in
// ParaLab is compared against (STYLE rule 3).
//
// Plain loops in double, written to be obviously correct rather than fast. Tensors are row-major
// contiguous std::vector<double> in NCHW layout. Every function checks the sizes of its arguments
// against the shape it is given and throws paralab::Error on a mismatch.
//
// Tested by tests/test_reference.cpp (finite differences for every layer and for the whole LeNet,
// plus hand-computed cases) and, for the model ops (strided and padded convolution, pooling,
// dropout, resize), by the ModelOpsReference tests in tests/test_model_ops.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace paralab::ref {

using Vec = std::vector<double>;

// Convolution, stride 1, no padding, cross-correlation (as in every DL library):
//   y[n,k,i,j] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n,c,i+r,j+s]
// x is (N,C,H,W), w is (K,C,R,S), b is (K); returns y (N,K,H-R+1,W-S+1).
Vec conv2d_forward(const Vec& x, const Vec& w, const Vec& b, int N, int C, int H, int W, int K,
                   int R, int S);
// dy is (N,K,H-R+1,W-S+1); writes dx (N,C,H,W), dw (K,C,R,S), db (K), all overwritten.
void conv2d_backward(const Vec& x, const Vec& w, const Vec& dy, int N, int C, int H, int W, int K,
                     int R, int S, Vec& dx, Vec& dw, Vec& db);

// Elementwise max(x, 0); any shape.
Vec relu_forward(const Vec& x);
// dx = dy where x > 0, else 0 (the subgradient at 0 is taken as 0).
Vec relu_backward(const Vec& x, const Vec& dy);

// Average pooling 2x2, stride 2, floor mode: an odd last row/column is dropped (9x9 -> 4x4).
// x is (N,C,H,W); returns (N,C,H/2,W/2).
Vec avgpool2_forward(const Vec& x, int N, int C, int H, int W);
// dy is (N,C,H/2,W/2); returns dx (N,C,H,W), with 0 in the dropped rows/columns.
Vec avgpool2_backward(const Vec& dy, int N, int C, int H, int W);

// One LeNet stage, y = avgpool2(relu(conv(x))), forward and backward: y (N,K,PH,PW) and, for
// dy (N,K,PH,PW), dx (N,C,H,W), dw (K,C,R,S), db (K). The composition every backend's stage op and
// every own kernel is checked against.
struct StageResult {
  Vec y, dx, dw, db;
};
StageResult conv_relu_pool(const Vec& x, const Vec& w, const Vec& b, const Vec& dy, int N, int C,
                           int H, int W, int K, int R, int S);

// --- The model ops (core/ops.h: Conv2d, Pool2d, Dropout, Resize) ---

// Convolution with stride and symmetric zero padding, cross-correlation:
//   y[n,k,i,j] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n,c, i*sh + r - ph, j*sw + s - pw]
// with x = 0 outside (H,W); floor mode: OH = (H + 2ph - R) / sh + 1, OW likewise.
struct ConvGeom {
  int N, C, H, W;  // x (N,C,H,W)
  int K, R, S;     // w (K,C,R,S), b (K)
  int sh = 1, sw = 1, ph = 0, pw = 0;
  int OH() const { return (H + 2 * ph - R) / sh + 1; }
  int OW() const { return (W + 2 * pw - S) / sw + 1; }
};
// Returns y (N,K,OH,OW).
Vec conv2d_forward(const Vec& x, const Vec& w, const Vec& b, const ConvGeom& g);
// dy (N,K,OH,OW); writes dx (N,C,H,W), dw (K,C,R,S), db (K), all overwritten.
void conv2d_backward(const Vec& x, const Vec& w, const Vec& dy, const ConvGeom& g, Vec& dx, Vec& dw,
                     Vec& db);

// Max or average pooling with any window, stride and symmetric padding, floor mode:
// OH = (H + 2ph - kh) / sh + 1. Max: padding never wins; ties go to the first maximum in window
// order (row by row, left to right). Average: window sum / (kh * kw), padding counted as zeros
// (count_include_pad).
struct PoolGeom {
  int N, C, H, W;  // x (N,C,H,W)
  int kh, kw, sh, sw, ph = 0, pw = 0;
  bool max = true;
  int OH() const { return (H + 2 * ph - kh) / sh + 1; }
  int OW() const { return (W + 2 * pw - kw) / sw + 1; }
};
// Returns y (N,C,OH,OW).
Vec pool2d_forward(const Vec& x, const PoolGeom& g);
// dy (N,C,OH,OW) -> dx (N,C,H,W); max pooling finds its maxima in x again.
Vec pool2d_backward(const Vec& x, const Vec& dy, const PoolGeom& g);

// Inverted dropout on x viewed as (N, F = size / N):
//   keep[n][f] = dropout_uniform(seed, e0 + n, f0 + f) >= p   (core/rng.h: the mask's definition)
//   y = keep ? x / (1 - p) : 0
Vec dropout_forward(const Vec& x, int N, float p, uint64_t seed, int64_t e0, int64_t f0);
// dx = keep ? dy / (1 - p) : 0, the same mask.
Vec dropout_backward(const Vec& dy, int N, float p, uint64_t seed, int64_t e0, int64_t f0);
// The mask alone, 1 = kept, (N,F).
std::vector<int> dropout_mask(int N, int64_t F, float p, uint64_t seed, int64_t e0, int64_t f0);

// Resizing x (N,C,H,W) to (N,C,OH,OW) with half-pixel centres: output index i maps to input
// coordinate (i + 0.5) * in / out - 0.5, computed here in double.
// Nearest: input floor((i + 0.5) * in / out). Bilinear: the coordinate clamped below at 0,
// interpolating x[floor] and x[floor + 1] (the last pixel repeated at the far edge).
Vec resize_nearest(const Vec& x, int N, int C, int H, int W, int OH, int OW);
Vec resize_bilinear(const Vec& x, int N, int C, int H, int W, int OH, int OW);

// Fully connected as in the book: y = x W + b with W stored (in, out).
// x is (N,in), W is (in,out), b is (out); returns y (N,out).
Vec linear_forward(const Vec& x, const Vec& W, const Vec& b, int N, int in, int out);
// dy is (N,out); writes dx (N,in), dW (in,out), db (out), all overwritten.
void linear_backward(const Vec& x, const Vec& W, const Vec& dy, int N, int in, int out, Vec& dx,
                     Vec& dW, Vec& db);

// Softmax cross-entropy SUMMED over the batch, with a log-sum-exp shifted by the row maximum.
// logits is (N,classes), labels (N) in [0, classes). Returns the summed loss; writes
// dlogits (N,classes) = softmax - onehot (the gradient of the sum) and correct = the number of rows
// whose argmax (ties -> lowest index) equals the label.
double softmax_xent(const Vec& logits, const std::vector<int>& labels, int N, int classes,
                    Vec& dlogits, int& correct);

// The book's LeNet on (N,1,28,28) input:
//   conv 3x3 1->20 (N,20,26,26), ReLU, avgpool (N,20,13,13),
//   conv 5x5 20->50 (N,50,9,9), ReLU, avgpool (N,50,4,4), flatten (N,800),
//   FC 800->128, ReLU, FC 128->10.
// Shapes: w1 (20,1,3,3), b1 (20), w2 (50,20,5,5), b2 (50), w3 (800,128), b3 (128), w4 (128,10),
// b4 (10); 129,068 numbers in all.
struct LeNetParams {
  Vec w1, b1, w2, b2, w3, b3, w4, b4;
};
inline constexpr int kLeNetParamCount = 129068;

// Small seeded generator (splitmix64 + Box-Muller) for tests; identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double uniform();  // [0, 1)
  double normal();   // N(0, 1)

 private:
  uint64_t state_;
};

// Deterministic init for tests only (NOT the product's init): weights N(0, scale^2), biases 0.
LeNetParams lenet_init(uint64_t seed, double scale = 0.01);

struct LeNetResult {
  double loss;        // summed over the batch
  int correct;        // rows whose argmax equals the label
  Vec logits;         // (N,10)
  LeNetParams grads;  // gradients of the summed loss
};
// images is (N,1,28,28), labels (N).
LeNetResult lenet_forward_backward(const LeNetParams& p, const Vec& images,
                                   const std::vector<int>& labels, int N);
// Forward only: the summed loss (what finite differences need).
double lenet_loss(const LeNetParams& p, const Vec& images, const std::vector<int>& labels, int N);

// The book's sgd: p -= lr * grad / batch_size, for every parameter.
void sgd(LeNetParams& p, const LeNetParams& grads, double lr, int batch_size);

// Flat view: the 8 tensors in book order w1,b1,w2,b2,w3,b3,w4,b4 concatenated.
Vec flatten(const LeNetParams& p);
LeNetParams unflatten(const Vec& flat);  // flat.size() must be kLeNetParamCount

}  // namespace paralab::ref
