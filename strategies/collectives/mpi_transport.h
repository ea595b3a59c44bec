// Transport between processes over MPI: one rank per process (launched by mpirun), CPU devices.
// The collectives (naive, ring, tree, reduce-scatter, all-gather) run over it unchanged, with the
// same arithmetic as in one process, so their results are the same bits.
//
// Built where CMake finds MPI (it says "ParaLab: MPI ... ON"); PARALAB_HAVE_MPI is 1 then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "strategies/collectives/transport.h"

namespace paralab {

// Whether this process was started by mpirun/mpiexec (Open MPI, MPICH or PMIx environment), and
// so should run as one rank of an MPI world. False in builds without MPI.
bool launched_by_mpi();
// This process's rank as the launcher's environment names it (OMPI_COMM_WORLD_RANK, PMIX_RANK,
// PMI_RANK), without MPI started; 0 when none does. For what is said before MPI is, or when it
// cannot be: rank 0 alone speaks for the group.
int launcher_rank();

#if PARALAB_HAVE_MPI

// The MPI world of this process: MPI_Init_thread on first use (thread level MULTIPLE, so that a
// rank's work may run on a thread other than main's), MPI_Finalize at exit. Errors are returned,
// not fatal, and become paralab::Error.
class MpiWorld {
 public:
  static MpiWorld& get();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ranks on this node and this rank's index among them (Open MPI's COMM_TYPE_SHARED split).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  std::string library() const;  // "Open MPI v4.1.4, ..." (first line)
  void barrier();
  double max(double value);    // over the ranks
  int64_t sum(int64_t value);  // over the ranks
  // all[r * bytes ...] = rank r's `mine` (bytes each), on every rank.
  void allgather(const void* mine, void* all, std::size_t bytes);
  // Every rank's `bytes` bytes at `mine` (a count of its own per rank), concatenated in rank
  // order, on every rank; counts[r] is rank r's.
  std::vector<char> allgatherv(const void* mine, std::size_t bytes, std::vector<int>& counts);
  // Rank 0's `text` on every rank.
  std::string broadcast(const std::string& text);
  // Every rank's `text`, in rank order, on rank 0 (empty elsewhere).
  std::vector<std::string> gather(const std::string& text);
  // The lowest rank's non-empty `text` as "rank R: text", on every rank ("" when every rank's is
  // empty): what one node sees (its GPUs, its backend) made the whole world's decision, so that
  // no rank goes on alone into a collective its peers never reach.
  std::string first_reason(const std::string& text);
  // Ends every rank of the world: a rank that cannot go on must not leave its peers waiting.
  [[noreturn]] void abort(int code);

 private:
  MpiWorld();
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

// This rank's end of the world's point-to-point messages, its buffers on `device` (a CPU
// device: MPI reads and writes them as host memory).
std::unique_ptr<Transport> make_mpi_transport(Device& device);

#endif

}  // namespace paralab
