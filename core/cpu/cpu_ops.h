// Factories for the CPU backend's op families, one file per family (conv_relu_pool.cpp, conv2d.cpp,
// pool2d.cpp, relu.cpp, dropout.cpp, linear.cpp, resize.cpp, ...).
#pragma once

#include <dnnl.hpp>
#include <memory>

#include "core/ops.h"

namespace paralab::cpu {

class CpuDevice;

std::unique_ptr<ConvReluPool> make_conv_relu_pool(CpuDevice& device);
std::unique_ptr<Relu> make_relu(CpuDevice& device);
std::unique_ptr<Linear> make_linear(CpuDevice& device);
std::unique_ptr<SoftmaxXent> make_softmax_xent(CpuDevice& device);
std::unique_ptr<Conv2d> make_conv2d(CpuDevice& device, const Conv2dParams& params);
std::unique_ptr<Pool2d> make_pool2d(CpuDevice& device, const Pool2dParams& params);
std::unique_ptr<Dropout> make_dropout(CpuDevice& device);
std::unique_ptr<Resize> make_resize(CpuDevice& device, ResizeMode mode);
std::unique_ptr<Ops> make_ops(CpuDevice& device);

// Row-major (plain) layout of 1 to 4 dims: a, ab, abc, abcd (abcd = NCHW / OIHW).
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims);
// oneDNN memory over a tensor's buffer with a plain (row-major) layout of the given dims.
dnnl::memory plain_memory(CpuDevice& device, const Tensor& t, const dnnl::memory::dims& dims);

}  // namespace paralab::cpu

namespace paralab::cpu {

// One primitive argument whose layout the primitive chose (format_tag::any) and which may differ
// from the tensor's plain NCHW layout: a reorder and a staging buffer are made once per shape,
// and only when the layouts differ.
class Staged {
 public:
  Staged() = default;
  Staged(CpuDevice& device, const dnnl::memory::desc& user, const dnnl::memory::desc& prim);

  // An input: the primitive's view of `user_ptr`, reordered into the staging buffer if needed.
  dnnl::memory in(const void* user_ptr);
  // An output: memory the primitive writes; finish() moves it to `user_ptr` if it was staged.
  dnnl::memory out(void* user_ptr);
  void finish();

 private:
  CpuDevice* device_ = nullptr;
  dnnl::memory user_;
  dnnl::memory prim_;
  bool staged_ = false;
  dnnl::reorder to_prim_;
  dnnl::reorder to_user_;
};

}  // namespace paralab::cpu
