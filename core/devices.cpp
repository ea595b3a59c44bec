// The backend registry: names -> device factories. The only file of core/ outside a backend
// folder that knows the backends exist.
#include <algorithm>
#include <functional>
#include <map>

#if PARALAB_HAVE_CPU
#include "core/cpu/cpu_device.h"
#endif
#if PARALAB_HAVE_CUDA
#include "core/cuda/cuda_device.h"
#endif
#include "core/device.h"
#include "core/error.h"

namespace paralab {

namespace {

using Factory = std::function<std::vector<std::unique_ptr<Device>>(int, const DeviceOptions&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
#if PARALAB_HAVE_CPU
    {"cpu",
     [](int count, const DeviceOptions& o) {
       std::vector<std::unique_ptr<Device>> devices;
       for (int i = 0; i < count; ++i)
         devices.push_back(std::make_unique<cpu::CpuDevice>(i, o.threads_per_device));
       return devices;
     }},
#endif
#if PARALAB_HAVE_CUDA
    {"cuda", [](int count, const DeviceOptions& o) { return cuda::make_cuda_devices(count, o); }},
#endif
  };
  return r;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::vector<std::string> known_backends() {
  std::vector<std::string> names{"auto"};
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

// "auto": CUDA when this build has it and a GPU is usable (an old driver counts as none), else
// the CPU.
std::string resolve_backend(const std::string& backend) {
#if PARALAB_HAVE_CUDA
  if (backend == "auto") return cuda::usable_gpus() > 0 || !PARALAB_HAVE_CPU ? "cuda" : "cpu";
#else
  if (backend == "auto") return "cpu";
#endif
  if (!registry().contains(backend))
    throw Error("unknown backend '" + backend + "' (known: " + joined(known_backends()) + ")");
  return backend;
}

std::vector<std::unique_ptr<Device>> make_devices(const std::string& backend, int count,
                                                  const DeviceOptions& options) {
  PARALAB_REQUIRE(count >= 1, "devices must be >= 1, got " + std::to_string(count));
  return registry().at(resolve_backend(backend))(count, options);
}

std::string backend_unavailable(const std::string& backend) {
  if (backend == "auto") return "";
  if (backend == "cpu")
    return PARALAB_HAVE_CPU ? "" : "the CPU backend is not built (PARALAB_WITH_CPU=OFF)";
#if PARALAB_HAVE_CUDA
  if (backend == "cuda") {
    std::string why;
    return cuda::usable_gpus(&why) > 0 ? "" : why;
  }
#endif
  return "backend '" + backend + "' is not built into this ParaLab";
}

int usable_gpu_count() {
#if PARALAB_HAVE_CUDA
  return cuda::usable_gpus();
#else
  return 0;
#endif
}

nlohmann::json usable_gpu_properties() {
#if PARALAB_HAVE_CUDA
  return cuda::gpu_properties();
#else
  return nlohmann::json::array();
#endif
}

std::string gpu_per_rank_shortfall(int ranks_on_node, int gpus) {
  if (ranks_on_node <= gpus) return "";
  if (gpus <= 0) return "cuda: no usable GPU on this node";
  return "cuda: " + std::to_string(ranks_on_node) + " ranks on this node and " +
         std::to_string(gpus) +
         " GPU(s): under mpirun each rank takes the GPU of its node-local rank, and no two ranks "
         "share one (start at most " +
         std::to_string(gpus) + " per node, e.g. mpirun --map-by ppr:" + std::to_string(gpus) +
         ":node; virtual devices on one GPU are for one process: bench_runner without mpirun)";
}

nlohmann::json backend_versions() {
  nlohmann::json v = nlohmann::json::object();
#if PARALAB_HAVE_CPU
  v["onednn"] = cpu::onednn_version();
#endif
#if PARALAB_HAVE_CUDA
  v.update(cuda::library_versions());
#endif
  return v;
}

nlohmann::json onednn_cpu_isa() {
#if PARALAB_HAVE_CPU
  return cpu::onednn_cpu_isa();
#else
  return nullptr;
#endif
}

void Device::begin_capture() {
  throw Error(name() + ": this device cannot capture work (CUDA Graphs are CUDA only)");
}

std::unique_ptr<CapturedWork> Device::end_capture() {
  throw Error(name() + ": this device cannot capture work (CUDA Graphs are CUDA only)");
}

std::unique_ptr<GroupCapture> Device::capture_group(const std::vector<Device*>& group,
                                                    bool comm_streams, bool group_moves,
                                                    std::string* why_not) {
  (void)group;
  (void)comm_streams;
  (void)group_moves;
  if (why_not) *why_not = name() + " cannot capture work (CUDA Graphs are CUDA only)";
  return nullptr;
}

std::unique_ptr<GroupMover> Device::group_mover(const std::vector<Device*>& group,
                                                std::string* why_not) {
  (void)group;
  if (why_not) *why_not = name() + " moves each message on its receiver's queue";
  return nullptr;
}

void check_native_collectives(const std::string& library, const std::vector<Device*>& devices) {
  if (library != "nccl") throw Error("no collective library '" + library + "' (known: nccl)");
  PARALAB_REQUIRE(!devices.empty(), std::string("nccl: a group needs at least one device"));
  for (const Device* d : devices)
    if (d->kind() != DeviceKind::Cuda)
      throw Unavailable("nccl: needs CUDA devices, and " + d->name() + " is not one");
#if !PARALAB_HAVE_NCCL
  throw Unavailable("nccl: not built (NCCL was not found when ParaLab was configured)");
#endif
}

std::unique_ptr<NativeCollectives> make_native_collectives(const std::string& library,
                                                           const std::vector<Device*>& devices) {
  check_native_collectives(library, devices);
#if PARALAB_HAVE_NCCL
  return cuda::make_nccl(devices);
#else
  return nullptr;  // not reached: check_native_collectives threw
#endif
}

std::string native_unique_id(const std::string& library) {
  if (library != "nccl") throw Error("no collective library '" + library + "' (known: nccl)");
#if PARALAB_HAVE_NCCL
  return cuda::nccl_unique_id();
#else
  throw Unavailable("nccl: not built (NCCL was not found when ParaLab was configured)");
#endif
}

std::unique_ptr<NativePointToPoint> make_native_point_to_point(const std::string& library,
                                                               Device& device,
                                                               const std::string& unique_id,
                                                               int rank, int size) {
  check_native_collectives(library, {&device});
#if PARALAB_HAVE_NCCL
  return cuda::make_nccl_point_to_point(device, unique_id, rank, size);
#else
  (void)unique_id;
  (void)rank;
  (void)size;
  return nullptr;  // not reached: check_native_collectives threw
#endif
}

}  // namespace paralab
