// cuDNN helpers shared by the convolution ops (conv_relu_pool.cpp, conv2d.cpp): NCHW tensor
// descriptors, the names of the algorithms, and the rule that picks them.
//
// The rule, not a timed search: cuDNN's heuristic ranking for the shape (cudnnGet*_v7, a pure
// function of cuDNN's version, the GPU and the shape), the first algorithm that is deterministic
// and not a Winograd variant (conv_relu_pool.cpp says why, with the measurements).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cuda/check.h"

namespace paralab::cuda {

inline cudnnTensorDescriptor_t tensor4(int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnTensorDescriptor_t d;
  PARALAB_CUDNN(cudnnCreateTensorDescriptor(&d));
  PARALAB_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, int(n), int(c),
                                           int(h), int(w)));
  return d;
}

inline const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static constexpr const char* kNames[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return a >= 0 && a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? kNames[a] : "unknown";
}
inline const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static constexpr const char* kNames[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                           "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT ? kNames[a] : "unknown";
}
inline const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static constexpr const char* kNames[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT ? kNames[a] : "unknown";
}

// Winograd transforms amplify rounding: never chosen (measured in conv_relu_pool.cpp).
inline bool accurate(cudnnConvolutionFwdAlgo_t a) {
  return a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD &&
         a != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
inline bool accurate(cudnnConvolutionBwdDataAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
         a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
inline bool accurate(cudnnConvolutionBwdFilterAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD &&
         a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The first of cuDNN's heuristic ranking that is usable, deterministic and accurate.
template <typename Perf>
Perf first_deterministic(const Perf* ranked, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (ranked[i].status == CUDNN_STATUS_SUCCESS && ranked[i].determinism == CUDNN_DETERMINISTIC &&
        accurate(ranked[i].algo))
      return ranked[i];
  throw Error(std::string("cuDNN: no deterministic, accurate ") + what +
              " algorithm for this shape");
}

// One convolution's algorithms in its three directions (x -> y by w under `conv`), by the rule
// above, with each direction's math type (FMA; with tf32, what the ranking chose) and the
// workspace the largest needs, from cuDNN's size queries (the ranking's own figures are
// estimates). It leaves `conv`'s math type at the filter direction's: callers set it per call.
struct ConvAlgorithms {
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t data{};
  cudnnConvolutionBwdFilterAlgo_t filter{};
  cudnnMathType_t fwd_math = CUDNN_FMA_MATH, data_math = CUDNN_FMA_MATH,
                  filter_math = CUDNN_FMA_MATH;
  std::size_t workspace_bytes = 0;  // at least 4
};

// What the results record of a convolution's choice (device_list[].ops): the algorithm per
// direction, the math and the workspace.
inline nlohmann::json describe(const ConvAlgorithms& a, bool tf32) {
  return {{"kernels", "cudnn"},
          {"forward", algo_name(a.fwd)},
          {"backward_data", algo_name(a.data)},
          {"backward_filter", algo_name(a.filter)},
          {"math", tf32 ? "tf32 allowed" : "fma"},
          {"workspace_bytes", a.workspace_bytes}};
}

inline ConvAlgorithms choose_conv_algorithms(cudnnHandle_t h, cudnnTensorDescriptor_t x,
                                             cudnnFilterDescriptor_t w,
                                             cudnnConvolutionDescriptor_t conv,
                                             cudnnTensorDescriptor_t y, bool tf32) {
  ConvAlgorithms a;
  int got = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
      h, x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fwd));
  const auto f = first_deterministic(fwd, got, "forward");
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data));
  const auto dd = first_deterministic(data, got, "backward-data");
  cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filt));
  const auto ff = first_deterministic(filt, got, "backward-filter");
  a.fwd = f.algo;
  a.data = dd.algo;
  a.filter = ff.algo;
  if (tf32) {
    a.fwd_math = f.mathType;
    a.data_math = dd.mathType;
    a.filter_math = ff.mathType;
  }
  std::size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
  PARALAB_CUDNN(cudnnSetConvolutionMathType(conv, a.fwd_math));
  PARALAB_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, a.fwd, &fwd_ws));
  PARALAB_CUDNN(cudnnSetConvolutionMathType(conv, a.data_math));
  PARALAB_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, a.data, &data_ws));
  PARALAB_CUDNN(cudnnSetConvolutionMathType(conv, a.filter_math));
  PARALAB_CUDNN(
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, a.filter, &filter_ws));
  a.workspace_bytes = std::max({fwd_ws, data_ws, filter_ws, std::size_t{4}});
  return a;
}

}  // namespace paralab::cuda
