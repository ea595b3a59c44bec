// cuDNN helpers shared by the convolution ops (conv_relu_pool.cpp, conv2d.cpp): NCHW tensor
// descriptors, the names of the algorithms, and the rule that picks them.
//
// The rule, not a timed search: cuDNN's heuristic ranking for the shape (cudnnGet*_v7, a pure
// function of cuDNN's version, the GPU and the shape), the first algorithm that is deterministic
// and not a Winograd variant (conv_relu_pool.cpp says why, with the measurements).
#pragma once

#include <cstdint>
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

}  // namespace paralab::cuda
