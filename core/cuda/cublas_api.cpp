#include "core/cuda/cublas_api.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/error.h"

#ifndef PARALAB_CUBLAS_DIR
#define PARALAB_CUBLAS_DIR ""
#endif

namespace paralab::cuda {
namespace {

std::atomic<const CublasApi*> g_loaded{nullptr};

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

const CublasApi* load() {
  // cuBLASLt first: libcublas needs it and finds it loaded by its name.
  void* lt = open_library("cublasLt");
  void* cublas = open_library("cublas");
  auto* api = new CublasApi;  // lives as long as the process, as the libraries do
#define PARALAB_RESOLVE_CUBLAS(f) resolve(cublas, "libcublas", #f, api->f);
#define PARALAB_RESOLVE_CUBLASLT(f) resolve(lt, "libcublasLt", #f, api->f);
  try {
    PARALAB_CUBLAS_FUNCTIONS(PARALAB_RESOLVE_CUBLAS)
    PARALAB_CUBLASLT_FUNCTIONS(PARALAB_RESOLVE_CUBLASLT)
  } catch (...) {
    delete api;
    throw;
  }
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
  if (const CublasApi* api = g_loaded.load(std::memory_order_acquire)) return *api;
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  if (const CublasApi* api = g_loaded.load(std::memory_order_acquire)) return *api;
  const CublasApi* api = load();
  g_loaded.store(api, std::memory_order_release);
  return *api;
}

bool blas_loaded() { return g_loaded.load(std::memory_order_acquire) != nullptr; }

std::string blas_version() {
  int major = CUBLAS_VER_MAJOR, minor = CUBLAS_VER_MINOR;
  if (blas_loaded()) {
    blas().cublasGetProperty(MAJOR_VERSION, &major);
    blas().cublasGetProperty(MINOR_VERSION, &minor);
  }
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace paralab::cuda
