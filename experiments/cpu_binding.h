// Under mpirun, each CPU rank pinned to cores of its own, so that ranks on one node neither
// share a core nor migrate between cores mid-step (a rank that moves loses its caches, and two
// ranks on one core measure time-sharing, not parallelism).
//
// The launcher may have bound the ranks already (Open MPI binds to cores when there are at most
// two ranks, to sockets above that, or not at all with --bind-to none). ParaLab respects a
// binding that already gives each rank its own cores, and otherwise spreads the ranks that share
// a CPU set over its distinct physical cores (hyperthread siblings last). Ranks that outnumber
// the cores they share are left to the scheduler, and the results say so.
#pragma once

#include <string>
#include <vector>

namespace paralab {

// One logical CPU this process may run on, with the physical core it belongs to.
struct CpuInfo {
  int cpu = 0;
  int package = 0;  // socket
  int core = 0;     // physical core id within the package
};

// The logical CPUs in `allowed` ordered for pinning: the first CPU of every distinct physical
// core (by package, then core, then CPU number), then the remaining siblings in the same order.
std::vector<int> pinning_order(const std::vector<CpuInfo>& allowed);

// The CPUs of the index-th of `ranks` ranks sharing `allowed`, `per_rank` each: empty when the
// ranks need more cores than there are (per_rank * ranks > physical cores of `allowed`).
std::vector<int> cpus_for_rank(const std::vector<CpuInfo>& allowed, int index, int ranks,
                               int per_rank);

struct CpuBinding {
  std::vector<int> cpus;  // the logical CPUs this process runs on afterwards
  std::string how;        // "pinned by ParaLab", "bound by the launcher", or why not pinned
};

// Collective over the MPI world (every rank calls it, in the same order): pins this process's
// threads, those that exist and those it will start, to cores of its own, `per_rank` cores each
// (a CPU device's threads_per_device). enabled=false (bench_runner --no-pin) only reports.
CpuBinding bind_rank_to_cores(int per_rank, bool enabled);

}  // namespace paralab
