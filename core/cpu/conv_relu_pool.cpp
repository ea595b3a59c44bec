// CPU conv -> ReLU -> avgpool stage on oneDNN.
//
// The convolution's output and the pooling stay in a layout oneDNN's fast kernels want (NHWC, or
// the blocked nChw16c it picks itself) with ReLU fused as a post-op; only x, the pooled y and
// their gradients are reordered to and from NCHW. Keeping the big activation out of NCHW removes
// two reorders per stage and lets pooling use its vectorised kernels (on NCHW it is several
// times slower).
// Primitives, reorders and buffers are made once per input shape.
//
// From oneDNN 3.7 on the ReLU is a pass of its own over the activation instead: Debian 13's
// oneDNN 3.7.2 runs the convolution it picks there for LeNet's conv2 (brg_conv_fwd) with the ReLU
// post-op racily: two threads running it at once, as two CPU devices do, gave other bits than a
// run alone in 7 of 20 tries at 1 OpenMP thread each, and none without the post-op (an AVX-512
// AMD EPYC VM). The pass computes max(v, 0) of each biased sum, as the CPU's ReLU op does; it
// costs one more read and write of the activation.
#include <algorithm>
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

// Whether the ReLU is the convolution's post-op, or a pass of its own (oneDNN 3.7 on; above).
constexpr bool kReluPostOp = !onednn::kOneDnn37;

struct StagePlan {
  Primitive conv;
  Primitive pool;
  Primitive pool_bwd;
  Primitive conv_bwd_data;
  Primitive conv_bwd_weights;
  memory act;     // relu(conv(x)+b), blocked (N,K,OH,OW), kept for backward
  memory d_act;   // its gradient, same layout
  memory pooled;  // pool output in the pool's layout (staged to y)
  memory bias, d_bias;
  Staged f_src, f_w, f_y;    // forward: x, w in; y out
  Staged b_dy;               // backward: dy in
  Staged w_src, w_dw;        // backward weights: x in, dw out
  Staged d_w, d_dx;          // backward data: w in, dx out
  bool has_forward = false;  // a training forward has filled act
  bool nhwc = false;         // act and the pooled tensors are channels-last (acdb)
  int64_t n = 0, k = 0, oh = 0, ow = 0;
};

memory::desc any(const memory::dims& d) {
  return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
}

