// CUDA Ops: ReLU, softmax cross-entropy, SGD, add and gather, pooling, dropout
// and resize (own kernels), and the factory. The convolution stage is in conv_relu_pool.cpp
// (cuDNN) and fused_conv_relu_pool.cpp (own kernels), chosen by the device's "kernels" option;
// the plain convolution in conv2d.cpp (cuDNN); the linear layer in linear.cpp (cuBLASLt).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/conv_relu_pool_plan.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/dropout.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/kernels.h"
#include "core/cuda/pool2d.h"
#include "core/cuda/resize.h"

namespace paralab::cuda {

std::unique_ptr<ConvReluPool> make_cudnn_conv_relu_pool(CudaDevice& device, KernelLog& log);
std::unique_ptr<ConvReluPool> make_fused_conv_relu_pool(CudaDevice& device, KernelLog& log);

std::unique_ptr<Conv2d> make_cudnn_conv2d(CudaDevice& device, KernelLog& log,
                                          const Conv2dParams& params);
std::unique_ptr<Linear> make_cuda_linear(CudaDevice& device, KernelLog& log, bool relu);

namespace {

// "mixed": the own kernels for stages whose filters take the direct kernels (crp::direct: at most
// kDirectMaxCrs values, LeNet's conv1), cuDNN for the others (conv2). Each shape goes to one of
// the two, always the same, so a backward meets the forward it follows. On an H200 at batch 256
// the own conv1 stage took 131 us of kernel time a step against cuDNN's 148 without its bias
// gradient (which took 217 more), cuDNN's conv2 stage 256 without it against the own 1,003 (ncu,
// results/reference/h200-2026-12-04/ncu-step-*.txt).
class MixedConvReluPool final : public ConvReluPool {
 public:
  MixedConvReluPool(CudaDevice& d, KernelLog& log)
      : own_(make_fused_conv_relu_pool(d, log)), cudnn_(make_cudnn_conv_relu_pool(d, log)) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               bool training) override {
    pick(w).forward(x, w, b, y, training);
  }
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    pick(w).backward(x, w, dy, dx, dw, db);
  }

 private:
  ConvReluPool& pick(const Tensor& w) {
    PARALAB_REQUIRE(w.shape().size() == 4,
                    "conv_relu_pool: w must be (K,C,R,S), got " + shape_string(w.shape()));
    return w.dim(1) * w.dim(2) * w.dim(3) <= crp::kDirectMaxCrs ? *own_ : *cudnn_;
  }
  std::unique_ptr<ConvReluPool> own_, cudnn_;
};

class CudaRelu final : public Relu {
 public:
  explicit CudaRelu(CudaDevice& d) : d_(d) {}
  void forward(const Tensor& x, Tensor& y) override {
    PARALAB_REQUIRE(x.numel() == y.numel(), "relu forward: x and y sizes differ");
    relu_forward(x.f32(), y.f32(), x.numel(), d_.stream());
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PARALAB_REQUIRE(y.numel() == dy.numel() && dy.numel() == dx.numel(),
                    "relu backward: y, dy and dx sizes differ");
    relu_backward(y.f32(), dy.f32(), dx.f32(), y.numel(), d_.stream());
  }

 private:
  CudaDevice& d_;
};

class CudaSoftmaxXent final : public SoftmaxXent {
 public:
  explicit CudaSoftmaxXent(CudaDevice& d) : d_(d) {}
  void forward_backward(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                        Tensor& stats) override {
    PARALAB_REQUIRE(logits.ndim() == 2 && labels.numel() == logits.dim(0) && stats.numel() == 2,
                    "softmax_xent: logits " + shape_string(logits.shape()) + ", labels " +
                        shape_string(labels.shape()) + " and stats do not fit");
    PARALAB_REQUIRE(!dlogits || dlogits->shape() == logits.shape(),
                    "softmax_xent: dlogits shape differs from logits");
    softmax_xent(logits.f32(), labels.i32(), dlogits ? dlogits->f32() : nullptr, stats.f32(),
                 logits.dim(0), logits.dim(1), d_.stream());
  }

 private:
  CudaDevice& d_;
};

