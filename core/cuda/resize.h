// Launcher of the CUDA resize kernel (resize_kernels.cuh, launched by resize.cu), with an
// explicit stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace paralab::cuda {

// x (planes,h,w) -> y (planes,oh,ow), nearest or bilinear with half-pixel centres (the rules of
// core/resize_coords.h, stated at Resize in core/ops.h).
void resize_images(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t oh,
                   int64_t ow, bool bilinear, cudaStream_t s);

}  // namespace paralab::cuda
