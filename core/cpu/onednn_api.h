// The oneDNN primitive descriptors the CPU backend makes, for oneDNN 2.x and 3.x alike.
//
// oneDNN 2.x (Debian 12: 2.6, Ubuntu 22.04: 2.2) builds a primitive descriptor from an operation
// descriptor (convolution_forward::desc, ...) and an engine; 3.x (Ubuntu 24.04: 3.1, Debian 13)
// removed the operation descriptors and takes the same arguments directly, engine first, gives
// pooling a dilation and drops eltwise post-ops' scale. Each function here makes one descriptor
// with either, from the same arguments, so the rest of the backend is written once. The
// arithmetic asked for is the same; which implementation oneDNN dispatches to is its own choice
// in either version (tests hold every op to the double-precision reference, whichever), except
// that from 3.7 on the convolutions' forward and backward-data passes skip the direct JIT
// implementations (onednn_impls.h says why).
#pragma once

#include <dnnl_version.h>

#include <dnnl.hpp>
#include <string>

#include "core/cpu/onednn_impls.h"
#include "core/error.h"

namespace paralab::cpu::onednn {

using dnnl::memory;

// oneDNN 3.7 or later (Debian 13 has 3.7.2), where the CPU backend works around what that
// version computes wrong (onednn_impls.h; conv_relu_pool.cpp, cpu_device.cpp). Ubuntu 24.04's
// 3.1 and the 2.x releases pass every test as oneDNN dispatches by itself.
inline constexpr bool kOneDnn37 = DNNL_VERSION_MAJOR > 3 ||
                                  (DNNL_VERSION_MAJOR == 3 && DNNL_VERSION_MINOR >= 7);

// `pd` moved on to oneDNN's next implementation of the same problem while its own is a direct
// JIT convolution, from oneDNN 3.7 on (onednn_impls.h); unchanged before. The reference
// implementation is always among the candidates, so one is found.
template <typename PrimitiveDesc>
PrimitiveDesc without_direct_jit(PrimitiveDesc pd, const char* what) {
  if (!kOneDnn37) return pd;
  while (is_direct_jit_conv(pd.impl_info_str()))
    if (!pd.next_impl())
      throw Error(std::string(what) + ": oneDNN offers no implementation but " +
                  pd.impl_info_str() + ", which the CPU backend does not use from oneDNN 3.7 on");
  return pd;
}

inline dnnl::convolution_forward::primitive_desc conv_forward(
    const dnnl::engine& eng, const memory::desc& src, const memory::desc& weights,
    const memory::desc& bias, const memory::desc& dst, const memory::dims& strides,
    const memory::dims& pad_l, const memory::dims& pad_r, const dnnl::primitive_attr& attr) {
  constexpr auto prop = dnnl::prop_kind::forward_training;
  constexpr auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  return without_direct_jit(
      dnnl::convolution_forward::primitive_desc(eng, prop, alg, src, weights, bias, dst, strides,
                                                pad_l, pad_r, attr),
      "convolution forward");
#else
  return {
      dnnl::convolution_forward::desc(prop, alg, src, weights, bias, dst, strides, pad_l, pad_r),
      attr, eng};
#endif
}

inline dnnl::convolution_backward_weights::primitive_desc conv_backward_weights(
    const dnnl::engine& eng, const memory::desc& src, const memory::desc& diff_weights,
    const memory::desc& diff_bias, const memory::desc& diff_dst, const memory::dims& strides,
    const memory::dims& pad_l, const memory::dims& pad_r,
    const dnnl::convolution_forward::primitive_desc& hint, const dnnl::primitive_attr& attr) {
  constexpr auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  return {eng, alg, src, diff_weights, diff_bias, diff_dst, strides, pad_l, pad_r, hint, attr};
#else
  return {dnnl::convolution_backward_weights::desc(alg, src, diff_weights, diff_bias, diff_dst,
                                                   strides, pad_l, pad_r),
          attr, eng, hint};
#endif
}

inline dnnl::convolution_backward_data::primitive_desc conv_backward_data(
    const dnnl::engine& eng, const memory::desc& diff_src, const memory::desc& weights,
    const memory::desc& diff_dst, const memory::dims& strides, const memory::dims& pad_l,
    const memory::dims& pad_r, const dnnl::convolution_forward::primitive_desc& hint,
    const dnnl::primitive_attr& attr) {
  constexpr auto alg = dnnl::algorithm::convolution_direct;
#if DNNL_VERSION_MAJOR >= 3
  return without_direct_jit(
      dnnl::convolution_backward_data::primitive_desc(eng, alg, diff_src, weights, diff_dst,
                                                      strides, pad_l, pad_r, hint, attr),
      "convolution backward data");
#else
  return {dnnl::convolution_backward_data::desc(alg, diff_src, weights, diff_dst, strides, pad_l,
                                                pad_r),
          attr, eng, hint};
#endif
}

// Pooling without dilation (oneDNN 3.x's dilation 0: adjacent elements).
inline dnnl::pooling_forward::primitive_desc pool_forward(
    const dnnl::engine& eng, dnnl::algorithm alg, const memory::desc& src, const memory::desc& dst,
    const memory::dims& strides, const memory::dims& kernel, const memory::dims& pad_l,
    const memory::dims& pad_r, const dnnl::primitive_attr& attr) {
  constexpr auto prop = dnnl::prop_kind::forward_training;
#if DNNL_VERSION_MAJOR >= 3
  const memory::dims dilation(kernel.size(), 0);
  return {eng, prop, alg, src, dst, strides, kernel, dilation, pad_l, pad_r, attr};
#else
  return {dnnl::pooling_forward::desc(prop, alg, src, dst, strides, kernel, pad_l, pad_r), attr,
          eng};
#endif
}

inline dnnl::pooling_backward::primitive_desc pool_backward(
    const dnnl::engine& eng, dnnl::algorithm alg, const memory::desc& diff_src,
    const memory::desc& diff_dst, const memory::dims& strides, const memory::dims& kernel,
    const memory::dims& pad_l, const memory::dims& pad_r,
    const dnnl::pooling_forward::primitive_desc& hint, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  const memory::dims dilation(kernel.size(), 0);
  return {eng, alg, diff_src, diff_dst, strides, kernel, dilation, pad_l, pad_r, hint, attr};
#else
  return {dnnl::pooling_backward::desc(alg, diff_src, diff_dst, strides, kernel, pad_l, pad_r),
          attr, eng, hint};
#endif
}

// C = A B (+ bias, when given).
inline dnnl::matmul::primitive_desc matmul(const dnnl::engine& eng, const memory::desc& a,
                                           const memory::desc& b, const memory::desc* bias,
                                           const memory::desc& c,
                                           const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return bias ? dnnl::matmul::primitive_desc(eng, a, b, *bias, c, attr)
              : dnnl::matmul::primitive_desc(eng, a, b, c, attr);
#else
  return {bias ? dnnl::matmul::desc(a, b, *bias, c) : dnnl::matmul::desc(a, b, c), attr, eng};
#endif
}

// max(x, 0) applied to a primitive's output.
inline void append_relu(dnnl::post_ops& ops) {
#if DNNL_VERSION_MAJOR >= 3
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
#else
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
#endif
}

}  // namespace paralab::cpu::onednn
