// NCCL as a device group's native collectives: one communicator per rank, all created together
// (ncclCommInitAll, one process driving every GPU), each rank's calls queued on its own stream.
#include <nccl.h>

#include <algorithm>
#include <exception>
#include <map>

#include "core/cuda/check.h"
#include "core/cuda/cuda_device.h"
#include "core/tensor.h"

#define PARALAB_NCCL(call)                                                                       \
  do {                                                                                           \
    const ncclResult_t e_ = (call);                                                              \
    if (e_ != ncclSuccess)                                                                       \
      ::paralab::throw_library_error("NCCL", ncclGetErrorString(e_), #call, __FILE__, __LINE__); \
  } while (0)

namespace paralab::cuda {

namespace {

class Nccl final : public NativeCollectives {
 public:
  explicit Nccl(std::vector<CudaDevice*> devices)
      : devices_(std::move(devices)), comms_(devices_.size(), nullptr) {
    std::vector<int> gpus;
    for (const CudaDevice* d : devices_) gpus.push_back(d->gpu());
    PARALAB_NCCL(ncclCommInitAll(comms_.data(), static_cast<int>(gpus.size()), gpus.data()));
  }

  ~Nccl() override {
    for (ncclComm_t c : comms_)
      if (c && ncclCommDestroy(c) != ncclSuccess) log_error("nccl: ncclCommDestroy failed");
  }

  std::string library() const override { return "nccl " + nccl_version(); }

  void allreduce_sum(int rank, Tensor& buf) override {
    PARALAB_REQUIRE(rank >= 0 && rank < static_cast<int>(devices_.size()),
                    "nccl: no rank " + std::to_string(rank) + " in a group of " +
                        std::to_string(devices_.size()));
    CudaDevice& d = *devices_[static_cast<std::size_t>(rank)];
    PARALAB_REQUIRE(&buf.device() == &d, "nccl: rank " + std::to_string(rank) + "'s buffer is on " +
                                             buf.device().name() + ", not on " + d.name());
    PARALAB_REQUIRE(buf.dtype() == DType::F32,
                    std::string("nccl: allreduce of a non-float buffer"));
    if (buf.numel() == 0) return;
    PARALAB_NCCL(ncclAllReduce(buf.raw(), buf.raw(), static_cast<std::size_t>(buf.numel()),
                               ncclFloat32, ncclSum, comms_[static_cast<std::size_t>(rank)],
                               d.stream()));
  }

 private:
  std::vector<CudaDevice*> devices_;
  std::vector<ncclComm_t> comms_;
};

// One rank of a communicator spread over processes: NCCL's point-to-point on the device's stream.
class NcclPointToPoint final : public NativePointToPoint {
 public:
  NcclPointToPoint(CudaDevice& device, const std::string& unique_id, int rank, int size)
      : device_(device), rank_(rank), size_(size) {
    ncclUniqueId id{};
    PARALAB_REQUIRE(unique_id.size() == sizeof id.internal,
                    "nccl: a unique id of " + std::to_string(unique_id.size()) + " bytes, not " +
                        std::to_string(sizeof id.internal));
    std::copy(unique_id.begin(), unique_id.end(), id.internal);
    device.bind_thread();
    PARALAB_NCCL(ncclCommInitRank(&comm_, size, id, rank));
  }
  // Gone while an error unwinds (this rank failed; its peers may wait for a message it will
  // never send): ncclCommAbort, which does not wait for the communicator's work, so that the
  // rank reaches MPI_Abort and ends the job; ncclCommDestroy waits for it, and would hang on a
  // receive no peer answers.
  ~NcclPointToPoint() override {
    if (!comm_) return;
    const bool failing = std::uncaught_exceptions() > 0;
    if ((failing ? ncclCommAbort(comm_) : ncclCommDestroy(comm_)) != ncclSuccess)
      log_error(failing ? "nccl: ncclCommAbort failed" : "nccl: ncclCommDestroy failed");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void group_start() override { PARALAB_NCCL(ncclGroupStart()); }
  void group_end() override { PARALAB_NCCL(ncclGroupEnd()); }
  void send(const Tensor& buf, int peer) override {
    PARALAB_NCCL(ncclSend(buf.raw(), static_cast<std::size_t>(buf.numel()), ncclFloat32, peer,
                          comm_, device_.stream()));
  }
  void recv(Tensor& buf, int peer) override {
    PARALAB_NCCL(ncclRecv(buf.raw(), static_cast<std::size_t>(buf.numel()), ncclFloat32, peer,
                          comm_, device_.stream()));
  }
  void allreduce_sum(Tensor& buf) override {
    PARALAB_REQUIRE(&buf.device() == &device_, "nccl: rank " + std::to_string(rank_) +
                                                   "'s buffer is on " + buf.device().name() +
                                                   ", not on " + device_.name());
    PARALAB_REQUIRE(buf.dtype() == DType::F32,
                    std::string("nccl: allreduce of a non-float buffer"));
    if (buf.numel() == 0) return;
    PARALAB_NCCL(ncclAllReduce(buf.raw(), buf.raw(), static_cast<std::size_t>(buf.numel()),
                               ncclFloat32, ncclSum, comm_, device_.stream()));
  }

 private:
  CudaDevice& device_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id{};
  PARALAB_NCCL(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof id.internal);
}

std::unique_ptr<NativePointToPoint> make_nccl_point_to_point(Device& device,
                                                             const std::string& unique_id, int rank,
                                                             int size) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (!cuda) throw Unavailable("nccl: needs CUDA devices, and " + device.name() + " is not one");
  return std::make_unique<NcclPointToPoint>(*cuda, unique_id, rank, size);
}

std::string nccl_version() {
  int v = 0;
  PARALAB_NCCL(ncclGetVersion(&v));
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::unique_ptr<NativeCollectives> make_nccl(const std::vector<Device*>& devices) {
  std::vector<CudaDevice*> cuda;
  std::map<int, const Device*> by_gpu;
  for (Device* d : devices) {
    auto* c = dynamic_cast<CudaDevice*>(d);
    if (!c) throw Unavailable("nccl: needs CUDA devices, and " + d->name() + " is not one");
    if (auto [it, fresh] = by_gpu.emplace(c->gpu(), d); !fresh)
      throw Unavailable("nccl: cannot put two ranks on one GPU (" + it->second->name() + " and " +
                        d->name() + " are virtual devices of GPU " + std::to_string(c->gpu()) +
                        ")");
    cuda.push_back(c);
  }
  return std::make_unique<Nccl>(std::move(cuda));
}

}  // namespace paralab::cuda
