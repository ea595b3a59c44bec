// CPU softmax cross-entropy (summed over the batch) fused with its gradient and correct count.
#include <cmath>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

class CpuSoftmaxXent final : public SoftmaxXent {
 public:
  void forward_backward(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                        Tensor& stats) override {
    PARALAB_REQUIRE(logits.ndim() == 2 && labels.numel() == logits.dim(0),
                    "softmax_xent: logits " + shape_string(logits.shape()) + " and labels " +
                        shape_string(labels.shape()) + " do not fit");
    PARALAB_REQUIRE(!dlogits || dlogits->shape() == logits.shape(),
                    "softmax_xent: dlogits shape differs from logits");
    PARALAB_REQUIRE(stats.numel() == 2, "softmax_xent: stats must hold 2 values");
    const int64_t n = logits.dim(0), classes = logits.dim(1);
    const float* z = logits.f32();
    const int32_t* y = labels.i32();
    float* dz = dlogits ? dlogits->f32() : nullptr;
    double loss = 0.0;
    int64_t correct = 0;
    // Rows are independent; the reduction is over doubles, so thread count barely matters, and
    // the loss is reported, never differentiated.
#pragma omp parallel for schedule(static) reduction(+ : loss, correct)
    for (int64_t i = 0; i < n; ++i) {
      const float* row = z + i * classes;
      const int32_t label = y[i];
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c)
        if (row[c] > row[best]) best = c;
      const float m = row[best];
      float sum = 0.0f;
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - m);
      loss += static_cast<double>(std::log(sum) + m - row[label]);
      correct += best == label;
      if (dz) {
        float* drow = dz + i * classes;
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < classes; ++c) drow[c] = std::exp(row[c] - m) * inv;
        drow[label] -= 1.0f;
      }
    }
    float* s = stats.f32();
    s[0] = static_cast<float>(loss);
    s[1] = static_cast<float>(correct);
  }
};

}  // namespace

std::unique_ptr<SoftmaxXent> make_softmax_xent(CpuDevice&) {
  return std::make_unique<CpuSoftmaxXent>();
}

}  // namespace paralab::cpu
