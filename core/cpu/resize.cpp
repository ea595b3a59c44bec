// CPU image resizing (nearest, bilinear): loops over the device's OpenMP team with the
// coordinate rules of core/resize_coords.h, shared with the CUDA kernel. Not oneDNN's resampling:
// its nearest rounds a float coordinate, where ours is exact integer arithmetic.
#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"
#include "core/resize_coords.h"

namespace paralab::cpu {

namespace {

class CpuResize final : public Resize {
 public:
  using Resize::Resize;

  void forward(const Tensor& x, Tensor& y) override {
    check_forward(x, y);
    const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3), oh = y.dim(2),
                  ow = y.dim(3);
    const float* in = x.f32();
    float* out = y.f32();
    const bool nearest = mode() == ResizeMode::Nearest;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t i = 0; i < oh; ++i) {
        const float* src = in + pl * h * w;
        float* dst = out + (pl * oh + i) * ow;
        if (nearest) {
          const float* row = src + resize_nearest_index(i, h, oh) * w;
          for (int64_t j = 0; j < ow; ++j) dst[j] = row[resize_nearest_index(j, w, ow)];
          continue;
        }
        const ResizeTap th = resize_linear_tap(i, h, oh);
        const float* lo = src + th.lo * w;
        const float* hi = src + th.hi * w;
        for (int64_t j = 0; j < ow; ++j) {
          const ResizeTap tw = resize_linear_tap(j, w, ow);
          // PyTorch's order of operations (upsample_bilinear2d).
          dst[j] = (1.0f - th.frac) * ((1.0f - tw.frac) * lo[tw.lo] + tw.frac * lo[tw.hi]) +
                   th.frac * ((1.0f - tw.frac) * hi[tw.lo] + tw.frac * hi[tw.hi]);
        }
      }
  }
};

}  // namespace

std::unique_ptr<Resize> make_resize(CpuDevice&, ResizeMode mode) {
  return std::make_unique<CpuResize>(mode);
}

}  // namespace paralab::cpu
