// The layer interface every backend implements: LeNet's op families, each a small object that a
// backend may specialise and cache per shape (oneDNN primitives, cuDNN descriptors and algorithms).
//
// Conventions: tensors are NCHW float32 on the op's device; backward ops OVERWRITE their gradient
// outputs (no accumulation); a null dx means "input gradient not needed" (the first layer).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

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
  static void check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx);

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

// Fully connected as in the book: y = x W + b with W stored (in, out).
class Linear {
 public:
  virtual ~Linear() = default;
  // x (N,in), w (in,out), b (out) -> y (N,out)
  virtual void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // dy (N,out) -> dx (N,in) unless null, dw (in,out), db (out)
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

class Ops {
 public:
  virtual ~Ops() = default;
  // What the ops chose so far, for the results' device list (CUDA: which convolution kernels,
  // and per shape cuDNN's algorithms or the own kernels' tiles); null where there is no choice.
  virtual nlohmann::json describe() const { return nullptr; }
  virtual std::unique_ptr<ConvReluPool> make_conv_relu_pool() = 0;
  virtual std::unique_ptr<Relu> make_relu() = 0;
  virtual std::unique_ptr<Linear> make_linear() = 0;
  virtual std::unique_ptr<SoftmaxXent> make_softmax_xent() = 0;

  // The book's sgd: params -= step * grads, step = lr / global batch size. Equal sizes.
  virtual void sgd(Tensor& params, const Tensor& grads, float step) = 0;
  // The same, with step read from a one-float tensor on this device when the work runs: a
  // captured step (CUDA graph) then takes whatever set_scalar wrote before its replay, so a
  // learning-rate schedule does not need a new capture per value.
  virtual void sgd(Tensor& params, const Tensor& grads, const Tensor& step) = 0;
  // t (one float on this device) = value, queued like other work: no host synchronisation.
  virtual void set_scalar(Tensor& t, float value) = 0;
  // dst += src, equal sizes (collectives' reduction).
  virtual void add_inplace(Tensor& dst, const Tensor& src) = 0;
  // Minibatch gather: for i in [0,count): x[i] = images[indices[offset+i]], y[i] = labels[...].
  // images (M,1,28,28), labels (M) int32, indices (>= offset+count) int32, all on this device.
  virtual void gather(const Tensor& images, const Tensor& labels, const Tensor& indices,
                      int64_t offset, int64_t count, Tensor& x, Tensor& y) = 0;
};

}  // namespace paralab
