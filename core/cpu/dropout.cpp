// CPU inverted dropout: loops over the device's OpenMP team. The mask is dropout_uniform's
// (core/rng.h), a pure function of global coordinates, so backward recomputes it from the last
// training forward's key instead of storing N*F flags (hashing costs less than reading them back
// for the sizes models use; oneDNN has no such op).
#include <cstring>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/rng.h"

namespace paralab::cpu {

namespace {

// out (N,F) = keep ? in * scale : 0, keep from (key, p); out may alias in.
void apply_mask(const float* in, float* out, int64_t n, int64_t f, float p, const DropoutKey& key) {
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const int64_t k = i * f + j;
      const bool keep =
          dropout_uniform(key.seed, key.example_offset + i, key.feature_offset + j) >= p;
      out[k] = keep ? in[k] * scale : 0.0f;
    }
}

class CpuDropout final : public Dropout {
 public:
  void forward(const Tensor& x, Tensor& y, float p, DropoutKey key, bool training) override {
    check_forward(x, y, p);
    if (training) {
      last_ = {key, p, x.shape()};
      has_forward_ = true;
    }
    if (!training || p == 0.0f) {
      if (y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.bytes());
      return;
    }
    apply_mask(x.f32(), y.f32(), x.dim(0), x.numel() / x.dim(0), p, key);
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    PARALAB_REQUIRE(has_forward_, "dropout backward: no training forward");
    PARALAB_REQUIRE(dy.shape() == last_.shape && dx.shape() == last_.shape,
                    "dropout backward: dy " + shape_string(dy.shape()) + " and dx " +
                        shape_string(dx.shape()) + " must have the training forward's shape " +
                        shape_string(last_.shape));
    if (last_.p == 0.0f) {
      if (dx.raw() != dy.raw()) std::memcpy(dx.raw(), dy.raw(), dy.bytes());
      return;
    }
    apply_mask(dy.f32(), dx.f32(), dy.dim(0), dy.numel() / dy.dim(0), last_.p, last_.key);
  }

 private:
  struct Last {
    DropoutKey key;
    float p = 0.0f;
    Shape shape;
  };
  Last last_;
  bool has_forward_ = false;
};

}  // namespace

std::unique_ptr<Dropout> make_dropout(CpuDevice&) { return std::make_unique<CpuDropout>(); }

}  // namespace paralab::cpu
