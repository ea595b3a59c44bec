// CUDA conv -> ReLU -> avgpool stage on cuDNN: convolution algorithms chosen once per shape by a
// fixed rule (core/cuda/cudnn_algorithms.h), cached with their descriptors and workspace; bias,
// ReLU and pooling as cuDNN ops on the stage's own activation buffer, which backward reuses.
//
// The rule, not a timed search: cuDNN's heuristic ranking for the shape (cudnnGet*_v7, a pure
// function of cuDNN's version, the GPU and the shape), the first algorithm that is deterministic
// and not a Winograd variant. A timed search (cudnnFind*) picks among algorithms a few us apart,
// so its winner changed from one search to the next on an H200, and two model instances in one
// process rounded differently; and WINOGRAD_NONFUSED, which won some searches, errs by 2.3e-3
// (weight gradient) and 4.6e-3 (forward) of the tensor's maximum against fp64, 1,000x the others
// (`../shared/gpu-runs/2026-11-30-h200/FINDINGS.md`). The choices are recorded (Ops::describe).
//
// The bias gradient is ParaLab's own fixed-order channel sum (kernels.h channel_sums), not
// cudnnConvolutionBackwardBias: on an H200 cuDNN's took 216 us for conv1's 20 channels at batch
// 256 (one block per channel), a third of the step (results/reference/h200-2026-12-04).
#include <algorithm>
#include <map>
#include <tuple>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cudnn_algorithms.h"
#include "core/cuda/kernel_log.h"
#include "core/cuda/kernels.h"

namespace paralab::cuda {

namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;

struct Plan {
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    for (auto t : {x, act, y, bias})
      if (t) cudnnDestroyTensorDescriptor(t);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (pool) cudnnDestroyPoolingDescriptor(pool);
    if (relu) cudnnDestroyActivationDescriptor(relu);
  }
  cudnnTensorDescriptor_t x = nullptr, act = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  // The algorithm per direction and the math type each was ranked with (the heuristics report
  // it): FMA when TF32 is off; with it on, a direction's algorithm may need tensor-op math.
  ConvAlgorithms algos;
  Tensor workspace, activation, d_activation;
  Tensor bias_partial;           // channel_sums' per-part sums
  const void* last_y = nullptr;  // the pooled output of the last training forward
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
    PARALAB_CUDNN(cudnnAddTensor(h, &one, p.bias, b.raw(), &one, p.act, p.activation.raw()));
    PARALAB_CUDNN(cudnnActivationForward(h, p.relu, &one, p.act, p.activation.raw(), &zero, p.act,
                                         p.activation.raw()));
    PARALAB_CUDNN(
        cudnnPoolingForward(h, p.pool, &one, p.act, p.activation.raw(), &zero, p.y, y.raw()));
    if (training) {
      p.last_y = y.raw();
      p.has_forward = true;
    }
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db);
    Plan& p = plan(x, w);
    PARALAB_REQUIRE(p.has_forward, "conv_relu_pool backward: no training forward for x " +
                                       shape_string(x.shape()));
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = d_.cudnn();
    void* act = p.activation.raw();
    void* dact = p.d_activation.raw();
    PARALAB_CUDNN(cudnnPoolingBackward(h, p.pool, &one, p.y, p.last_y, p.y, dy.raw(), p.act, act,
                                       &zero, p.act, dact));
    // ReLU's gradient from its output: relu(a) > 0 exactly where a > 0.
    PARALAB_CUDNN(cudnnActivationBackward(h, p.relu, &one, p.act, act, p.act, dact, p.act, act,
                                          &zero, p.act, dact));
    channel_sums(p.d_activation.f32(), db.f32(), p.bias_partial.f32(), x.dim(0), w.dim(0),
                 p.d_activation.dim(2) * p.d_activation.dim(3), d_.stream());
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.filter_math));
    PARALAB_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.x, x.raw(), p.act, dact, p.conv,
                                                 p.algos.filter, p.workspace.raw(),
                                                 p.workspace.bytes(), &zero, p.w, dw.raw()));
    if (dx) {
      PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.data_math));
      PARALAB_CUDNN(cudnnConvolutionBackwardData(h, &one, p.w, w.raw(), p.act, dact, p.conv,
                                                 p.algos.data, p.workspace.raw(),
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
    p->x = tensor4(n, x.dim(1), x.dim(2), x.dim(3));
    p->act = tensor4(n, k, oh, ow);
    p->y = tensor4(n, k, oh / 2, ow / 2);
    p->bias = tensor4(1, k, 1, 1);
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
    PARALAB_CUDNN(cudnnCreatePoolingDescriptor(&p->pool));
    // Floor mode: cuDNN's output size floor((9 - 2) / 2) + 1 = 4 drops the last row and column.
    PARALAB_CUDNN(cudnnSetPooling2dDescriptor(p->pool, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                              CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    PARALAB_CUDNN(cudnnCreateActivationDescriptor(&p->relu));
    PARALAB_CUDNN(
        cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    p->algos = choose_conv_algorithms(d_.cudnn(), p->x, p->w, p->conv, p->act, d_.tf32());
    const std::size_t ws = p->algos.workspace_bytes;
    log_.note(conv_key(x, w), describe(p->algos, d_.tf32()));
    p->workspace = Tensor::empty(d_, {static_cast<int64_t>((ws + 3) / 4)});
    p->activation = Tensor::empty(d_, {n, k, oh, ow});
    // Zeroed once: with floor-mode pooling no window covers conv2's last row and column, and
    // their gradient must be 0 whether or not cudnnPoolingBackward writes cells no window covers
    // (the in-place ReLU backward then keeps a 0 at 0).
    p->d_activation = Tensor::zeros(d_, {n, k, oh, ow});
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
