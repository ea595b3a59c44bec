// The geometry of one pooling for ParaLab's own pooling kernels (pool2d_kernels.cuh). Plain C++,
// so that the CPU emulation test (tests/test_model_kernels.cpp) builds it as the op does.
#pragma once

#include <cstdint>

namespace paralab::cuda {

// x (planes,h,w) -> y (planes,oh,ow), planes = N * C; window kh x kw, stride sh x sw, symmetric
// padding ph x pw, floor mode (oh = (h + 2 ph - kh) / sh + 1).
struct PoolGeometry {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
};

}  // namespace paralab::cuda
