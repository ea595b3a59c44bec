// cuBLAS and cuBLASLt, loaded on first use (dlopen) instead of linked.
//
// Linked, libcublasLt's load-time work costs every process about 0.4 s before main (an empty C
// program: 0.00 s alone, 0.41 s linked to libcublasLt.so.13; measured 2026-12-05 on a 2-core AMD
// EPYC VM), paid by each test process and each CPU-only run of a build with the CUDA backend.
// Only a process that creates a CUDA device needs cuBLAS, so CudaDevice's constructor loads it.
//
// Call sites name the functions as cublas_v2.h spells them, through blas():
//   PARALAB_CUBLAS(blas().cublasSgemm(handle, ...));
// (cublas_v2.h maps cublasSgemm to the exported cublasSgemm_v2, the member's name).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

// Every cuBLAS(Lt) function ParaLab calls, by its exported name.
#define PARALAB_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)                \
  X(cublasDestroy_v2)               \
  X(cublasGetProperty)              \
  X(cublasSetStream_v2)             \
  X(cublasSetWorkspace_v2)          \
  X(cublasSetMathMode)              \
  X(cublasSgemm_v2)                 \
  X(cublasSaxpy_v2)
#define PARALAB_CUBLASLT_FUNCTIONS(X)     \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulAlgoConfigGetAttribute)

namespace paralab::cuda {

struct CublasApi {
#define PARALAB_CUBLAS_MEMBER(f) decltype(&::f) f = nullptr;
  PARALAB_CUBLAS_FUNCTIONS(PARALAB_CUBLAS_MEMBER)
  PARALAB_CUBLASLT_FUNCTIONS(PARALAB_CUBLAS_MEMBER)
#undef PARALAB_CUBLAS_MEMBER
};

// The functions of libcublasLt.so.<major> and libcublas.so.<major> (the headers' major version),
// loaded by the first call (thread-safe). Each library is looked for by its name (the dynamic
// loader's search: LD_LIBRARY_PATH, the program's run path, the system's), then in the directory
// the build found it in. Throws paralab::Error naming the library, where it was looked for and
// why it failed (a later call tries again).
const CublasApi& blas();

// The handle of lib<stem>.so.<major>, looked for by name, then in `dir` (if not empty); throws
// paralab::Error naming the file, where it was looked for and dlerror()'s reasons.
void* open_cuda_library(const std::string& stem, int major, const std::string& dir);

// Whether blas() has loaded the libraries in this process.
bool blas_loaded();

// "major.minor" of the loaded cuBLAS, or of the headers the build used where this process has
// not loaded it (a process that used no CUDA device).
std::string blas_version();

}  // namespace paralab::cuda
