// CUDA 2-D convolution (stride, padding, bias) on cuDNN, NCHW throughout: descriptors, the
// algorithms and their workspace made once per input shape. The algorithms follow the rule of
// cudnn_algorithms.h (cuDNN's heuristic ranking, first deterministic non-Winograd one), recorded
// in the device's kernel log; bias added by cudnnAddTensor, its gradient by ParaLab's own
// fixed-order channel sum (kernels.h channel_sums; cuDNN's bias gradient runs one block per
// channel, 216 us for LeNet's conv1 on an H200, results/reference/h200-2026-12-04).
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
    for (auto t : {x, y, bias})
      if (t) cudnnDestroyTensorDescriptor(t);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  // The algorithm per direction and the math type each was ranked with (the heuristics report
  // it): FMA when TF32 is off; with it on, a direction's algorithm may need tensor-op math.
  ConvAlgorithms algos;
  Tensor workspace;
  Tensor bias_partial;  // channel_sums' per-part sums
};

class CudaConv2d final : public Conv2d {
 public:
  CudaConv2d(CudaDevice& d, KernelLog& log, const Conv2dParams& params)
      : Conv2d(params), d_(d), log_(log) {}

  void forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    check_forward(x, w, b, y, params());
    Plan& p = plan(x, w);
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = d_.cudnn();
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.fwd_math));
    PARALAB_CUDNN(cudnnConvolutionForward(h, &one, p.x, x.raw(), p.w, w.raw(), p.conv, p.algos.fwd,
                                          p.workspace.raw(), p.workspace.bytes(), &zero, p.y,
                                          y.raw()));
    PARALAB_CUDNN(cudnnAddTensor(h, &one, p.bias, b.raw(), &one, p.y, y.raw()));
  }

  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    check_backward(x, w, dy, dx, dw, db, params());
    Plan& p = plan(x, w);
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = d_.cudnn();
    channel_sums(dy.f32(), db.f32(), p.bias_partial.f32(), dy.dim(0), dy.dim(1),
                 dy.dim(2) * dy.dim(3), d_.stream());
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.filter_math));
    PARALAB_CUDNN(cudnnConvolutionBackwardFilter(h, &one, p.x, x.raw(), p.y, dy.raw(), p.conv,
                                                 p.algos.filter, p.workspace.raw(),
                                                 p.workspace.bytes(), &zero, p.w, dw.raw()));
    if (!dx) return;
    // beta = 0 overwrites dx everywhere, the rows and columns no window reads included.
    PARALAB_CUDNN(cudnnSetConvolutionMathType(p.conv, p.algos.data_math));
    PARALAB_CUDNN(cudnnConvolutionBackwardData(h, &one, p.w, w.raw(), p.y, dy.raw(), p.conv,
                                               p.algos.data, p.workspace.raw(), p.workspace.bytes(),
                                               &zero, p.x, dx->raw()));
  }

 private:
  Plan& plan(const Tensor& x, const Tensor& w) {
    const Key key{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(2), w.dim(3)};
    auto it = plans_.find(key);
    if (it != plans_.end()) return *it->second;

    const Conv2dParams& q = params();
    const Shape ys = output_shape(x.shape(), w.shape(), q);
    auto p = std::make_unique<Plan>();
    p->x = tensor4(x.dim(0), x.dim(1), x.dim(2), x.dim(3));
    p->y = tensor4(ys[0], ys[1], ys[2], ys[3]);
    p->bias = tensor4(1, w.dim(0), 1, 1);
    PARALAB_CUDNN(cudnnCreateFilterDescriptor(&p->w));
    PARALAB_CUDNN(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                             int(w.dim(0)), int(w.dim(1)), int(w.dim(2)),
                                             int(w.dim(3))));
    PARALAB_CUDNN(cudnnCreateConvolutionDescriptor(&p->conv));
    PARALAB_CUDNN(cudnnSetConvolution2dDescriptor(p->conv, int(q.pad_h), int(q.pad_w),
                                                  int(q.stride_h), int(q.stride_w), 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // FMA math keeps float32 convolutions off TF32 tensor cores unless the device allows TF32.
    PARALAB_CUDNN(
        cudnnSetConvolutionMathType(p->conv, d_.tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    // cuDNN's output size must be ours (both floor), or the descriptors would disagree.
    int on = 0, oc = 0, oh = 0, ow = 0;
    PARALAB_CUDNN(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    PARALAB_REQUIRE((Shape{on, oc, oh, ow}) == ys, "conv2d: cuDNN's output " +
                                                       shape_string(Shape{on, oc, oh, ow}) +
                                                       " differs from " + shape_string(ys));

    p->algos = choose_conv_algorithms(d_.cudnn(), p->x, p->w, p->conv, p->y, d_.tf32());
    const std::size_t ws = p->algos.workspace_bytes;
    log_.note("conv2d x " + shape_string(x.shape()) + " w " + shape_string(w.shape()) + " stride " +
                  std::to_string(q.stride_h) + "x" + std::to_string(q.stride_w) + " pad " +
                  std::to_string(q.pad_h) + "x" + std::to_string(q.pad_w),
              describe(p->algos, d_.tf32()));
    p->workspace = Tensor::empty(d_, {static_cast<int64_t>((ws + 3) / 4)});
    p->bias_partial = Tensor::empty(
        d_, {std::max<int64_t>(channel_sums_partition(ys[0], ys[1]).parts * ys[1], 1)});
    return *plans_.emplace(key, std::move(p)).first->second;
  }

  CudaDevice& d_;
  KernelLog& log_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace

std::unique_ptr<Conv2d> make_cudnn_conv2d(CudaDevice& device, KernelLog& log,
                                          const Conv2dParams& params) {
  return std::make_unique<CudaConv2d>(device, log, params);
}

}  // namespace paralab::cuda
