// CPU 2-D convolution (stride, padding, bias) on oneDNN: the layouts are oneDNN's choice
// (format_tag::any), x, w, y and the gradients reordered from and to NCHW only where they differ;
// primitives, reorders and buffers made once per input shape. Floor mode needs no special
// padding: oneDNN's output size (H + 2ph - R) / sh + 1 rounds down like ours.
#include <map>
#include <tuple>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/cpu/onednn_api.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

using dnnl::memory;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Conv2dPlan {
  Primitive fwd;
  Primitive bwd_data;
  Primitive bwd_weights;
  memory bias, d_bias;
  Staged f_src, f_w, f_y;    // forward: x, w in; y out
  Staged w_src, w_dy, w_dw;  // backward weights: x, dy in; dw out
  Staged d_dy, d_w, d_dx;    // backward data: dy, w in; dx out
  bool dy_shared = false;    // both backward primitives take dy in one layout: reorder it once
};

memory::desc any(const memory::dims& d) {
  return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
}

class CpuConv2d final : public Conv2d {
 public:
  CpuConv2d(CpuDevice& device, const Conv2dParams& params) : Conv2d(params), device_(device) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    check_forward(x, w, b, y, params());
    Conv2dPlan& p = plan(x, w);
    PARALAB_DNNL("conv2d forward", {
      p.bias.set_data_handle(b.raw());
      p.fwd.execute(device_.stream(), {{DNNL_ARG_SRC, p.f_src.in(x.raw())},
                                       {DNNL_ARG_WEIGHTS, p.f_w.in(w.raw())},
                                       {DNNL_ARG_BIAS, p.bias},
                                       {DNNL_ARG_DST, p.f_y.out(y.raw())}});
      p.f_y.finish();
    });
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db, params());
    Conv2dPlan& p = plan(x, w);
    auto& s = device_.stream();
    PARALAB_DNNL("conv2d backward", {
      const memory dy_w = p.w_dy.in(dy.raw());
      p.d_bias.set_data_handle(db.raw());
      p.bwd_weights.execute(s, {{DNNL_ARG_SRC, p.w_src.in(x.raw())},
                                {DNNL_ARG_DIFF_DST, dy_w},
                                {DNNL_ARG_DIFF_WEIGHTS, p.w_dw.out(dw.raw())},
                                {DNNL_ARG_DIFF_BIAS, p.d_bias}});
      p.w_dw.finish();
      if (dx) {
        p.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, p.dy_shared ? dy_w : p.d_dy.in(dy.raw())},
                               {DNNL_ARG_WEIGHTS, p.d_w.in(w.raw())},
                               {DNNL_ARG_DIFF_SRC, p.d_dx.out(dx->raw())}});
        p.d_dx.finish();
      }
    });
  }

 private:
  Conv2dPlan& plan(const Tensor& x, const Tensor& w) {
    const Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;

    const Shape y_shape = output_shape(x.shape(), w.shape(), params());
    const memory::dims src{x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
    const memory::dims wei{w.dim(0), w.dim(1), w.dim(2), w.dim(3)};
    const memory::dims bias{w.dim(0)};
    const memory::dims dst{y_shape[0], y_shape[1], y_shape[2], y_shape[3]};
    const memory::dims strides{params().stride_h, params().stride_w};
    const memory::dims pad{params().pad_h, params().pad_w};
    Conv2dPlan p;
    PARALAB_DNNL("conv2d plan", {
      auto& eng = device_.engine();
      const auto fwd_pd = onednn::conv_forward(eng, any(src), any(wei), plain_desc(bias), any(dst),
                                               strides, pad, pad, own_scratchpad());
      const auto bwd_w_pd =
          onednn::conv_backward_weights(eng, any(src), any(wei), plain_desc(bias), any(dst),
                                        strides, pad, pad, fwd_pd, own_scratchpad());
      const auto bwd_d_pd = onednn::conv_backward_data(eng, any(src), any(wei), any(dst), strides,
                                                       pad, pad, fwd_pd, own_scratchpad());
      p.fwd = Primitive(fwd_pd);
      p.bwd_weights = Primitive(bwd_w_pd);
      p.bwd_data = Primitive(bwd_d_pd);
      p.bias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
      p.d_bias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
      p.f_src = Staged(device_, plain_desc(src), fwd_pd.src_desc());
      p.f_w = Staged(device_, plain_desc(wei), fwd_pd.weights_desc());
      p.f_y = Staged(device_, plain_desc(dst), fwd_pd.dst_desc());
      p.w_src = Staged(device_, plain_desc(src), bwd_w_pd.src_desc());
      p.w_dy = Staged(device_, plain_desc(dst), bwd_w_pd.diff_dst_desc());
      p.w_dw = Staged(device_, plain_desc(wei), bwd_w_pd.diff_weights_desc());
      p.dy_shared = bwd_d_pd.diff_dst_desc() == bwd_w_pd.diff_dst_desc();
      if (!p.dy_shared) p.d_dy = Staged(device_, plain_desc(dst), bwd_d_pd.diff_dst_desc());
      p.d_w = Staged(device_, plain_desc(wei), bwd_d_pd.weights_desc());
      p.d_dx = Staged(device_, plain_desc(src), bwd_d_pd.diff_src_desc());
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, Conv2dPlan> plans_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(CpuDevice& device, const Conv2dParams& params) {
  return std::make_unique<CpuConv2d>(device, params);
}

}  // namespace paralab::cpu
