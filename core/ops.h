// The layer interface every backend implements: the models' op families, each a small object that
// a backend may specialise and cache per shape (oneDNN primitives, cuDNN descriptors and
// algorithms). LeNet's fused stage (ConvReluPool) is the fast path where its shapes match; Conv2d,
// Pool2d, Relu, Dropout, Linear and Resize compose any other model (AlexNet).
//
// Conventions: tensors are NCHW float32 on the op's device; backward ops OVERWRITE their gradient
// outputs (no accumulation); a null dx means "input gradient not needed" (the first layer). Every
// op is checked against the double-precision reference (tests/reference) by tests/test_backends.cpp
// and tests/test_model_ops.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "core/tensor.h"

namespace paralab {

// One convolutional stage of LeNet: y = avgpool2x2(relu(conv(x) + b)), the conv a 2-D
// cross-correlation with stride 1 and no padding, the pooling 2x2 stride 2 in floor mode
// (9x9 -> 4x4 drops the last row and column).
//
// Why one op and not three: the backend keeps the stage's intermediate activation (N,K,OH,OW) in
// whatever layout its kernels prefer (oneDNN's blocked nChw16c, cuDNN's fused epilogues) and only
// the pooled output, 4x smaller, crosses the interface in NCHW. The op keeps that activation
// from the last training forward for backward, like cuDNN's reserve space.
class ConvReluPool {
 public:
  // The checks every implementation makes: x (N,C,H,W) and w (K,C,R,S) fit, with a conv output
  // of at least 2x2. Returns y's shape (N,K,(H-R+1)/2,(W-S+1)/2); throws Error otherwise.
  static Shape output_shape(const Tensor& x, const Tensor& w);
  // The argument checks of forward() and backward(), the same for every backend.
  static void check_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
  static void check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                             const Tensor& dw, const Tensor& db);

  virtual ~ConvReluPool() = default;
  // x (N,C,H,W), w (K,C,R,S), b (K) -> y (N,K,(H-R+1)/2,(W-S+1)/2)
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                       bool training) = 0;
  // For the last training forward, with the same x and w: dy (N,K,PH,PW) -> dx (N,C,H,W) unless
  // null, dw (K,C,R,S), db (K).
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                        Tensor& db) = 0;
};

// ReLU; y may alias x.
class Relu {
 public:
  virtual ~Relu() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  // dx = dy where y > 0 else 0; dx may alias dy.
  virtual void backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

// Fully connected as in the book: y = x W + b with W stored (in, out). Made by
// Ops::make_linear_relu(), the layer with its ReLU: y = max(0, x W + b), and backward's dy is the
// gradient of that y, which flows where the last forward's y > 0 (the op keeps that y, as
// ConvReluPool keeps its activation; dy itself is not changed).
class Linear {
 public:
  virtual ~Linear() = default;
  // x (N,in), w (in,out), b (out) -> y (N,out)
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dy (N,out) -> dx (N,in) unless null, dw (in,out), db (out); with the ReLU, for the last
  // forward, with the same x and w.
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                        Tensor& db) = 0;
};

// Softmax cross-entropy summed over the batch, fused with its gradient.
class SoftmaxXent {
 public:
  virtual ~SoftmaxXent() = default;
  // logits (N,classes), labels (N) int32 -> dlogits (N,classes) = softmax - onehot (gradient of
  // the summed loss; may be null for evaluation), stats (2) = {summed loss, correct count}.
  virtual void forward_backward(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                Tensor& stats) = 0;
};

// Stride and zero padding of a 2-D convolution (the same padding on both sides of a dimension).
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  static Conv2dParams square(int64_t stride, int64_t pad) { return {stride, stride, pad, pad}; }
};

// 2-D cross-correlation with bias, any kernel (R,S), stride and symmetric zero padding:
//   y[n,k,i,j] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n,c, i*sh + r - ph, j*sw + s - pw]
// with x = 0 outside (H,W). Floor mode: OH = (H + 2ph - R) / sh + 1, OW likewise; input rows and
// columns that no full window reaches are not read (their gradient is 0).
class Conv2d {
 public:
  // Throws Error unless strides >= 1 and paddings >= 0.
  static void check_params(const Conv2dParams& p);
  // x (N,C,H,W), w (K,C,R,S) -> y's shape (N,K,OH,OW); Error naming the mismatch otherwise
  // (rank, channels, a kernel larger than the padded input).
  static Shape output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);
  // The argument checks of forward() and backward(), the same for every backend.
  static void check_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                            const Conv2dParams& p);
  static void check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                             const Tensor& dw, const Tensor& db, const Conv2dParams& p);

  explicit Conv2d(const Conv2dParams& p) : params_(p) { check_params(p); }
  virtual ~Conv2d() = default;
  const Conv2dParams& params() const { return params_; }
  // x (N,C,H,W), w (K,C,R,S), b (K) -> y (N,K,OH,OW)
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dy (N,K,OH,OW) -> dx (N,C,H,W) unless null, dw (K,C,R,S), db (K). Needs no state from
  // forward: x and w are passed again.
  virtual void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                        Tensor& db) = 0;

 private:
  Conv2dParams params_;
};