// Pooling on pool2d.cu's kernels; max pooling keeps, per input shape, where the last training
// forward found each maximum (int32 per output), which backward gathers from.
class CudaPool2d final : public Pool2d {
 public:
  CudaPool2d(CudaDevice& d, const Pool2dParams& params) : Pool2d(params), d_(d) {}
  void forward(const Tensor& x, Tensor& y, bool training) override {
    check_forward(x, y, params());
    const PoolGeometry g = geometry(x.shape(), y.shape());
    if (params().mode == PoolMode::Average) {
      avgpool2d_forward(x.f32(), y.f32(), g, d_.stream());
      return;
    }
    int32_t* argmax = nullptr;
    if (training) {
      Tensor& a = argmax_[x.shape()];
      if (!a.defined()) a = Tensor::empty(d_, y.shape(), DType::I32);
      argmax = a.i32();
    }
    maxpool2d_forward(x.f32(), y.f32(), argmax, g, d_.stream());
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    check_backward(dy, dx, params());
    const PoolGeometry g = geometry(dx.shape(), dy.shape());
    if (params().mode == PoolMode::Average) {
      avgpool2d_backward(dy.f32(), dx.f32(), g, d_.stream());
      return;
    }
    auto it = argmax_.find(dx.shape());
    PARALAB_REQUIRE(it != argmax_.end(),
                    "pool2d (max) backward: no training forward for x " + shape_string(dx.shape()));
    maxpool2d_backward(dy.f32(), it->second.i32(), dx.f32(), g, d_.stream());
  }

 private:
  PoolGeometry geometry(const Shape& x, const Shape& y) const {
    const Pool2dParams& q = params();
    return {x[0] * x[1], x[2],       x[3],       y[2],    y[3],   q.window_h,
            q.window_w,  q.stride_h, q.stride_w, q.pad_h, q.pad_w};
  }
  CudaDevice& d_;
  std::map<Shape, Tensor> argmax_;
};

// Dropout on dropout.cu's kernel; backward recomputes the mask from the last training forward's
// key (no mask in memory).
class CudaDropout final : public Dropout {
 public:
  explicit CudaDropout(CudaDevice& d) : d_(d) {}
  void forward(const Tensor& x, Tensor& y, float p, DropoutKey key, bool training) override {
    check_forward(x, y, p);
    if (training) {
      last_key_ = key;
      last_p_ = p;
      last_shape_ = x.shape();
    }
    if (!training || p == 0.0f) {
      if (y.raw() != x.raw()) d_.copy_on_device(y.raw(), x.raw(), x.bytes());
      return;
    }
    apply(x, y, p, key);
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    PARALAB_REQUIRE(!last_shape_.empty(), "dropout backward: no training forward");
    PARALAB_REQUIRE(dy.shape() == last_shape_ && dx.shape() == last_shape_,
                    "dropout backward: dy " + shape_string(dy.shape()) + " and dx " +
                        shape_string(dx.shape()) + " must have the training forward's shape " +
                        shape_string(last_shape_));
    if (last_p_ == 0.0f) {
      if (dx.raw() != dy.raw()) d_.copy_on_device(dx.raw(), dy.raw(), dy.bytes());
      return;
    }
    apply(dy, dx, last_p_, last_key_);
  }

 private:
  void apply(const Tensor& in, Tensor& out, float p, const DropoutKey& key) {
    // The scale rounded once on the host, as the CPU backend does: the same bits on both.
    const float scale = 1.0f / (1.0f - p);
    dropout_apply(in.f32(), out.f32(), in.dim(0), in.numel() / in.dim(0), p, scale, key.seed,
                  key.example_offset, key.feature_offset, d_.stream());
  }
  CudaDevice& d_;
  DropoutKey last_key_;
  float last_p_ = 0.0f;
  Shape last_shape_;  // empty until a training forward
};

class CudaResize final : public Resize {
 public:
  CudaResize(CudaDevice& d, ResizeMode mode) : Resize(mode), d_(d) {}
  void forward(const Tensor& x, Tensor& y) override {
    check_forward(x, y);
    resize_images(x.f32(), y.f32(), x.dim(0) * x.dim(1), x.dim(2), x.dim(3), y.dim(2), y.dim(3),
                  mode() == ResizeMode::Bilinear, d_.stream());
  }

