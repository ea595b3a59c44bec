// CPU max and average pooling on oneDNN, on the tensors' own NCHW layout, primitives made once
// per input shape.
//
// How the stated conventions (core/ops.h, Pool2d) map onto oneDNN: average pooling is
// pooling_avg_include_padding (divisor = the full window); max pooling keeps the first maximum
// in window order, since oneDNN's kernels replace the running maximum only on a strictly greater
// value, scanning rows then columns, and backward routes each gradient through the workspace
// (where each maximum was) that the training forward wrote; tests/test_model_ops.cpp pins the
// ties on every instruction set the tests run with. Symmetric padding with oneDNN's
// (H + 2p - k) / s + 1 gives floor mode directly.
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/cpu/cpu_device.h"
#include "core/cpu/cpu_ops.h"
#include "core/cpu/onednn_api.h"
#include "core/error.h"

namespace paralab::cpu {

namespace {

using dnnl::memory;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

struct PoolPlan {
  Primitive fwd;
  Primitive bwd;
  memory x, y, dy, dx;       // plain NCHW views of the caller's tensors
  memory workspace;          // max: where the last training forward found each maximum
  memory scratch_workspace;  // max: what a forward that is not for training writes instead
  bool has_forward = false;  // a training forward filled `workspace`
};

class CpuPool2d final : public Pool2d {
 public:
  CpuPool2d(CpuDevice& device, const Pool2dParams& params) : Pool2d(params), device_(device) {}

  void forward(const Tensor& x, Tensor& y, bool training) override {
    check_forward(x, y, params());
    PoolPlan& p = plan(x.shape());
    const bool max = params().mode == PoolMode::Max;
    PARALAB_DNNL("pool2d forward", {
      p.x.set_data_handle(x.raw());
      p.y.set_data_handle(y.raw());
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, p.x}, {DNNL_ARG_DST, p.y}};
      if (max) args[DNNL_ARG_WORKSPACE] = training ? p.workspace : p.scratch_workspace;
      p.fwd.execute(device_.stream(), std::move(args));
    });
    p.has_forward = p.has_forward || training;
  }

  void backward(const Tensor& dy, Tensor& dx) override {
    check_backward(dy, dx, params());
    PoolPlan& p = plan(dx.shape());
    const bool max = params().mode == PoolMode::Max;
    PARALAB_REQUIRE(!max || p.has_forward,
                    "pool2d (max) backward: no training forward for x " + shape_string(dx.shape()));
    PARALAB_DNNL("pool2d backward", {
      p.dy.set_data_handle(dy.raw());
      p.dx.set_data_handle(dx.raw());
      std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, p.dy}, {DNNL_ARG_DIFF_SRC, p.dx}};
      if (max) args[DNNL_ARG_WORKSPACE] = p.workspace;
      p.bwd.execute(device_.stream(), std::move(args));
    });
  }

 private:
  PoolPlan& plan(const Shape& x) {
    const Key key{x[0], x[1], x[2], x[3]};
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;

    const Shape y = output_shape(x, params());
    const Pool2dParams& q = params();
    const memory::dims src{x[0], x[1], x[2], x[3]}, dst{y[0], y[1], y[2], y[3]};
    const memory::dims strides{q.stride_h, q.stride_w}, kernel{q.window_h, q.window_w},
        pad{q.pad_h, q.pad_w};
    const auto alg = q.mode == PoolMode::Max ? dnnl::algorithm::pooling_max
                                             : dnnl::algorithm::pooling_avg_include_padding;
    PoolPlan p;
    PARALAB_DNNL("pool2d plan", {
      auto& eng = device_.engine();
      const auto fwd_pd = onednn::pool_forward(eng, alg, plain_desc(src), plain_desc(dst), strides,
                                               kernel, pad, pad, own_scratchpad());
      const auto bwd_pd = onednn::pool_backward(eng, alg, plain_desc(src), plain_desc(dst), strides,
                                                kernel, pad, pad, fwd_pd, own_scratchpad());
      p.fwd = Primitive(fwd_pd);
      p.bwd = Primitive(bwd_pd);
      for (memory* m : {&p.x, &p.dx}) *m = memory(plain_desc(src), eng, DNNL_MEMORY_NONE);
      for (memory* m : {&p.y, &p.dy}) *m = memory(plain_desc(dst), eng, DNNL_MEMORY_NONE);
      if (q.mode == PoolMode::Max) {
        p.workspace = memory(fwd_pd.workspace_desc(), eng);
        p.scratch_workspace = memory(fwd_pd.workspace_desc(), eng);
      }
    });
    return plans_.emplace(key, std::move(p)).first->second;
  }

  CpuDevice& device_;
  std::map<Key, PoolPlan> plans_;
};

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(CpuDevice& device, const Pool2dParams& params) {
  return std::make_unique<CpuPool2d>(device, params);
}

}  // namespace paralab::cpu
