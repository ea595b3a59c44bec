// CUDA Ops: ReLU, linear (cuBLAS), softmax cross-entropy, SGD, add and gather (own kernels),
// and the factory. The convolution stage is in conv_relu_pool.cpp (cuDNN) and
// fused_conv_relu_pool.cpp (own kernels), chosen by the device's "kernels" option.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/kernels.h"

namespace paralab::cuda {

std::unique_ptr<ConvReluPool> make_cudnn_conv_relu_pool(CudaDevice& device, KernelLog& log);
std::unique_ptr<ConvReluPool> make_fused_conv_relu_pool(CudaDevice& device, KernelLog& log);

namespace {

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

// Row-major y (N,out) = x (N,in) W (in,out) is column-major y^T = W^T x^T: cuBLAS sees the
// row-major buffers as their transposes, so no data moves.
class CudaLinear final : public Linear {
 public:
  explicit CudaLinear(CudaDevice& d) : d_(d) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int n = rows(x, w), in = static_cast<int>(w.dim(0)), out = static_cast<int>(w.dim(1));
    PARALAB_REQUIRE(y.shape() == (Shape{n, out}),
                    "linear forward: y " + shape_string(y.shape()) + " does not fit");
    const float one = 1.0f, zero = 0.0f;
    PARALAB_CUBLAS(cublasSgemm(d_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, out, n, in, &one, w.f32(),
                               out, x.f32(), in, &zero, y.f32(), out));
    add_bias_rows(y.f32(), b.f32(), n, out, d_.stream());
  }
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    const int n = rows(x, w), in = static_cast<int>(w.dim(0)), out = static_cast<int>(w.dim(1));
    PARALAB_REQUIRE(dy.shape() == (Shape{n, out}),
                    "linear backward: dy " + shape_string(dy.shape()) + " does not fit");
    const float one = 1.0f, zero = 0.0f;
    // dW (in,out) = x^T dy  ->  column-major dW^T (out,in) = dy^T (out,N) x (N,in)
    PARALAB_CUBLAS(cublasSgemm(d_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, out, in, n, &one, dy.f32(),
                               out, x.f32(), in, &zero, dw.f32(), out));
    column_sums(dy.f32(), db.f32(), n, out, d_.stream());
    if (!dx) return;
    // dx (N,in) = dy W^T  ->  column-major dx^T (in,N) = W (in,out) dy^T (out,N)
    PARALAB_CUBLAS(cublasSgemm(d_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, in, n, out, &one, w.f32(),
                               out, dy.f32(), out, &zero, dx->f32(), in));
  }

 private:
  static int rows(const Tensor& x, const Tensor& w) {
    PARALAB_REQUIRE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(0),
                    "linear: x " + shape_string(x.shape()) + " and W " + shape_string(w.shape()) +
                        " do not fit");
    return static_cast<int>(x.dim(0));
  }
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

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& d, std::string kernels) : d_(d), kernels_(std::move(kernels)) {}
  std::unique_ptr<ConvReluPool> make_conv_relu_pool() override {
    return kernels_ == "fused" ? make_fused_conv_relu_pool(d_, log_)
                               : make_cudnn_conv_relu_pool(d_, log_);
  }
  nlohmann::json describe() const override {
    return {{"kernels", kernels_}, {"choices", log_.entries()}};
  }
  std::unique_ptr<Relu> make_relu() override { return std::make_unique<CudaRelu>(d_); }
  std::unique_ptr<Linear> make_linear() override { return std::make_unique<CudaLinear>(d_); }
  std::unique_ptr<SoftmaxXent> make_softmax_xent() override {
    return std::make_unique<CudaSoftmaxXent>(d_);
  }
  void sgd(Tensor& params, const Tensor& grads, float step) override {
    PARALAB_REQUIRE(params.numel() == grads.numel(), "sgd: params and grads sizes differ");
    cuda::sgd(params.f32(), grads.f32(), step, params.numel(), d_.stream());
  }
  void sgd(Tensor& params, const Tensor& grads, const Tensor& step) override {
    PARALAB_REQUIRE(params.numel() == grads.numel(), "sgd: params and grads sizes differ");
    PARALAB_REQUIRE(step.numel() == 1 && step.dtype() == DType::F32,
                    "sgd: step must be one float, got " + shape_string(step.shape()));
    cuda::sgd_at(params.f32(), grads.f32(), step.f32(), params.numel(), d_.stream());
  }
  void set_scalar(Tensor& t, float value) override {
    PARALAB_REQUIRE(t.numel() == 1 && t.dtype() == DType::F32,
                    "set_scalar: needs one float, got " + shape_string(t.shape()));
    cuda::set_scalar(t.f32(), value, d_.stream());
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
  static const std::vector<std::string> names = {"cudnn", "fused"};
  return names;
}

std::unique_ptr<Ops> make_ops(CudaDevice& device, const std::string& kernels) {
  const auto& known = known_kernels();
  if (std::find(known.begin(), known.end(), kernels) == known.end())
    throw Error("cuda: unknown kernels \"" + kernels + "\" (known: cudnn, fused)");
  return std::make_unique<CudaOps>(device, kernels);
}

}  // namespace paralab::cuda