 private:
  CudaDevice& d_;
};

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& d, std::string kernels) : d_(d), kernels_(std::move(kernels)) {}
  std::unique_ptr<ConvReluPool> make_conv_relu_pool() override {
    if (kernels_ == "fused") return make_fused_conv_relu_pool(d_, log_);
    if (kernels_ == "mixed") return std::make_unique<MixedConvReluPool>(d_, log_);
    return make_cudnn_conv_relu_pool(d_, log_);
  }
  nlohmann::json describe() const override {
    return {{"kernels", kernels_}, {"choices", log_.entries()}};
  }
  void forget_choices_since(const nlohmann::json& before) override {
    log_.restore(before.is_object() ? before.value("choices", nlohmann::json::object())
                                    : nlohmann::json::object());
  }
  std::unique_ptr<Relu> make_relu() override { return std::make_unique<CudaRelu>(d_); }
  std::unique_ptr<Linear> make_linear() override { return make_cuda_linear(d_, log_, false); }
  std::unique_ptr<Linear> make_linear_relu() override { return make_cuda_linear(d_, log_, true); }
  std::unique_ptr<SoftmaxXent> make_softmax_xent() override {
    return std::make_unique<CudaSoftmaxXent>(d_);
  }
  std::unique_ptr<Conv2d> make_conv2d(const Conv2dParams& params) override {
    return make_cudnn_conv2d(d_, log_, params);
  }
  std::unique_ptr<Pool2d> make_pool2d(const Pool2dParams& params) override {
    return std::make_unique<CudaPool2d>(d_, params);
  }
  std::unique_ptr<Dropout> make_dropout() override { return std::make_unique<CudaDropout>(d_); }
  std::unique_ptr<Resize> make_resize(ResizeMode mode) override {
    return std::make_unique<CudaResize>(d_, mode);
  }
  void sgd(Tensor& params, const Tensor& grads, float step) override {
    PARALAB_REQUIRE(params.numel() == grads.numel(), "sgd: params and grads sizes differ");
    d_.capture_fault_point();
    cuda::sgd(params.f32(), grads.f32(), step, params.numel(), d_.stream());
  }
  void sgd(Tensor& params, const Tensor& grads, const Tensor& step) override {
    PARALAB_REQUIRE(params.numel() == grads.numel(), "sgd: params and grads sizes differ");
    PARALAB_REQUIRE(step.numel() == 1 && step.dtype() == DType::F32,
                    "sgd: step must be one float, got " + shape_string(step.shape()));
    d_.capture_fault_point();
    cuda::sgd_at(params.f32(), grads.f32(), step.f32(), params.numel(), d_.stream());
  }
  void set_scalar(Tensor& t, float value) override {
    PARALAB_REQUIRE(t.numel() == 1 && t.dtype() == DType::F32,
                    "set_scalar: needs one float, got " + shape_string(t.shape()));
    cuda::set_scalar(t.f32(), value, d_.stream());
  }
  static_assert(static_cast<std::size_t>(cuda::kSetScalarsMax) == kMaxScalars);
  void set_scalars(Tensor& t, std::span<const float> values) override {
    PARALAB_REQUIRE(t.dtype() == DType::F32 && t.numel() == static_cast<int64_t>(values.size()) &&
                        values.size() <= kMaxScalars && !values.empty(),
                    "set_scalars: " + std::to_string(values.size()) + " values (1 to " +
                        std::to_string(kMaxScalars) + ") for a tensor " + shape_string(t.shape()));
    cuda::set_scalars(t.f32(), values.data(), static_cast<int>(values.size()), d_.stream());
  }
  void add_inplace(Tensor& dst, const Tensor& src) override {
    PARALAB_REQUIRE(dst.numel() == src.numel(), "add: sizes differ");
    // src may be a peer GPU's buffer (the transport's receive-and-add): a kernel reads it
    // directly with peer access, or a local copy of it without.
    const auto* x = static_cast<const float*>(d_.readable(src.raw(), src.bytes()));
    cuda::add_inplace(dst.f32(), x, dst.numel(), d_.stream());
  }
  void gather(const Tensor& images, const Tensor& labels, const Tensor& indices, int64_t offset,
              int64_t count, Tensor& x, Tensor& y) override {
    const int64_t row = images.numel() / images.dim(0);
    PARALAB_REQUIRE(offset >= 0 && offset + count <= indices.numel() && x.dim(0) == count &&
                        x.numel() == count * row && y.numel() == count,
                    "gather: batch of " + std::to_string(count) + " at " + std::to_string(offset) +
                        " does not fit");
    d_.capture_fault_point();
    gather_rows(images.f32(), labels.i32(), indices.i32() + offset, count, row, x.f32(), y.i32(),
                d_.stream());
  }

 private:
  CudaDevice& d_;
  std::string kernels_;
  KernelLog log_;
};

}  // namespace

const std::vector<std::string>& known_kernels() {
  static const std::vector<std::string> names = {"cudnn", "fused", "mixed"};
  return names;
}

std::unique_ptr<Ops> make_ops(CudaDevice& device, const std::string& kernels) {
  const auto& known = known_kernels();
  if (std::find(known.begin(), known.end(), kernels) == known.end())
    throw Error("cuda: unknown kernels \"" + kernels + "\" (known: cudnn, fused, mixed)");
  return std::make_unique<CudaOps>(device, kernels);
}

}  // namespace paralab::cuda
