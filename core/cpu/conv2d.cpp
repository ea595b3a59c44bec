// CPU conv2d: oneDNN convolution forward, backward-data and backward-weights, primitives chosen
// with format_tag::any (oneDNN's fast kernels want blocked layouts; fixed plain layouts can fall
// back to reference kernels) and cached per input shape.
#include <map>
#include <tuple>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

using dnnl::memory;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct ConvPlan {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  // forward
  Staged f_src, f_w, f_dst;
  // backward data
  Staged d_dy, d_w, d_dx;
  // backward weights
  Staged w_src, w_dy, w_dw;
  memory bias;
  memory dbias;
};

class CpuConv2d final : public Conv2d {
 public:
  explicit CpuConv2d(CpuDevice& device) : device_(device) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    ConvPlan& p = plan(x, w);
    check_out(x, w, y, "conv2d forward: y");
    PARALAB_DNNL("conv2d forward", {
      memory src = p.f_src.in(x.raw());
      memory wei = p.f_w.in(w.raw());
      p.bias.set_data_handle(b.raw());
      memory dst = p.f_dst.out(y.raw());
      p.fwd.execute(device_.stream(), {{DNNL_ARG_SRC, src},
                                       {DNNL_ARG_WEIGHTS, wei},
                                       {DNNL_ARG_BIAS, p.bias},
                                       {DNNL_ARG_DST, dst}});
      p.f_dst.finish();
    });
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    ConvPlan& p = plan(x, w);
    check_out(x, w, dy, "conv2d backward: dy");
    PARALAB_DNNL("conv2d backward weights", {
      memory src = p.w_src.in(x.raw());
      memory ddst = p.w_dy.in(dy.raw());
      memory dwei = p.w_dw.out(dw.raw());
      p.dbias.set_data_handle(db.raw());
      p.bwd_weights.execute(device_.stream(), {{DNNL_ARG_SRC, src},
                                               {DNNL_ARG_DIFF_DST, ddst},
                                               {DNNL_ARG_DIFF_WEIGHTS, dwei},
                                               {DNNL_ARG_DIFF_BIAS, p.dbias}});
      p.w_dw.finish();
    });
    if (!dx) return;
    PARALAB_REQUIRE(dx->shape() == x.shape(), "conv2d backward: dx " + shape_string(dx->shape()) +
                                                  " != x " + shape_string(x.shape()));
    PARALAB_DNNL("conv2d backward data", {
      memory ddst = p.d_dy.in(dy.raw());
      memory wei = p.d_w.in(w.raw());
      memory dsrc = p.d_dx.out(dx->raw());
      p.bwd_data.execute(
          device_.stream(),
          {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc}});
      p.d_dx.finish();
    });
  }

 private:
  static void check_out(const Tensor& x, const Tensor& w, const Tensor& y, const char* what) {
    Shape expect{x.dim(0), w.dim(0), x.dim(2) - w.dim(2) + 1, x.dim(3) - w.dim(3) + 1};
    PARALAB_REQUIRE(y.shape() == expect, std::string(what) + " is " + shape_string(y.shape()) +
                                             ", expected " + shape_string(expect));
  }

  ConvPlan& plan(const Tensor& x, const Tensor& w) {
    PARALAB_REQUIRE(x.ndim() == 4 && w.ndim() == 4 && x.dim(1) == w.dim(1) &&
                        x.dim(2) >= w.dim(2) && x.dim(3) >= w.dim(3),
                    "conv2d: x " + shape_string(x.shape()) + " and w " + shape_string(w.shape()) +
                        " do not fit");
    Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;

    const memory::dims src{x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
    const memory::dims wei{w.dim(0), w.dim(1), w.dim(2), w.dim(3)};
    const memory::dims bias{w.dim(0)};
    const memory::dims dst{x.dim(0), w.dim(0), x.dim(2) - w.dim(2) + 1, x.dim(3) - w.dim(3) + 1};
    const memory::dims strides{1, 1}, pad{0, 0};
    auto any = [](const memory::dims& d) {
      return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
    };
    ConvPlan p;
    PARALAB_DNNL("conv2d plan", {
      auto& eng = device_.engine();
      dnnl::convolution_forward::primitive_desc fwd_pd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                          dnnl::algorithm::convolution_direct, any(src), any(wei),
                                          plain_desc(bias), any(dst), strides, pad, pad),
          eng);
      dnnl::convolution_backward_data::primitive_desc data_pd(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any(src),
                                                any(wei), any(dst), strides, pad, pad),
          eng, fwd_pd);
      dnnl::convolution_backward_weights::primitive_desc weights_pd(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, any(src),
                                                   any(wei), plain_desc(bias), any(dst), strides,
                                                   pad, pad),
          eng, fwd_pd);
      p.fwd = dnnl::convolution_forward(fwd_pd);
      p.bwd_data = dnnl::convolution_backward_data(data_pd);
      p.bwd_weights = dnnl::convolution_backward_weights(weights_pd);
      p.f_src = Staged(device_, plain_desc(src), fwd_pd.src_desc());
      p.f_w = Staged(device_, plain_desc(wei), fwd_pd.weights_desc());
      p.f_dst = Staged(device_, plain_desc(dst), fwd_pd.dst_desc());
      p.d_dy = Staged(device_, plain_desc(dst), data_pd.diff_dst_desc());
      p.d_w = Staged(device_, plain_desc(wei), data_pd.weights_desc());
      p.d_dx = Staged(device_, plain_desc(src), data_pd.diff_src_desc());
      p.w_src = Staged(device_, plain_desc(src), weights_pd.src_desc());
      p.w_dy = Staged(device_, plain_desc(dst), weights_pd.diff_dst_desc());
      p.w_dw = Staged(device_, plain_desc(wei), weights_pd.diff_weights_desc());
      p.bias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
      p.dbias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, ConvPlan> plans_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(CpuDevice& device) {
  return std::make_unique<CpuConv2d>(device);
}

}  // namespace paralab::cpu