enum class PoolMode { Max, Average };

// "max" or "avg"; an unknown name is an Error listing the known ones.
PoolMode pool_mode_from_name(const std::string& name);
const char* pool_mode_name(PoolMode mode);

// Window, stride and symmetric padding of a 2-D pooling.
struct Pool2dParams {
  PoolMode mode = PoolMode::Max;
  int64_t window_h = 2, window_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  static Pool2dParams square(PoolMode mode, int64_t window, int64_t stride, int64_t pad = 0) {
    return {mode, window, window, stride, stride, pad, pad};
  }
};

// 2-D max or average pooling in floor mode: OH = (H + 2ph - window_h) / sh + 1, OW likewise (a
// last partial window is dropped, and the rows and columns only it would read get gradient 0).
//  - Max: padding never wins (it is -infinity). Ties go to the FIRST maximum in window order
//    (row by row, left to right), forward and backward, on every backend and in the reference.
//  - Average: the sum over the window divided by window_h * window_w, padding counted as zeros
//    (PyTorch's default count_include_pad=True; in floor mode no window reaches past the padding,
//    so the divisor is always the full window).
// Padding is at most half the window (as PyTorch requires), so every window holds an input.
class Pool2d {
 public:
  // Throws Error unless windows and strides >= 1 and 0 <= padding <= window / 2.
  static void check_params(const Pool2dParams& p);
  // x (N,C,H,W) -> y's shape (N,C,OH,OW); Error if the window is larger than the padded input.
  static Shape output_shape(const Shape& x, const Pool2dParams& p);
  static void check_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p);
  // dy (N,C,OH,OW) must be the output shape of dx (N,C,H,W).
  static void check_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p);

  explicit Pool2d(const Pool2dParams& p) : params_(p) { check_params(p); }
  virtual ~Pool2d() = default;
  const Pool2dParams& params() const { return params_; }
  // x (N,C,H,W) -> y (N,C,OH,OW). A training forward keeps what backward needs (max: where each
  // maximum was), per input shape; other forwards leave it alone.
  virtual void forward(const Tensor& x, Tensor& y, bool training) = 0;
  // dy (N,C,OH,OW) -> dx (N,C,H,W), for the last training forward of dx's shape (max) or any
  // (average).
  virtual void backward(const Tensor& dy, Tensor& dx) = 0;

 private:
  Pool2dParams params_;
};

// Where a dropout mask sits in the global batch: the mask is a pure function of (seed, global
// example, global feature) (dropout_uniform in core/rng.h), so every strategy and every shard
// computes the same mask. A rank holding examples [e0, e1) passes example_offset = e0; a rank
// holding channels [c0, c1) of (C,H,W) examples passes feature_offset = c0 * H * W.
struct DropoutKey {
  uint64_t seed = 0;
  int64_t example_offset = 0;
  int64_t feature_offset = 0;
};

// Inverted dropout. x is viewed as (N,F) with N = x.dim(0) and F = numel / N (any shape):
//   keep[n][f] = dropout_uniform(seed, example_offset + n, feature_offset + f) >= p
//   y = keep ? x * (1 / (1 - p)) : 0     (the scale rounded to float once, on the host)
class Dropout {
 public:
  // Error unless 0 <= p < 1 and x and y have the same shape with at least one dimension.
  static void check_forward(const Tensor& x, const Tensor& y, float p);

  virtual ~Dropout() = default;
  // x (N,...) -> y (same shape); y may alias x. Not training, or p == 0: y = x.
  virtual void forward(const Tensor& x, Tensor& y, float p, DropoutKey key, bool training) = 0;
  // dy -> dx with the last training forward's mask and scale (dx = dy where that forward had
  // p == 0); dy and dx have that forward's shape; dx may alias dy. The mask is recomputed from
  // the key, not stored.
  virtual void backward(const Tensor& dy, Tensor& dx) = 0;
};

enum class ResizeMode { Nearest, Bilinear };

// "nearest" or "bilinear"; an unknown name is an Error listing the known ones.
ResizeMode resize_mode_from_name(const std::string& name);
const char* resize_mode_name(ResizeMode mode);

