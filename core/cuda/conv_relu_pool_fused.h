// Launchers of ParaLab's own conv -> ReLU -> avgpool kernels (conv_relu_pool_kernels.cuh): plain
// pointers, the geometry of conv_relu_pool_plan.h and an explicit stream; each checks its launch.
// The op that owns the buffers is fused_conv_relu_pool.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/conv_relu_pool_plan.h"

namespace paralab::cuda::crp {

// make_geometry from a tensor's 64-bit dimensions; throws where one of them, or c r s, does not
// fit the kernels' int (before anything is computed from it).
Geometry checked_geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r,
                          int64_t s);

// y (N,K,PH,PW) and mask (N,K,PH,PW) bytes from x (N,C,H,W), w (K,C,R,S), b (K): the direct
// kernel for small filters, the implicit GEMM otherwise. `tiles` is one of kTileSets (every set
// gives the same bits).
void forward(const Geometry& g, const TileSet& tiles, const float* x, const float* w,
             const float* b, float* y, uint8_t* mask, cudaStream_t s);

// dw (K,C,R,S) and db (K). partial holds partial_floats(g) floats. dconv (N,K,OH,OW) is written
// and used by the GEMM path (filters of more than kDirectMaxCrs values) and ignored by the direct
// one, which may be given null.
void backward_weights(const Geometry& g, const TileSet& tiles, const float* x, const float* dy,
                      const uint8_t* mask, float* dconv, float* partial, float* dw, float* db,
                      cudaStream_t s);

// dconv (N,K,OH,OW) from dy and mask: what backward_data reads. backward_weights' GEMM path
// writes it too; call this one when that path did not run (small filters).
void conv_grads(const Geometry& g, const float* dy, const uint8_t* mask, float* dconv,
                cudaStream_t s);

// dx (N,C,H,W) from dconv (N,K,OH,OW) and w (K,C,R,S), through cols, a buffer of
// cols_floats(g) floats (the columns of one slice of the batch at a time).
void backward_data(const Geometry& g, const TileSet& tiles, const float* dconv, const float* w,
                   float* cols, float* dx, cudaStream_t s);

// Around another library's convolution (the cuDNN path): conv is the whole conv output
// (N,K,H-R+1,W-S+1) without bias. y (N,K,PH,PW) and mask (N,K,PH,PW) bytes from it and b, in
// one pass.
void bias_relu_pool(const Geometry& g, const float* conv, const float* b, float* y, uint8_t* mask,
                    cudaStream_t s);

// d(loss)/d(conv output) (N,K,H-R+1,W-S+1) from dy and mask, 0 where no pool window reads, and
// the bias gradient db (K) = its sums over examples and positions, with the bits of
// channel_sums over dconv (kernels.h) in one pass less: partial holds
// channel_sums_partition(N, K).parts * K floats.
void relu_pool_backward(const Geometry& g, const float* dy, const uint8_t* mask, float* dconv,
                        float* partial, float* db, cudaStream_t s);

}  // namespace paralab::cuda::crp
