// CPU avgpool2d: oneDNN pooling (2x2, stride 2, floor mode) on plain NCHW, cached per shape.
#include <map>
#include <tuple>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

using dnnl::memory;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

struct PoolPlan {
  dnnl::pooling_forward fwd;
  dnnl::pooling_backward bwd;
  memory x, y;  // plain NCHW over the caller's buffers
};

class CpuAvgPool2d final : public AvgPool2d {
 public:
  explicit CpuAvgPool2d(CpuDevice& device) : device_(device) {}

  void forward(const Tensor& x, Tensor& y) override {
    PoolPlan& p = plan(x.shape(), y.shape());
    PARALAB_DNNL("avgpool2d forward", {
      p.x.set_data_handle(x.raw());
      p.y.set_data_handle(y.raw());
      p.fwd.execute(device_.stream(), {{DNNL_ARG_SRC, p.x}, {DNNL_ARG_DST, p.y}});
    });
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    PoolPlan& p = plan(dx.shape(), dy.shape());
    PARALAB_DNNL("avgpool2d backward", {
      p.y.set_data_handle(dy.raw());
      p.x.set_data_handle(dx.raw());
      p.bwd.execute(device_.stream(), {{DNNL_ARG_DIFF_DST, p.y}, {DNNL_ARG_DIFF_SRC, p.x}});
    });
  }

 private:
  PoolPlan& plan(const Shape& in, const Shape& out) {
    PARALAB_REQUIRE(in.size() == 4 && in[2] >= 2 && in[3] >= 2,
                    "avgpool2d: input " + shape_string(in) + " is not (N,C,H>=2,W>=2)");
    Shape expect{in[0], in[1], in[2] / 2, in[3] / 2};
    PARALAB_REQUIRE(out == expect, "avgpool2d: output " + shape_string(out) + ", expected " +
                                       shape_string(expect) + " for input " + shape_string(in));
    Key key{in[0], in[1], in[2], in[3]};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    const memory::dims src{in[0], in[1], in[2], in[3]};
    const memory::dims dst{out[0], out[1], out[2], out[3]};
    const memory::dims kernel{2, 2}, strides{2, 2}, pad_l{0, 0};
    // Floor mode: with an odd extent the right padding is negative so that oneDNN's output size
    // (H - 2 + pad_l + pad_r) / 2 + 1 equals floor(H / 2) exactly and the last row is unused.
    const memory::dims pad_r{(dst[2] - 1) * 2 + 2 - src[2], (dst[3] - 1) * 2 + 2 - src[3]};
    PoolPlan p;
    PARALAB_DNNL("avgpool2d plan", {
      auto& eng = device_.engine();
      const auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::pooling_forward::primitive_desc fwd_pd(
          dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, alg, plain_desc(src),
                                      plain_desc(dst), strides, kernel, pad_l, pad_r),
          eng);
      dnnl::pooling_backward::primitive_desc bwd_pd(
          dnnl::pooling_backward::desc(alg, plain_desc(src), plain_desc(dst), strides, kernel,
                                       pad_l, pad_r),
          eng, fwd_pd);
      p.fwd = dnnl::pooling_forward(fwd_pd);
      p.bwd = dnnl::pooling_backward(bwd_pd);
      p.x = memory(plain_desc(src), eng, DNNL_MEMORY_NONE);
      p.y = memory(plain_desc(dst), eng, DNNL_MEMORY_NONE);
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, PoolPlan> plans_;
};

}  // namespace

std::unique_ptr<AvgPool2d> make_avgpool2d(CpuDevice& device) {
  return std::make_unique<CpuAvgPool2d>(device);
}

}  // namespace paralab::cpu
