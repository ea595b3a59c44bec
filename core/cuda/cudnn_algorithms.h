// cuDNN helpers shared by the convolution ops (conv_relu_pool.cpp, conv2d.cpp): NCHW tensor
// descriptors, the names of the algorithms, and the rule that picks them.
//
// The rule, not a timed search: cuDNN's heuristic ranking for the shape (cudnnGet*_v7, a pure
// function of cuDNN's version, the GPU and the shape), the first algorithm that is deterministic
// and not a Winograd variant (conv_relu_pool.cpp says why, with the measurements) and whose
// workspace query succeeds with the math it will run with. PARALAB_CUDNN_RULE=gemm takes the
// first such algorithm of the ranking that is not an FFT one (FFT, FFT_TILING), where there is
// one: on the H200 the heuristic chose FFT for both convolutions' filter gradients and FFT_TILING
// for conv2's data gradient, whose transforms and complex GEMMs took 246 of the 1,329 us of
// kernel time in the profiled window (18 %; results/reference/h200-2026-12-04/ncu-step-cudnn.txt),
// a third of what remains beside cuDNN's bias-gradient kernels (575 us, replaced since); the rule
// stays a pure function of the ranking either way (the same bits run after run).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/cuda/check.h"

namespace paralab::cuda {

inline cudnnTensorDescriptor_t tensor4(int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnTensorDescriptor_t d;
  PARALAB_CUDNN(cudnnCreateTensorDescriptor(&d));
  const cudnnStatus_t set = cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                       int(n), int(c), int(h), int(w));
  if (set != CUDNN_STATUS_SUCCESS) cudnnDestroyTensorDescriptor(d);  // not leaked on the throw
  PARALAB_CUDNN(set);
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

// The FFT algorithms of each direction (PARALAB_CUDNN_RULE=gemm passes them over).
inline bool fft(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}
inline bool fft(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
}
inline bool fft(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING;
}

// PARALAB_CUDNN_RULE: unset or "heuristic" -> the ranking's first usable algorithm; "gemm" -> its
// first usable one that is not FFT, where there is one. Any other value is an Error naming the
// variable.
enum class CudnnRule { Heuristic, Gemm };
inline CudnnRule cudnn_rule() {
  const char* v = std::getenv("PARALAB_CUDNN_RULE");
  if (!v || !*v || std::string_view(v) == "heuristic") return CudnnRule::Heuristic;
  if (std::string_view(v) == "gemm") return CudnnRule::Gemm;
  throw Error("PARALAB_CUDNN_RULE: '" + std::string(v) + "' is neither heuristic nor gemm");
}
inline const char* rule_name(CudnnRule r) { return r == CudnnRule::Gemm ? "gemm" : "heuristic"; }

// The algorithms cuDNN documents as non-deterministic (cudnn_ops.h: they use atomics), left out
// whatever a ranking's `determinism` field says of them.
inline bool deterministic(cudnnConvolutionFwdAlgo_t) { return true; }
inline bool deterministic(cudnnConvolutionBwdDataAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
}
inline bool deterministic(cudnnConvolutionBwdFilterAlgo_t a) {
  return a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && a != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// The first of cuDNN's heuristic ranking that is usable, deterministic and accurate, and whose
// workspace query, `size(algo, &bytes)` with `conv`'s math type set to what it will run with
// (FMA; with tf32, the ranking's), succeeds: the ranking predicts and runs nothing, and an entry
// it calls usable can still be refused for the shape or the math (tensorflow/tensorflow#48117).
// Sets *math and *bytes to the chosen one's.
// With CudnnRule::Gemm the same, over the ranking without its FFT algorithms first, then, where
// none of the others is usable, over the FFT ones.
template <typename Perf, typename Size>
Perf first_usable(const Perf* ranked, int count, const char* what, bool tf32,
                  cudnnConvolutionDescriptor_t conv, Size&& size, cudnnMathType_t* math,
                  std::size_t* bytes, CudnnRule rule = CudnnRule::Heuristic) {
  std::string refused;
  const int passes = rule == CudnnRule::Gemm ? 2 : 1;
  for (int pass = 0; pass < passes; ++pass)
    for (int i = 0; i < count; ++i) {
      const Perf& p = ranked[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.determinism != CUDNN_DETERMINISTIC ||
          !accurate(p.algo) || !deterministic(p.algo))
        continue;
      // Gemm: FFT algorithms only in the second pass; the heuristic takes the ranking as it is.
      if (passes == 2 && fft(p.algo) != (pass == 1)) continue;
      const cudnnMathType_t m = tf32 ? p.mathType : CUDNN_FMA_MATH;
      cudnnStatus_t st = cudnnSetConvolutionMathType(conv, m);
      if (st == CUDNN_STATUS_SUCCESS) st = size(p.algo, bytes);
      if (st == CUDNN_STATUS_SUCCESS) {
        *math = m;
        return p;
      }
      refused += std::string(refused.empty() ? "" : ", ") + algo_name(p.algo) + " (" +
                 cudnnGetErrorString(st) + ")";
    }
  throw Error(std::string("cuDNN: no deterministic, accurate ") + what +
              " algorithm for this shape" + (refused.empty() ? "" : "; refused: " + refused));
}

// One convolution's algorithms in its three directions (x -> y by w under `conv`), by the rule
// above, with each direction's math type (FMA; with tf32, what the ranking chose) and the
// workspace the largest needs, from cuDNN's size queries (the ranking's own figures are
// estimates). It leaves `conv`'s math type at the filter direction's: callers set it per call.
struct ConvAlgorithms {
  CudnnRule rule = CudnnRule::Heuristic;
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
          {"rule", rule_name(a.rule)},
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
  a.rule = cudnn_rule();
  int got = 0;
  std::size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
      h, x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fwd));
  a.fwd = first_usable(
              fwd, got, "forward", tf32, conv,
              [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
                return cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, algo, bytes);
              },
              &a.fwd_math, &fwd_ws, a.rule)
              .algo;
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, data));
  a.data = first_usable(
               data, got, "backward-data", tf32, conv,
               [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
                 return cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, algo, bytes);
               },
               &a.data_math, &data_ws, a.rule)
               .algo;
  cudnnConvolutionBwdFilterAlgoPerf_t filt[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  PARALAB_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, x, y, conv, w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, filt));
  a.filter =
      first_usable(
          filt, got, "backward-filter", tf32, conv,
          [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, algo, bytes);
          },
          &a.filter_math, &filter_ws, a.rule)
          .algo;
  a.workspace_bytes = std::max({fwd_ws, data_ws, filter_ws, std::size_t{4}});
  return a;
}

}  // namespace paralab::cuda