class CpuConvReluPool final : public ConvReluPool {
 public:
  explicit CpuConvReluPool(CpuDevice& device) : device_(device) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               bool training) override {
    check_forward(x, w, b, y);
    StagePlan& p = plan(x, w);
    auto& s = device_.stream();
    PARALAB_DNNL("conv_relu_pool forward", {
      p.bias.set_data_handle(b.raw());
      p.conv.execute(s, {{DNNL_ARG_SRC, p.f_src.in(x.raw())},
                         {DNNL_ARG_WEIGHTS, p.f_w.in(w.raw())},
                         {DNNL_ARG_BIAS, p.bias},
                         {DNNL_ARG_DST, p.act}});
      if (!kReluPostOp) relu_in_place(p);
      p.pool.execute(s, {{DNNL_ARG_SRC, p.act}, {DNNL_ARG_DST, p.f_y.out(y.raw())}});
      p.f_y.finish();
    });
    p.has_forward = p.has_forward || training;
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db);
    StagePlan& p = plan(x, w);
    PARALAB_REQUIRE(p.has_forward, "conv_relu_pool backward: no training forward for x " +
                                       shape_string(x.shape()));
    auto& s = device_.stream();
    PARALAB_DNNL("conv_relu_pool backward", {
      if (p.nhwc) {
        pool_relu_backward_nhwc(p, p.b_dy.in(dy.raw()));
      } else {
        p.pool_bwd.execute(
            s, {{DNNL_ARG_DIFF_DST, p.b_dy.in(dy.raw())}, {DNNL_ARG_DIFF_SRC, p.d_act}});
        relu_backward_in_place(p);
      }
      p.d_bias.set_data_handle(db.raw());
      p.conv_bwd_weights.execute(s, {{DNNL_ARG_SRC, p.w_src.in(x.raw())},
                                     {DNNL_ARG_DIFF_DST, p.d_act},
                                     {DNNL_ARG_DIFF_WEIGHTS, p.w_dw.out(dw.raw())},
                                     {DNNL_ARG_DIFF_BIAS, p.d_bias}});
      p.w_dw.finish();
      if (dx) {
        p.conv_bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, p.d_act},
                                    {DNNL_ARG_WEIGHTS, p.d_w.in(w.raw())},
                                    {DNNL_ARG_DIFF_SRC, p.d_dx.out(dx->raw())}});
        p.d_dx.finish();
      }
    });
  }

 private:
  // Channels-last: the pooling's and the ReLU's backward in one pass, d_act = act > 0 ?
  // dy(pooled position) / 4 : 0, instead of oneDNN's pooling backward (which writes d_act) and
  // the masking pass (which reads act and rewrites d_act): one pass over the activation saved.
  // Rows and columns beyond 2 x the pooled extent (floor mode) get 0.
  static void pool_relu_backward_nhwc(StagePlan& p, const dnnl::memory& pooled_dy) {
    const auto* a = static_cast<const float*>(p.act.get_data_handle());
    auto* d = static_cast<float*>(p.d_act.get_data_handle());
    const auto* g = static_cast<const float*>(pooled_dy.get_data_handle());
    const int64_t k = p.k, oh = p.oh, ow = p.ow, ph = oh / 2, pw = ow / 2;
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < p.n * oh; ++row) {
      const int64_t img = row / oh, h = row % oh;
      const float* arow = a + row * ow * k;
      float* drow = d + row * ow * k;
      const float* grow = g + (img * ph + h / 2) * pw * k;
      for (int64_t w = 0; w < ow; ++w) {
        const float* ap = arow + w * k;
        float* dp = drow + w * k;
        if (h >= 2 * ph || w >= 2 * pw) {
          for (int64_t c = 0; c < k; ++c) dp[c] = 0.0f;
          continue;
        }
        const float* gp = grow + (w / 2) * k;
#pragma omp simd
        for (int64_t c = 0; c < k; ++c) dp[c] = ap[c] > 0.0f ? 0.25f * gp[c] : 0.0f;
      }
    }
  }

  // act = max(act, 0) over the whole buffer (the ReLU without the post-op; padded channels hold
  // 0 and stay 0).
  static void relu_in_place(StagePlan& p) {
    auto* a = static_cast<float*>(p.act.get_data_handle());
    const auto n = static_cast<int64_t>(p.act.get_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = std::max(a[i], 0.0f);
  }

  // d_act = act > 0 ? d_act : 0 over the whole blocked buffer; padded channels hold 0 in act
  // (oneDNN zero-fills padding), so their gradient is 0 too.
  static void relu_backward_in_place(StagePlan& p) {
    const auto* a = static_cast<const float*>(p.act.get_data_handle());
    auto* d = static_cast<float*>(p.d_act.get_data_handle());
    const auto n = static_cast<int64_t>(p.act.get_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
  }

  StagePlan& plan(const Tensor& x, const Tensor& w) {
    output_shape(x, w);  // validates
    const Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;

    const int64_t oh = x.dim(2) - w.dim(2) + 1, ow = x.dim(3) - w.dim(3) + 1;
    const memory::dims src{x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
    const memory::dims wei{w.dim(0), w.dim(1), w.dim(2), w.dim(3)};
    const memory::dims bias{w.dim(0)};
    const memory::dims act{x.dim(0), w.dim(0), oh, ow};
    const memory::dims pooled{x.dim(0), w.dim(0), oh / 2, ow / 2};
    const memory::dims strides{1, 1}, pad{0, 0}, kernel{2, 2}, pool_strides{2, 2};
    // Floor mode: with an odd extent the right padding is -1, so oneDNN's output size
    // (OH - 2 + pad_r) / 2 + 1 is exactly OH / 2 and the last row/column is never read.
    const memory::dims pool_pad_r{(oh / 2 - 1) * 2 + 2 - oh, (ow / 2 - 1) * 2 + 2 - ow};
    // Activation layout (see the file comment): channels-last (NHWC) when the input channels
    // are not a multiple of oneDNN's 16-wide blocks, since the blocked layout pads them (20 -> 32
    // for conv2, doubling its arithmetic); otherwise the layout oneDNN prefers. Measured at batch
    // 256 on one AVX-512 core: a training iteration takes ~55 ms with NHWC stages against ~72 ms
    // with blocked ones.
    const bool nhwc = x.dim(1) % 16 != 0;
    auto act_md = [&](const memory::dims& d) {
      return nhwc ? memory::desc(d, memory::data_type::f32, memory::format_tag::acdb) : any(d);
    };
    StagePlan p;
    PARALAB_DNNL("conv_relu_pool plan", {
      auto& eng = device_.engine();
      dnnl::primitive_attr attr;
      if (kReluPostOp) {
        dnnl::post_ops relu;
        onednn::append_relu(relu);
        attr.set_post_ops(relu);
      }
      const auto conv_pd =
          onednn::conv_forward(eng, act_md(src), any(wei), plain_desc(bias), act_md(act), strides,
                               pad, pad, own_scratchpad(attr));
      // The hint for backward is the same convolution without the post-op.
      const auto hint_pd = onednn::conv_forward(eng, act_md(src), any(wei), plain_desc(bias),
                                                act_md(act), strides, pad, pad, {});
      const auto alg = dnnl::algorithm::pooling_avg_exclude_padding;
      const auto pool_pd =
          onednn::pool_forward(eng, alg, conv_pd.dst_desc(), act_md(pooled), pool_strides, kernel,
                               pad, pool_pad_r, own_scratchpad());
      const auto pool_bwd_pd =
          onednn::pool_backward(eng, alg, conv_pd.dst_desc(), pool_pd.dst_desc(), pool_strides,
                                kernel, pad, pool_pad_r, pool_pd, own_scratchpad());
      const auto bwd_w_pd = onednn::conv_backward_weights(
          eng, act_md(src), any(wei), plain_desc(bias), conv_pd.dst_desc(), strides, pad, pad,
          hint_pd, own_scratchpad());
      const auto bwd_d_pd =
          onednn::conv_backward_data(eng, act_md(src), any(wei), conv_pd.dst_desc(), strides, pad,
                                     pad, hint_pd, own_scratchpad());
      PARALAB_REQUIRE(pool_bwd_pd.diff_src_desc() == conv_pd.dst_desc() &&
                          bwd_w_pd.diff_dst_desc() == conv_pd.dst_desc() &&
                          bwd_d_pd.diff_dst_desc() == conv_pd.dst_desc(),
                      "conv_relu_pool: oneDNN chose different layouts for the activation and "
                      "its gradient");
      p.conv = Primitive(conv_pd);
      p.pool = Primitive(pool_pd);
      p.pool_bwd = Primitive(pool_bwd_pd);
      p.conv_bwd_weights = Primitive(bwd_w_pd);
      p.conv_bwd_data = Primitive(bwd_d_pd);
      p.nhwc = nhwc &&
               conv_pd.dst_desc() ==
                   memory::desc(act, memory::data_type::f32, memory::format_tag::acdb) &&
               pool_bwd_pd.diff_dst_desc() ==
                   memory::desc(pooled, memory::data_type::f32, memory::format_tag::acdb);
      p.n = x.dim(0);
      p.k = w.dim(0);
      p.oh = oh;
      p.ow = ow;
      p.act = memory(conv_pd.dst_desc(), eng);
      p.d_act = memory(conv_pd.dst_desc(), eng);
      p.bias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
      p.d_bias = memory(plain_desc(bias), eng, DNNL_MEMORY_NONE);
      p.f_src = Staged(device_, plain_desc(src), conv_pd.src_desc());
      p.f_w = Staged(device_, plain_desc(wei), conv_pd.weights_desc());
      p.f_y = Staged(device_, plain_desc(pooled), pool_pd.dst_desc());
      p.b_dy = Staged(device_, plain_desc(pooled), pool_bwd_pd.diff_dst_desc());
      p.w_src = Staged(device_, plain_desc(src), bwd_w_pd.src_desc());
      p.w_dw = Staged(device_, plain_desc(wei), bwd_w_pd.diff_weights_desc());
      p.d_w = Staged(device_, plain_desc(wei), bwd_d_pd.weights_desc());
      p.d_dx = Staged(device_, plain_desc(src), bwd_d_pd.diff_src_desc());
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, StagePlan> plans_;
};

}  // namespace

std::unique_ptr<ConvReluPool> make_conv_relu_pool(CpuDevice& device) {
  return std::make_unique<CpuConvReluPool>(device);
}

}  // namespace paralab::cpu
