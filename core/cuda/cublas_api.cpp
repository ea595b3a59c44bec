#include "core/cuda/cublas_api.h"

#include <dlfcn.h>

#include <atomic>
#include <string>

#include "core/error.h"

#ifndef PARALAB_CUBLAS_DIR
#define PARALAB_CUBLAS_DIR ""
#endif

namespace paralab::cuda {
namespace {

std::atomic<bool> g_loaded{false};

void* open_library(const std::string& stem) {
  return open_cuda_library(stem, CUBLAS_VER_MAJOR, PARALAB_CUBLAS_DIR);
}

template <typename F>
void resolve(void* library, const char* library_name, const char* symbol, F& out) {
  dlerror();
  out = reinterpret_cast<F>(dlsym(library, symbol));
  if (out == nullptr)
    throw Error(std::string("cuBLAS: ") + library_name + " has no " + symbol +
                " (an older cuBLAS than the headers the build used?)");
}

CublasApi load() {
  // cuBLASLt first: libcublas needs it and finds it loaded by its name.
  void* lt = open_library("cublasLt");
  void* cublas = open_library("cublas");
  CublasApi api;
#define PARALAB_RESOLVE_CUBLAS(f) resolve(cublas, "libcublas", #f, api.f);
#define PARALAB_RESOLVE_CUBLASLT(f) resolve(lt, "libcublasLt", #f, api.f);
  PARALAB_CUBLAS_FUNCTIONS(PARALAB_RESOLVE_CUBLAS)
  PARALAB_CUBLASLT_FUNCTIONS(PARALAB_RESOLVE_CUBLASLT)
#undef PARALAB_RESOLVE_CUBLAS
#undef PARALAB_RESOLVE_CUBLASLT
  return api;
}

}  // namespace

void* open_cuda_library(const std::string& stem, int major, const std::string& dir) {
  const std::string name = "lib" + stem + ".so." + std::to_string(major);
  if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  std::string why = dlerror();
  if (!dir.empty()) {
    if (void* h = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    why += "; " + std::string(dlerror());
  }
  throw Error("cuBLAS: cannot load " + name + " (looked for by name" +
              (dir.empty() ? "" : " and in " + dir) + "): " + why +
              "; it comes with the CUDA Toolkit: put its directory in LD_LIBRARY_PATH");
}

const CublasApi& blas() {
  // A static's initialisation runs once, under the compiler's lock; one that throws is tried
  // again by the next call.
  static const CublasApi api = [] {
    const CublasApi loaded = load();
    g_loaded.store(true, std::memory_order_release);
    return loaded;
  }();
  return api;
}

bool blas_loaded() { return g_loaded.load(std::memory_order_acquire); }

std::string blas_version() {
  int major = CUBLAS_VER_MAJOR, minor = CUBLAS_VER_MINOR;
  if (blas_loaded()) {
    blas().cublasGetProperty(MAJOR_VERSION, &major);
    blas().cublasGetProperty(MINOR_VERSION, &minor);
  }
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace paralab::cuda
