// The MPI transport under mpirun -np K: every collective (naive, ring, tree; ring reduce-scatter
// and all-gather) between K processes against the same collective in one process (K threads
// over the in-process transport), bit for bit, at several sizes and piece sizes; then a message
// of the wrong size, which must be an Error naming both sizes, not a hang or a truncation; and
// MpiWorld::first_reason, which makes a reason some ranks see every rank's.
//
//   mpirun -np 3 build/tests/mpi_transport_test       (ctest: mpi_transport_np2, _np3_tcp)
//
// Every rank checks its own result; rank 0 prints the total and the exit status is non-zero on
// any rank's failure.
#include "strategies/collectives/mpi_transport.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "strategies/collectives/collectives.h"
#include "strategies/spmd_group.h"

namespace paralab {
namespace {

std::vector<float> input(int64_t n, int rank, uint64_t seed) {
  Rng rng(seed * 1000 + static_cast<uint64_t>(rank));
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

enum class Op { Allreduce, ReduceScatter, Allgather };

// op on `buf` of rank r over transport t.
void apply(Op op, const std::string& algorithm, int64_t chunk, Transport& t, Tensor& buf) {
  const auto bounds = equal_segments(buf.numel(), t.size());
  if (op == Op::Allreduce) make_allreduce(algorithm, {chunk})->run(t, buf);
  if (op == Op::ReduceScatter) reduce_scatter_ring(t, buf, bounds);
  if (op == Op::Allgather) allgather_ring(t, buf, bounds);
}

int run() {
  MpiWorld& world = MpiWorld::get();
  const int k = world.size(), me = world.rank();
  auto mine = make_devices("cpu", 1, {});
  auto transport = make_mpi_transport(*mine[0]);
  // The same group in one process, for the reference results.
  auto local = make_devices("cpu", k, {});
  std::vector<Device*> local_ptrs;
  for (auto& d : local) local_ptrs.push_back(d.get());
  SpmdGroup threads(local_ptrs);

  int checks = 0, failures = 0;
  auto check = [&](Op op, const std::string& algorithm, int64_t n, int64_t chunk) {
    const uint64_t seed = static_cast<uint64_t>(n + chunk + static_cast<int>(op));
    Tensor buf = Tensor::from_host(*mine[0], {n}, input(n, me, seed));
    apply(op, algorithm, chunk, *transport, buf);
    const auto got = buf.to_host_f32();
    std::vector<float> want;
    threads.run([&](int r, Transport& t) {
      Tensor b = Tensor::from_host(*local_ptrs[r], {n}, input(n, r, seed));
      apply(op, algorithm, chunk, t, b);
      if (r == me) want = b.to_host_f32();
    });
    ++checks;
    // Reduce-scatter defines only this rank's segment; all-gather and allreduce every element.
    const auto bounds = equal_segments(n, k);
    const int64_t begin = op == Op::ReduceScatter ? bounds[me] : 0;
    const int64_t end = op == Op::ReduceScatter ? bounds[me + 1] : n;
    for (int64_t i = begin; i < end; ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
        std::fprintf(stderr,
                     "mpi_transport_test: rank %d: %s n=%lld chunk=%lld: element %lld is %.9g, "
                     "in one process %.9g\n",
                     me, op == Op::Allreduce ? algorithm.c_str() : "ring rs/ag",
                     static_cast<long long>(n), static_cast<long long>(chunk),
                     static_cast<long long>(i), got[i], want[i]);
        ++failures;
        return;
      }
  };
  // Pieces of 16 bytes (many pipeline steps, segments cut mid-piece) only on small buffers: a
  // million floats would be 10^5 messages a step.
  for (const std::string algorithm : {"naive", "ring", "tree"}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}})
      for (int64_t chunk : {int64_t{0}, int64_t{16}, kDefaultChunkBytes})
        check(Op::Allreduce, algorithm, n, chunk);
    for (int64_t n : {int64_t{129068}, int64_t{1000003}})
      for (int64_t chunk : {int64_t{0}, kDefaultChunkBytes})
        check(Op::Allreduce, algorithm, n, chunk);
  }
  for (Op op : {Op::ReduceScatter, Op::Allgather})
    for (int64_t n : {int64_t{1}, int64_t{129068}}) check(op, "ring", n, kDefaultChunkBytes);

  // A message of the wrong size: rank 1 expects 4 values, rank 0 sends 5.
  if (k >= 2 && me <= 1) {
    ++checks;
    if (me == 0) {
      Tensor five = Tensor::from_host(*mine[0], {5}, std::vector<float>{1, 2, 3, 4, 5});
      transport->send(1, five);
    } else {
      Tensor four = Tensor::zeros(*mine[0], {4});
      std::string error;
      try {
        transport->recv(0, four);
      } catch (const Error& e) {
        error = e.what();
      }
      if (error != "transport: rank 1 expected 4 values from rank 0, got 5") {
        std::fprintf(stderr, "mpi_transport_test: rank 1: size mismatch gave '%s'\n",
                     error.c_str());
        ++failures;
      }
      // Take the message, so that nothing is left in flight at MPI_Finalize.
      Tensor five = Tensor::zeros(*mine[0], {5});
      transport->recv(0, five);
    }
  }
  // A reason only some ranks see (a node's GPUs) becomes every rank's: the lowest such rank's,
  // named; none when no rank has one.
  auto agreed = [&](const std::string& got, const std::string& want) {
    ++checks;
    if (got != want) {
      std::fprintf(stderr, "mpi_transport_test: rank %d: first_reason gave '%s', not '%s'\n", me,
                   got.c_str(), want.c_str());
      ++failures;
    }
  };
  agreed(world.first_reason(""), "");
  agreed(world.first_reason(me >= k - 2 ? "no GPU on node " + std::to_string(me) : ""),
         "rank " + std::to_string(k - 2) + ": no GPU on node " + std::to_string(k - 2));
  agreed(world.first_reason(me == k - 1 ? "last" : ""), "rank " + std::to_string(k - 1) + ": last");
  transport->barrier();
  const int64_t total = world.sum(failures);
  if (me == 0)
    std::printf("mpi_transport_test: %d ranks (%s), %d checks per rank, %lld failures\n", k,
                world.library().c_str(), checks, static_cast<long long>(total));
  return total == 0 ? 0 : 1;
}

}  // namespace
}  // namespace paralab

int main() {
  try {
    return paralab::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_transport_test: %s\n", e.what());
    paralab::MpiWorld::get().abort(1);
  }
}
