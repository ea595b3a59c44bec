// CPU Ops: the factories plus the small element-wise ops (sgd, add, minibatch gather).
#include "core/cpu/cpu_ops.h"

#include <cstring>

#include "core/cpu/cpu_device.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

class CpuOps final : public Ops {
 public:
  explicit CpuOps(CpuDevice& device) : device_(device) {}

  std::unique_ptr<ConvReluPool> make_conv_relu_pool() override {
    return cpu::make_conv_relu_pool(device_);
  }
  std::unique_ptr<Relu> make_relu() override { return cpu::make_relu(device_); }
  std::unique_ptr<Linear> make_linear() override { return cpu::make_linear(device_); }
  std::unique_ptr<SoftmaxXent> make_softmax_xent() override {
    return cpu::make_softmax_xent(device_);
  }
  std::unique_ptr<Conv2d> make_conv2d(const Conv2dParams& params) override {
    return cpu::make_conv2d(device_, params);
  }
  std::unique_ptr<Pool2d> make_pool2d(const Pool2dParams& params) override {
    return cpu::make_pool2d(device_, params);
  }
  std::unique_ptr<Dropout> make_dropout() override { return cpu::make_dropout(device_); }
  std::unique_ptr<Resize> make_resize(ResizeMode mode) override {
    return cpu::make_resize(device_, mode);
  }

  void sgd(Tensor& params, const Tensor& grads, float step) override {
    PARALAB_REQUIRE(params.numel() == grads.numel(), "sgd: params and grads sizes differ");
    float* p = params.f32();
    const float* g = grads.f32();
    const int64_t n = params.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] -= step * g[i];
  }

  void sgd(Tensor& params, const Tensor& grads, const Tensor& step) override {
    PARALAB_REQUIRE(step.numel() == 1 && step.dtype() == DType::F32,
                    "sgd: step must be one float, got " + shape_string(step.shape()));
    sgd(params, grads, step.f32()[0]);
  }

  void set_scalar(Tensor& t, float value) override {
    PARALAB_REQUIRE(t.numel() == 1 && t.dtype() == DType::F32,
                    "set_scalar: needs one float, got " + shape_string(t.shape()));
    t.f32()[0] = value;
  }

  void add_inplace(Tensor& dst, const Tensor& src) override {
    PARALAB_REQUIRE(dst.numel() == src.numel(), "add: sizes differ");
    float* d = dst.f32();
    const float* s = src.f32();
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  }

  void gather(const Tensor& images, const Tensor& labels, const Tensor& indices, int64_t offset,
              int64_t count, Tensor& x, Tensor& y) override {
    const int64_t total = images.dim(0);
    const int64_t row = images.numel() / total;
    PARALAB_REQUIRE(offset >= 0 && offset + count <= indices.numel() && x.dim(0) == count &&
                        x.numel() == count * row && y.numel() == count,
                    "gather: batch of " + std::to_string(count) + " at " + std::to_string(offset) +
                        " does not fit");
    const int32_t* idx = indices.i32() + offset;
    const float* src = images.f32();
    const int32_t* lab = labels.i32();
    float* dx = x.f32();
    int32_t* dy = y.i32();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t k = idx[i];
      PARALAB_REQUIRE(k >= 0 && k < total, "gather: index " + std::to_string(k) +
                                               " outside the dataset of " + std::to_string(total));
      std::memcpy(dx + i * row, src + k * row, static_cast<std::size_t>(row) * sizeof(float));
      dy[i] = lab[k];
    }
  }

 private:
  CpuDevice& device_;
};

}  // namespace

std::unique_ptr<Ops> make_ops(CpuDevice& device) { return std::make_unique<CpuOps>(device); }

}  // namespace paralab::cpu
