// CUDA conv -> ReLU -> avgpool stage on cuDNN's convolutions: algorithms chosen once per shape by
// a fixed rule (core/cuda/cudnn_algorithms.h), cached with their descriptors and workspace. Bias,
// ReLU and pooling are one pass of ParaLab's own over the conv output (crp::bias_relu_pool),
// which also keeps a byte of ReLU bits per pooled value; backward makes the conv output's
// gradient from dy and those bits in one pass (crp::relu_pool_backward). cuDNN's ops took three
// passes forward (add the bias, ReLU, pool) and two backward over conv1's 13.8 MB activation:
// 97 of the step's 865 us of kernel time on an H200 (ncu, results/reference/h200-2026-12-04).
//
// The rule, not a timed search: cuDNN's heuristic ranking for the shape (cudnnGet*_v7, a pure
// function of cuDNN's version, the GPU and the shape), the first algorithm that is deterministic
// and not a Winograd variant. A timed search (cudnnFind*) picks among algorithms a few us apart,
// so its winner changed from one search to the next on an H200, and two model instances in one
// process rounded differently; and WINOGRAD_NONFUSED, which won some searches, errs by 2.3e-3
// (weight gradient) and 4.6e-3 (forward) of the tensor's maximum against fp64, 1,000x the others
// (`../shared/gpu-runs/2026-11-30-h200/FINDINGS.md`). The choices are recorded (Ops::describe).
//
// The bias gradient is ParaLab's own fixed-order channel sum (the bits of kernels.h channel_sums,
// its partial sums made in relu_pool_backward's pass), not cudnnConvolutionBackwardBias: on an
// H200 cuDNN's took 216 us for conv1's 20 channels at batch 256 (one block per channel), a third
// of the step (results/reference/h200-2026-12-04).
#include <algorithm>
#include <map>
#include <tuple>

#include "core/cuda/check.h"
#include "core/cuda/conv_relu_pool_fused.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cudnn_algorithms.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/kernels.h"
#include "core/cuda/relu_masks.h"

namespace paralab::cuda {

namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Plan {
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    for (auto t : {x, act})
      if (t) cudnnDestroyTensorDescriptor(t);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
  crp::Geometry g{};
  cudnnTensorDescriptor_t x = nullptr, act = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  // The algorithm per direction and the math type each was ranked with (the heuristics report
  // it): FMA when TF32 is off; with it on, a direction's algorithm may need tensor-op math.
  ConvAlgorithms algos;
  Tensor workspace;
  Tensor activation;    // the conv output without bias (N,K,OH,OW); its gradient, backward
  ReluMasks masks;      // ReLU bits: the last training forward's, an evaluation's
  Tensor bias_partial;  // channel_sums' per-part sums
  bool has_forward = false;
};

class CudaConvReluPool final : public ConvReluPool {
 public:
  CudaConvReluPool(CudaDevice& d, KernelLog& log) : d_(d), log_(log) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               bool training) override {
    check_forward(x, w, b, y);
    Plan& p = plan(x, w);
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = d_.cudnn();
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.fwd_math));
    PARALAB_CUDNN(cudnnConvolutionForward(h, &one, p.x, x.raw(), p.w, w.raw(), p.conv, p.algos.fwd,
                                          p.workspace.raw(), p.workspace.bytes(), &zero, p.act,
                                          p.activation.raw()));
    crp::bias_relu_pool(p.g, p.activation.f32(), b.f32(), y.f32(), p.masks.for_forward(training),
                        d_.stream());
    if (training) p.has_forward = true;
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db);
    Plan& p = plan(x, w);
    PARALAB_REQUIRE(p.has_forward, "conv_relu_pool backward: no training forward for x " +
                                       shape_string(x.shape()));
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = d_.cudnn();
    // The activation buffer's forward values are spent: its gradient takes its place.
    // (and the bias gradient from it, in the same pass: the bits of channel_sums over it)
    crp::relu_pool_backward(p.g, dy.f32(), p.masks.training(), p.activation.f32(),
                            p.bias_partial.f32(), db.f32(), d_.stream());
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.filter_math));
    PARALAB_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.x, x.raw(), p.act, p.activation.raw(),
                                                 p.conv, p.algos.filter, p.workspace.raw(),
                                                 p.workspace.bytes(), &zero, p.w, dw.raw()));
    if (dx) {
      PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.data_math));
      PARALAB_CUDNN(cudnnConvolutionBackwardData(h, &one, p.w, w.raw(), p.act, p.activation.raw(),
                                                 p.conv, p.algos.data, p.workspace.raw(),
                                                 p.workspace.bytes(), &zero, p.x, dx->raw()));
    }
  }

 private:
  Plan& plan(const Tensor& x, const Tensor& w) {
    output_shape(x, w);  // validates
    const Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    const int64_t n = x.dim(0), k = w.dim(0), oh = x.dim(2) - w.dim(2) + 1,
                  ow = x.dim(3) - w.dim(3) + 1;
    p->g = crp::checked_geometry(n, x.dim(1), x.dim(2), x.dim(3), k, w.dim(2), w.dim(3));
    p->x = tensor4(n, x.dim(1), x.dim(2), x.dim(3));
    p->act = tensor4(n, k, oh, ow);
    PARALAB_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    PARALAB_CUDNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, int(k),
                                             int(w.dim(1)), int(w.dim(2)), int(w.dim(3))));
    PARALAB_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
    PARALAB_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, 0, 0, 1, 1, 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // FMA math keeps float32 convolutions off TF32 tensor cores (cuDNN's default math allows
    // TF32 for float on Ampere and later).
    PARALAB_CUDNN(
        cudnnSetConvolutionMathType(p->conv, d_.tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    p->algos = choose_conv_algorithms(d_.cudnn(), p->x, p->w, p->conv, p->act, d_.tf32());
    const std::size_t ws = p->algos.workspace_bytes;
    log_.note(conv_key(x, w), describe(p->algos, d_.tf32()));
    p->workspace = Tensor::empty(d_, {static_cast<int64_t>((ws + 3) / 4)});
    p->activation = Tensor::empty(d_, {n, k, oh, ow});
    p->masks = ReluMasks(d_, p->g);
    p->bias_partial =
        Tensor::empty(d_, {std::max<int64_t>(channel_sums_partition(n, k).parts * k, 1)});
    return *plans_.emplace(key, std::move(p)).first->second;
  }

  CudaDevice& d_;
  KernelLog& log_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<ConvReluPool> make_cudnn_conv_relu_pool(CudaDevice& device, KernelLog& log) {
  return std::make_unique<CudaConvReluPool>(device, log);
}

}  // namespace paralab::cuda
