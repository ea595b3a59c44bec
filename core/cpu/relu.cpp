// CPU ReLU: element-wise loops over the device's OpenMP team (memory-bound; oneDNN adds nothing).
#include <algorithm>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

class CpuRelu final : public Relu {
 public:
  void forward(const Tensor& x, Tensor& y) override {
    PARALAB_REQUIRE(x.numel() == y.numel(), "relu forward: x " + shape_string(x.shape()) +
                                                " and y " + shape_string(y.shape()) + " differ");
    const float* in = x.f32();
    float* out = y.f32();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = std::max(in[i], 0.0f);
  }

  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PARALAB_REQUIRE(y.numel() == dy.numel() && dy.numel() == dx.numel(),
                    "relu backward: y, dy and dx sizes differ");
    const float* out = y.f32();
    const float* g = dy.f32();
    float* d = dx.f32();
    const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = out[i] > 0.0f ? g[i] : 0.0f;
  }
};

}  // namespace

std::unique_ptr<Relu> make_relu(CpuDevice&) { return std::make_unique<CpuRelu>(); }

}  // namespace paralab::cpu
