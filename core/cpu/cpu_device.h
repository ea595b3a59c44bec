// The CPU backend's device: a oneDNN engine and stream plus a fixed number of worker threads
// (OpenMP, the runtime Debian's oneDNN is built with). k CPU devices driven from k host threads
// map to k disjoint thread teams, so k devices can be given k cores.
#pragma once

#include <dnnl.hpp>
#include <memory>

#include "core/device.h"
#include "core/ops.h"

namespace paralab::cpu {

class CpuDevice final : public Device {
 public:
  CpuDevice(int ordinal, int threads);
  ~CpuDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override;
  nlohmann::json describe() const override;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr) noexcept override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override;
  void fill_zero(void* dst, std::size_t bytes) override;
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t rows) override;
  void synchronize() override;
  void bind_thread() override;
  Ops& ops() override { return *ops_; }

  int threads() const { return threads_; }
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

 private:
  int ordinal_;
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unique_ptr<Ops> ops_;
};

// Rethrows a oneDNN exception as paralab::Error naming the op.
[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const char* op, const char* file, int line);

std::string onednn_version();
// e.g. "avx512_core", "avx2", "sse41": the instruction set oneDNN's kernels use here.
std::string onednn_cpu_isa();

}  // namespace paralab::cpu

// Runs a block of oneDNN calls; a dnnl::error becomes a paralab::Error naming `op` and file:line.
#define PARALAB_DNNL(op, ...)                                   \
  do {                                                          \
    try {                                                       \
      __VA_ARGS__;                                              \
    } catch (const dnnl::error& e_) {                           \
      ::paralab::cpu::rethrow_dnnl(e_, op, __FILE__, __LINE__); \
    }                                                           \
  } while (0)
