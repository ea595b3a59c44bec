// PARALAB_HOST_DEVICE marks small pure functions that the CPU backend, the CUDA kernels and the
// double-precision reference all call (the dropout mask, resize coordinates), so that the three
// compute them with the same code.
#pragma once

#if defined(__CUDACC__)
#define PARALAB_HOST_DEVICE __host__ __device__
#else
#define PARALAB_HOST_DEVICE
#endif
