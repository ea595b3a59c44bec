// Which of oneDNN's convolution implementations the CPU backend leaves out, by the name a
// primitive descriptor gives (impl_info_str()); plain strings, so that tests can check the rule
// without oneDNN's headers.
//
// From oneDNN 3.7 on, the direct JIT convolutions, named "jit:<isa>" ("jit:avx512_core",
// "jit:avx2"; not the "jit_1x1:", "jit_dw:", brgemm "brg..." or "x64:gemm:jit" ones), are not
// used for the forward and backward-data passes. Debian 13's oneDNN 3.7.2 computes both wrong
// with them, on AVX-512 and on AVX2 alike (an AVX-512 AMD EPYC VM, every implementation of 11
// geometries against a double-precision reference at 1 thread): the backward data of every
// geometry but one, off in 2,520 of 2,592 values for 4 channels and a 3x2 filter; the forward of
// LeNet's conv2 (20 -> 50 channels, 5x5) and of 40- and 70-channel inputs, by up to 28 on values
// of order 1. With 2 threads the same problems are sometimes right, and data_parallel's tests
// crashed inside them. Its brgemm, gemm and reference implementations of the same problems, and
// its direct JIT backward weights, agree with the reference. On the same VM oneDNN 2.6 (Debian
// 12) picks the same direct JIT kernel for backward data and computes it right, and with 3.1
// (Ubuntu 24.04) every test passes; both keep these kernels.
#pragma once

#include <string_view>

namespace paralab::cpu::onednn {

// Whether `impl` is one of the direct JIT convolutions described above.
inline bool is_direct_jit_conv(std::string_view impl) { return impl.starts_with("jit:"); }

}  // namespace paralab::cpu::onednn
