// SpmdGroup: a device group ready for SPMD code. In one process (the threads launcher): one host
// thread per rank (RankGroup) and the in-process transport between them (LocalFabric). Under
// mpirun: this process's one rank, on a thread of its own, and the MPI transport to the other
// processes' ranks. Strategies, the collective tests and allreduce_bench all drive their ranks
// through it; code inside run() is the same in both cases.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "strategies/collectives/mpi_transport.h"
#include "strategies/collectives/p2p_transport.h"
#include "strategies/collectives/transport.h"
#include "strategies/rank_group.h"

namespace paralab {

class SpmdGroup {
 public:
  // Every rank in this process: rank r on devices[r]; `moves` says how the fabric moves
  // collective steps (transport.h: StepMoves; by default PARALAB_STEP_MOVES, else Auto).
  explicit SpmdGroup(std::vector<Device*> devices, StepMoves moves = step_moves_from_env())
      : fabric_(std::make_unique<LocalFabric>(devices, moves)), ranks_(std::move(devices)) {}
  // One rank of a group spread over processes: this process's rank, transport->rank(), on
  // `device`; transport reaches the other ranks.
  SpmdGroup(Device& device, std::unique_ptr<Transport> transport)
      : remote_(std::move(transport)), ranks_({&device}) {}

  int size() const { return remote_ ? remote_->size() : ranks_.size(); }
  // Whether `rank` runs in this process (its device, transport and state are here).
  bool is_local(int rank) const { return !remote_ || rank == remote_->rank(); }
  std::vector<int> local_ranks() const {
    if (remote_) return {remote_->rank()};
    std::vector<int> all;
    for (int r = 0; r < size(); ++r) all.push_back(r);
    return all;
  }
  Device& device(int rank) const {
    PARALAB_REQUIRE(is_local(rank),
                    "group: rank " + std::to_string(rank) + " is in another process");
    return ranks_.device(remote_ ? 0 : rank);
  }
  Transport& transport(int rank) {
    PARALAB_REQUIRE(is_local(rank),
                    "group: rank " + std::to_string(rank) + " is in another process");
    return remote_ ? *remote_ : fabric_->endpoint(rank);
  }

  // Whether collective steps move whole between this process's ranks (LocalFabric; never
  // between processes), and how, for the results.
  bool moves_steps_whole() const { return fabric_ && fabric_->moves_steps_whole(); }
  bool moves_collectives_whole() const { return fabric_ && fabric_->moves_collectives_whole(); }
  std::string step_moves() const {
    return fabric_ ? fabric_->step_moves_description()
                   : "per rank: each message is its receiver's own (ranks in separate processes)";
  }

  // Runs fn(rank, transport) for every local rank, each on its own thread, at once. A rank that
  // throws aborts the in-process fabric, so that peers blocked on its messages fail too instead
  // of waiting forever; the first error is rethrown here. (Between processes, mpirun ends the
  // others when a rank's process exits with an error.)
  void run(const std::function<void(int, Transport&)>& fn) {
    ranks_.run([&](int i) {
      const int r = remote_ ? remote_->rank() : i;
      try {
        fn(r, transport(r));
      } catch (...) {
        if (fabric_) fabric_->abort();
        throw;
      }
    });
  }

  // Wakes every local rank blocked in the transport with PeerFailed (LocalFabric::abort), as
  // run() does when a rank throws; for a rank that must stop its helpers before it throws.
  void abort() {
    if (fabric_) fabric_->abort();
  }
  // After run() threw: lets the ranks in this process talk again (LocalFabric::reopen), once
  // whatever else of theirs used the transport has stopped too. Between processes a rank's
  // failure ends the job instead, so there is nothing to reopen: an Error.
  void reopen() {
    PARALAB_REQUIRE(fabric_ != nullptr,
                    std::string("group: a transport between processes cannot be reopened"));
    fabric_->reopen();
  }

  // per_rank[r] for every rank r, from the process that runs r: afterwards every process holds
  // every rank's value (an allgather between processes; nothing to do in one).
  template <typename T>
  void share(std::vector<T>& per_rank) {
    static_assert(std::is_trivially_copyable_v<T>, "share() moves raw bytes");
    PARALAB_REQUIRE(static_cast<int>(per_rank.size()) == size(),
                    "group: share() of " + std::to_string(per_rank.size()) + " values for " +
                        std::to_string(size()) + " ranks");
#if PARALAB_HAVE_MPI
    if (remote_) {
      const T mine = per_rank[static_cast<std::size_t>(remote_->rank())];
      MpiWorld::get().allgather(&mine, per_rank.data(), sizeof(T));
    }
#endif
  }

  // The same for a list per rank (lists of any length).
  template <typename T>
  void share_lists(std::vector<std::vector<T>>& per_rank) {
    static_assert(std::is_trivially_copyable_v<T>, "share_lists() moves raw bytes");
    PARALAB_REQUIRE(static_cast<int>(per_rank.size()) == size(),
                    "group: share_lists() of " + std::to_string(per_rank.size()) + " lists for " +
                        std::to_string(size()) + " ranks");
#if PARALAB_HAVE_MPI
    if (remote_) {
      const auto& mine = per_rank[static_cast<std::size_t>(remote_->rank())];
      std::vector<int> counts;
      const std::vector<char> all =
          MpiWorld::get().allgatherv(mine.data(), mine.size() * sizeof(T), counts);
      std::size_t at = 0;
      for (std::size_t r = 0; r < per_rank.size(); ++r) {
        per_rank[r].resize(static_cast<std::size_t>(counts[r]) / sizeof(T));
        if (counts[r]) std::memcpy(per_rank[r].data(), all.data() + at, counts[r]);
        at += static_cast<std::size_t>(counts[r]);
      }
    }
#endif
  }

 private:
  std::unique_ptr<LocalFabric> fabric_;  // in one process
  std::unique_ptr<Transport> remote_;    // between processes
  RankGroup ranks_;                      // last: its threads stop before the transports go
};

// The group of a strategy's setup: every device's rank in this process, or, under mpirun
// (mpi), this process's one rank (devices holds its one device) of the world's ranks.
inline std::unique_ptr<SpmdGroup> make_group(const std::vector<Device*>& devices, bool mpi) {
  if (!mpi) return std::make_unique<SpmdGroup>(devices);
  PARALAB_REQUIRE(devices.size() == 1,
                  "group: under mpirun a process runs one rank, with one "
                  "device, got " +
                      std::to_string(devices.size()));
#if PARALAB_HAVE_MPI
  Device& mine = *devices[0];
  if (mine.kind() == DeviceKind::Cuda) {
    // GPUs between processes: NCCL's point-to-point, its communicator made from rank 0's id.
    MpiWorld& world = MpiWorld::get();
    // Every rank first: a build without NCCL is refused on all of them alike, not on rank 0
    // alone while the others wait in the broadcast.
    check_native_collectives("nccl", {&mine});
    const std::string id = world.broadcast(world.rank() == 0 ? native_unique_id("nccl") : "");
    auto p2p = make_native_point_to_point("nccl", mine, id, world.rank(), world.size());
    return std::make_unique<SpmdGroup>(
        mine, make_point_to_point_transport(mine, std::move(p2p), [&world] { world.barrier(); }));
  }
  return std::make_unique<SpmdGroup>(mine, make_mpi_transport(mine));
#else
  throw Error("group: this build has no MPI (CMake found none)");
#endif
}

}  // namespace paralab
