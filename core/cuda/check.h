// The check macros of the CUDA backend, all built on throw_library_error (core/error.h):
// message = library, error name and string, the call's text, file:line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "core/error.h"

namespace paralab::cuda {

const char* cublas_status_name(cublasStatus_t status);

}  // namespace paralab::cuda

// A failed call also leaves its error in the thread's last-error slot, where the next
// PARALAB_CUDA_LAUNCHED on this thread (another run's, another device's) would report it as its
// own: the slot is cleared before throwing (a sticky error stays: every later call returns it).
// The same after a failed cuDNN or cuBLAS call, whose runtime calls may share the slot.
// A call on a capture that another call invalidated throws CaptureInvalidated (core/error.h).
#define PARALAB_CUDA(call)                                                                  \
  do {                                                                                      \
    const cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      (void)cudaGetLastError();                                                             \
      ::paralab::throw_library_error(                                                       \
          "CUDA", std::string(cudaGetErrorName(e_)) + ": " + cudaGetErrorString(e_), #call, \
          __FILE__, __LINE__, e_ == cudaErrorStreamCaptureInvalidated);                     \
    }                                                                                       \
  } while (0)

#define PARALAB_CUDNN(call)                                                                        \
  do {                                                                                             \
    const cudnnStatus_t e_ = (call);                                                               \
    if (e_ != CUDNN_STATUS_SUCCESS) {                                                              \
      (void)cudaGetLastError();                                                                    \
      ::paralab::throw_library_error("cuDNN", cudnnGetErrorString(e_), #call, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)

#define PARALAB_CUBLAS(call)                                                                   \
  do {                                                                                         \
    const cublasStatus_t e_ = (call);                                                          \
    if (e_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      (void)cudaGetLastError();                                                                \
      ::paralab::throw_library_error("cuBLAS", ::paralab::cuda::cublas_status_name(e_), #call, \
                                     __FILE__, __LINE__);                                      \
    }                                                                                          \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define PARALAB_CUDA_LAUNCHED() PARALAB_CUDA(cudaGetLastError())
