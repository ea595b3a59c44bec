#include "strategies/collectives/mpi_transport.h"

#include <cstdlib>

#include "core/error.h"
#include "core/ops.h"

#if PARALAB_HAVE_MPI
#include <mpi.h>

#include <climits>
#include <mutex>
#endif

namespace paralab {

bool launched_by_mpi() {
#if PARALAB_HAVE_MPI
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
#endif
  return false;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return 0;
}

#if PARALAB_HAVE_MPI

namespace {

// Every MPI call is checked: the world's error handler returns codes instead of aborting.
#define PARALAB_MPI(call)                                                                       \
  do {                                                                                          \
    const int e_ = (call);                                                                      \
    if (e_ != MPI_SUCCESS) {                                                                    \
      char text_[MPI_MAX_ERROR_STRING];                                                         \
      int len_ = 0;                                                                             \
      MPI_Error_string(e_, text_, &len_);                                                       \
      ::paralab::throw_library_error("MPI", std::string(text_, static_cast<std::size_t>(len_)), \
                                     #call, __FILE__, __LINE__);                                \
    }                                                                                           \
  } while (0)

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// One tag for every message: MPI keeps the messages of one (sender, receiver, tag, comm) in the
// order they were sent, which is the Transport's contract.
constexpr int kTag = 7;

int count_of(const Tensor& buf) {
  PARALAB_REQUIRE(buf.numel() <= INT_MAX, "mpi transport: a message of " +
                                              std::to_string(buf.numel()) +
                                              " values is more than one MPI call moves");
  return static_cast<int>(buf.numel());
}

struct MpiRequest final : Transport::Request {
  Tensor buf;  // kept alive until the send completes
  MPI_Request request = MPI_REQUEST_NULL;
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(Device& device) : device_(device), world_(MpiWorld::get()) {
    PARALAB_REQUIRE(device.kind() == DeviceKind::Cpu,
                    "mpi transport: " + device.name() +
                        " is not a CPU device (GPUs between processes need NCCL's transport)");
  }
  int rank() const override { return world_.rank(); }
  int size() const override { return world_.size(); }

  Handle isend(int peer, const Tensor& buf) override {
    check_peer(peer);
    auto req = std::make_shared<MpiRequest>();
    req->buf = buf;
    PARALAB_MPI(
        MPI_Isend(buf.raw(), count_of(buf), MPI_FLOAT, peer, kTag, MPI_COMM_WORLD, &req->request));
    bytes_sent_ += static_cast<int64_t>(buf.bytes());
    return req;
  }

  void wait(const Handle& handle) override {
    PARALAB_REQUIRE(handle != nullptr, "transport: wait() on an empty request");
    auto* req = dynamic_cast<MpiRequest*>(handle.get());
    PARALAB_REQUIRE(req != nullptr, "transport: wait() on another transport's request");
    PARALAB_MPI(MPI_Wait(&req->request, MPI_STATUS_IGNORE));
  }

  void recv(int peer, Tensor& buf) override { receive(peer, buf.raw(), buf); }

  // The message lands in a scratch buffer, then the device adds it: the same add, in the same
  // order, as the in-process transport's, so the sums are the same bits.
  void recv_reduce(int peer, Tensor& buf) override {
    Tensor part = scratch(device_, buf.numel());
    receive(peer, part.raw(), buf);
    if (buf.numel()) device_.ops().add_inplace(buf, part);
  }

  void barrier() override { world_.barrier(); }

 private:
  void receive(int peer, void* into, const Tensor& expected) {
    check_peer(peer);
    // Probe first: a message of another size is an Error naming both sizes (MPI would only say
    // "truncated"), and nothing is written.
    MPI_Status status;
    PARALAB_MPI(MPI_Probe(peer, kTag, MPI_COMM_WORLD, &status));
    int got = 0;
    PARALAB_MPI(MPI_Get_count(&status, MPI_FLOAT, &got));
    PARALAB_REQUIRE(got == expected.numel(), "transport: rank " + std::to_string(rank()) +
                                                 " expected " + std::to_string(expected.numel()) +
                                                 " values from rank " + std::to_string(peer) +
                                                 ", got " + std::to_string(got));
    PARALAB_MPI(MPI_Recv(into, got, MPI_FLOAT, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }

  Device& device_;
  MpiWorld& world_;
};

}  // namespace

MpiWorld& MpiWorld::get() {
  static MpiWorld world;
  return world;
}

MpiWorld::MpiWorld() {
  int initialized = 0;
  PARALAB_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    PARALAB_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    std::atexit(finalize_at_exit);
    PARALAB_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    // SERIALIZED is enough: one thread per process calls MPI at a time (the rank's thread).
    if (provided < MPI_THREAD_SERIALIZED)
      throw Error("MPI: thread level " + std::to_string(provided) +
                  " provided; ParaLab needs MPI_THREAD_SERIALIZED or more");
  }
  PARALAB_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PARALAB_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  PARALAB_MPI(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  PARALAB_MPI(MPI_Comm_rank(node, &local_rank_));
  PARALAB_MPI(MPI_Comm_size(node, &local_size_));
  MPI_Comm_free(&node);
}

std::string MpiWorld::library() const {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<std::size_t>(len));
  const auto cut = s.find_first_of(",\n");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

void MpiWorld::barrier() { PARALAB_MPI(MPI_Barrier(MPI_COMM_WORLD)); }

double MpiWorld::max(double value) {
  double out = 0;
  PARALAB_MPI(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return out;
}

int64_t MpiWorld::sum(int64_t value) {
  int64_t out = 0;
  PARALAB_MPI(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  return out;
}

void MpiWorld::allgather(const void* mine, void* all, std::size_t bytes) {
  PARALAB_REQUIRE(bytes <= INT_MAX, "MPI: allgather of " + std::to_string(bytes) + " bytes");
  PARALAB_MPI(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                            MPI_BYTE, MPI_COMM_WORLD));
}

std::vector<char> MpiWorld::allgatherv(const void* mine, std::size_t bytes,
                                       std::vector<int>& counts) {
  PARALAB_REQUIRE(bytes <= INT_MAX, "MPI: allgatherv of " + std::to_string(bytes) + " bytes");
  const int n = static_cast<int>(bytes);
  counts.assign(static_cast<std::size_t>(size_), 0);
  PARALAB_MPI(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::vector<int> offsets(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<char> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  PARALAB_MPI(MPI_Allgatherv(mine, n, MPI_BYTE, all.data(), counts.data(), offsets.data(), MPI_BYTE,
                             MPI_COMM_WORLD));
  return all;
}

std::string MpiWorld::broadcast(const std::string& text) {
  int64_t n = rank_ == 0 ? static_cast<int64_t>(text.size()) : 0;
  PARALAB_MPI(MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  std::string out = rank_ == 0 ? text : std::string(static_cast<std::size_t>(n), '\0');
  if (n) PARALAB_MPI(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD));
  return out;
}

std::string MpiWorld::first_reason(const std::string& text) {
  const std::vector<std::string> all = gather(text);
  std::string first;
  for (std::size_t r = 0; r < all.size() && first.empty(); ++r)
    if (!all[r].empty()) first = "rank " + std::to_string(r) + ": " + all[r];
  return broadcast(first);
}

std::vector<std::string> MpiWorld::gather(const std::string& text) {
  const int n = static_cast<int>(text.size());
  std::vector<int> sizes(static_cast<std::size_t>(size_)), offsets(sizes.size(), 0);
  PARALAB_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (rank_ == 0) {
    for (std::size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
    all.resize(static_cast<std::size_t>(offsets.back() + sizes.back()));
  }
  PARALAB_MPI(MPI_Gatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(),
                          MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<std::string> out;
  if (rank_ == 0)
    for (std::size_t r = 0; r < sizes.size(); ++r)
      out.push_back(
          all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
  return out;
}

void MpiWorld::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it did, neither do we
}

std::unique_ptr<Transport> make_mpi_transport(Device& device) {
  return std::make_unique<MpiTransport>(device);
}

#endif

}  // namespace paralab
