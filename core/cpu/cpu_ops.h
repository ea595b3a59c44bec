// Factories for the CPU backend's op families, one file per family (conv_relu_pool.cpp, conv2d.cpp,
// pool2d.cpp, relu.cpp, dropout.cpp, linear.cpp, resize.cpp, ...).
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <unordered_map>

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

// Every oneDNN primitive of the CPU backend keeps its own scratch memory (scratchpad_mode::user).
// In oneDNN's default mode a primitive borrows one buffer per thread, reference-counted by the
// primitives made on that thread; one freed on another thread (a rank thread's op destroyed by
// the main thread after the group ended) leaves the count above zero, and the buffer leaks when
// the thread ends (seen by LeakSanitizer on the AVX2 and SSE4.1 convolution paths, whose
// implementations need scratch memory). With its own memory a primitive holds no state of the
// thread it was made on.
dnnl::primitive_attr own_scratchpad(dnnl::primitive_attr attr = {});

class Primitive {
 public:
  Primitive() = default;
  // pd must have been made with own_scratchpad().
  explicit Primitive(const dnnl::primitive_desc_base& pd);
  // Runs on `stream` with `args` and the primitive's scratch memory.
  void execute(dnnl::stream& stream, std::unordered_map<int, dnnl::memory> args) const;

 private:
  dnnl::primitive primitive_;
  dnnl::memory scratch_;  // empty where the implementation needs none
};

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
  Primitive to_prim_;  // reorders
  Primitive to_user_;
};

}  // namespace paralab::cpu
