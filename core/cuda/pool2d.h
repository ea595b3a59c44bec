// Launchers of ParaLab's own pooling kernels (pool2d_kernels.cuh): max and average, any window,
// stride and symmetric padding, floor mode, with the conventions stated at Pool2d in
// core/ops.h. Each takes an explicit stream and checks its launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/pool2d_geometry.h"

namespace paralab::cuda {

// Max: y = the first maximum of each window (row by row, left to right); argmax (planes,oh,ow)
// = its index h * w + v within the plane, unless null.
void maxpool2d_forward(const float* x, float* y, int32_t* argmax, const PoolGeometry& g,
                       cudaStream_t s);
// dx (planes,h,w) = the sum of dy over the windows whose argmax is that element.
void maxpool2d_backward(const float* dy, const int32_t* argmax, float* dx, const PoolGeometry& g,
                        cudaStream_t s);
// Average with the padding counted: y = window sum / (kh * kw).
void avgpool2d_forward(const float* x, float* y, const PoolGeometry& g, cudaStream_t s);
// dx = the sum of dy / (kh * kw) over the windows that hold the element.
void avgpool2d_backward(const float* dy, float* dx, const PoolGeometry& g, cudaStream_t s);

}  // namespace paralab::cuda