// Resizing images to any size (the book feeds AlexNet Fashion-MNIST upsampled 28x28 -> 224x224),
// forward only: it is applied to the input images, which need no gradient. Half-pixel centres
// (PyTorch's align_corners=False): output pixel i of `out` maps to input coordinate
// (i + 0.5) * in / out - 0.5.
//  - Nearest: the input pixel whose cell holds that centre, floor((i + 0.5) * in / out), computed
//    in integers (PyTorch's "nearest-exact"; for integer upscaling factors such as 28 -> 224 it
//    equals PyTorch's "nearest").
//  - Bilinear: the coordinate (float, clamped below at 0) interpolates the two nearest input
//    pixels per dimension, the last pixel repeating at the far edge (PyTorch's
//    interpolate(mode="bilinear", align_corners=False); for upscaling also PIL's, which
//    torchvision's Resize uses).
class Resize {
 public:
  // x (N,C,H,W) and y (N,C,OH,OW), all sizes >= 1.
  static void check_forward(const Tensor& x, const Tensor& y);

  explicit Resize(ResizeMode mode) : mode_(mode) {}
  virtual ~Resize() = default;
  ResizeMode mode() const { return mode_; }
  // x (N,C,H,W) -> y (N,C,OH,OW), the output size taken from y.
  virtual void forward(const Tensor& x, Tensor& y) = 0;

 private:
  ResizeMode mode_;
};

class Ops {
 public:
  virtual ~Ops() = default;
  // What the ops chose so far, for the results' device list (CUDA: which convolution kernels,
  // and per shape cuDNN's algorithms or the own kernels' tiles); null where there is no choice.
  virtual nlohmann::json describe() const { return nullptr; }
  // Forgets the choices made since describe() returned `before`: a pass over shapes the device
  // will not train with (layer_split's profiling of every layer on its first device) leaves no
  // trace in what the results say the device used.
  virtual void forget_choices_since(const nlohmann::json& before) { (void)before; }
  virtual std::unique_ptr<ConvReluPool> make_conv_relu_pool() = 0;
  virtual std::unique_ptr<Relu> make_relu() = 0;
  virtual std::unique_ptr<Linear> make_linear() = 0;
  // A linear layer and its ReLU as one op (see Linear). The backends fuse what they can (CUDA:
  // the bias and the ReLU in the GEMM's epilogue); this default runs make_linear()'s op and
  // make_relu()'s one after the other, with the same bits as the two ops called separately.
  virtual std::unique_ptr<Linear> make_linear_relu();
  virtual std::unique_ptr<SoftmaxXent> make_softmax_xent() = 0;
  // The model ops (see their classes); bad parameters are an Error here, not at the first call.
  virtual std::unique_ptr<Conv2d> make_conv2d(const Conv2dParams& params) = 0;
  virtual std::unique_ptr<Pool2d> make_pool2d(const Pool2dParams& params) = 0;
  virtual std::unique_ptr<Dropout> make_dropout() = 0;
  virtual std::unique_ptr<Resize> make_resize(ResizeMode mode) = 0;

  // The book's sgd: params -= step * grads, step = lr / global batch size. Equal sizes.
  virtual void sgd(Tensor& params, const Tensor& grads, float step) = 0;
  // The same, with step read from a one-float tensor on this device when the work runs: a
  // captured step (CUDA graph) then takes whatever set_scalar wrote before its replay, so a
  // learning-rate schedule does not need a new capture per value.
  virtual void sgd(Tensor& params, const Tensor& grads, const Tensor& step) = 0;
  // t (one float on this device) = value, queued like other work: no host synchronisation.
  virtual void set_scalar(Tensor& t, float value) = 0;
  // t (values.size() floats on this device) = values, queued like other work: the SGD steps of a
  // graph that holds several training steps, set before each launch. This default sets them one
  // by one (set_scalar on each float); CUDA sets up to kMaxScalars in one kernel.
  static constexpr std::size_t kMaxScalars = 64;
  virtual void set_scalars(Tensor& t, std::span<const float> values);
  // dst += src, equal sizes (collectives' reduction).
  virtual void add_inplace(Tensor& dst, const Tensor& src) = 0;
  // Minibatch gather: for i in [0,count): x[i] = images[indices[offset+i]], y[i] = labels[...].
  // images (M,1,28,28), labels (M) int32, indices (>= offset+count) int32, all on this device.
  virtual void gather(const Tensor& images, const Tensor& labels, const Tensor& indices,
                      int64_t offset, int64_t count, Tensor& x, Tensor& y) = 0;
};

}  // namespace paralab
