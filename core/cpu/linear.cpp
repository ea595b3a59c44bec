// CPU linear (y = x W + b, W stored (in,out) as in the book): three oneDNN matmuls on plain
// layouts, the transposes expressed as strides (tag ba) instead of copies; cached per shape.
#include <map>
#include <tuple>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/cpu/onednn_api.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using Key = std::tuple<int64_t, int64_t, int64_t>;

struct LinearPlan {
  Primitive fwd;       // matmul y(N,out) = x(N,in) W(in,out) + b(1,out)
  Primitive bwd_data;  // matmul dx(N,in) = dy(N,out) W^T(out,in)
  Primitive bwd_w;     // matmul dW(in,out) = x^T(in,N) dy(N,out)
  memory x, w, b, y;   // forward operands
  memory dy, wt, dx;   // backward-data operands (wt: W seen as (out,in), tag ba)
  memory xt, dy2, dw;  // backward-weights operands (xt: x seen as (in,N), tag ba)
};

memory::desc f32(const memory::dims& d, tag t) { return {d, memory::data_type::f32, t}; }

class CpuLinear final : public Linear {
 public:
  explicit CpuLinear(CpuDevice& device) : device_(device) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    LinearPlan& p = plan(x, w);
    PARALAB_REQUIRE(y.shape() == (Shape{x.dim(0), w.dim(1)}),
                    "linear forward: y " + shape_string(y.shape()) + " does not fit");
    PARALAB_DNNL("linear forward", {
      p.x.set_data_handle(x.raw());
      p.w.set_data_handle(w.raw());
      p.b.set_data_handle(b.raw());
      p.y.set_data_handle(y.raw());
      p.fwd.execute(device_.stream(), {{DNNL_ARG_SRC, p.x},
                                       {DNNL_ARG_WEIGHTS, p.w},
                                       {DNNL_ARG_BIAS, p.b},
                                       {DNNL_ARG_DST, p.y}});
    });
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    LinearPlan& p = plan(x, w);
    const int64_t n = x.dim(0), out = w.dim(1);
    PARALAB_REQUIRE(dy.shape() == (Shape{n, out}),
                    "linear backward: dy " + shape_string(dy.shape()) + " does not fit");
    PARALAB_DNNL("linear backward weights", {
      p.xt.set_data_handle(x.raw());
      p.dy2.set_data_handle(dy.raw());
      p.dw.set_data_handle(dw.raw());
      p.bwd_w.execute(device_.stream(),
                      {{DNNL_ARG_SRC, p.xt}, {DNNL_ARG_WEIGHTS, p.dy2}, {DNNL_ARG_DST, p.dw}});
    });
    // db = column sums of dy; rows summed in order so the result does not depend on threads.
    const float* g = dy.f32();
    float* d = db.f32();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < out; ++j) {
      float s = 0.0f;
      for (int64_t i = 0; i < n; ++i) s += g[i * out + j];
      d[j] = s;
    }
    if (!dx) return;
    PARALAB_DNNL("linear backward data", {
      p.dy.set_data_handle(dy.raw());
      p.wt.set_data_handle(w.raw());
      p.dx.set_data_handle(dx->raw());
      p.bwd_data.execute(device_.stream(),
                         {{DNNL_ARG_SRC, p.dy}, {DNNL_ARG_WEIGHTS, p.wt}, {DNNL_ARG_DST, p.dx}});
    });
  }

 private:
  LinearPlan& plan(const Tensor& x, const Tensor& w) {
    PARALAB_REQUIRE(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(0),
                    "linear: x " + shape_string(x.shape()) + " and W " + shape_string(w.shape()) +
                        " do not fit");
    const int64_t n = x.dim(0), in = w.dim(0), out = w.dim(1);
    Key key{n, in, out};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    LinearPlan p;
    PARALAB_DNNL("linear plan", {
      auto& eng = device_.engine();
      auto make = [&](const memory::desc& a, const memory::desc& bm, const memory::desc* bias,
                      const memory::desc& c) {
        return Primitive(onednn::matmul(eng, a, bm, bias, c, own_scratchpad()));
      };
      auto mem = [&](const memory::desc& d) { return memory(d, eng, DNNL_MEMORY_NONE); };
      const auto xd = f32({n, in}, tag::ab), wd = f32({in, out}, tag::ab),
                 bd = f32({1, out}, tag::ab), yd = f32({n, out}, tag::ab),
                 wtd = f32({out, in}, tag::ba), xtd = f32({in, n}, tag::ba);
      p.fwd = make(xd, wd, &bd, yd);
      p.bwd_data = make(yd, wtd, nullptr, xd);
      p.bwd_w = make(xtd, yd, nullptr, wd);
      p.x = mem(xd), p.w = mem(wd), p.b = mem(bd), p.y = mem(yd);
      p.dy = mem(yd), p.wt = mem(wtd), p.dx = mem(xd);
      p.xt = mem(xtd), p.dy2 = mem(yd), p.dw = mem(wd);
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, LinearPlan> plans_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(CpuDevice& device) {
  return std::make_unique<CpuLinear>(device);
}

}  // namespace paralab::cpu
