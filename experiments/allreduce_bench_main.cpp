// allreduce_bench: see experiments/allreduce_bench.cpp for what it measures and how.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "experiments/allreduce_bench.h"
#include "strategies/collectives/mpi_transport.h"

int main(int argc, char** argv) {
  try {
    return paralab::allreduce_bench_main(argc, argv);
  } catch (const std::exception& e) {
    // Under mpirun only rank 0 speaks for the group about the arguments (every rank meets the
    // same bad flag: they are checked to be the same); after them an error may be one rank's
    // alone, and it names itself. A rank that fails ends the others rather than leave them
    // waiting in a collective.
    const bool mpi = paralab::launched_by_mpi();
    const int rank = paralab::launcher_rank();
    if (rank == 0)
      std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    else if (paralab::allreduce_bench_setup_done())
      std::fprintf(stderr, "allreduce_bench: rank %d: %s\n", rank, e.what());
#if PARALAB_HAVE_MPI
    if (mpi) paralab::MpiWorld::get().abort(1);
#endif
    return 1;
  }
}
