// allreduce_bench: the collectives alone, in the form nccl-tests reports them.
//
//   build/allreduce_bench [--backend=cpu|cuda] [--devices=2,4,8] [--oversubscribe]
//                         [--sizes=lenet|sweep|fine|all|N[,N...]] [--chunk-bytes=auto|N[,N...]]
//                         [--graphs=auto|on|off] [--launches] [--max-wall=SECONDS]
//                         [Google Benchmark flags, e.g. --benchmark_out=results/bench.json]
//
// --backend=cuda runs the same collectives between CUDA devices (virtual ones, labeled so, when
// the GPUs are fewer than the devices), timed with CUDA events queued around each rank's part.
// nccl runs where each device has a GPU of its own, and is one skipped entry with the reason
// elsewhere.
//
// Every configuration is checked for the exact sum before it is timed (device r contributes
// r+1, exact in float32); a wrong sum ends that benchmark with SkipWithError and the process
// exits non-zero. After one untimed warm-up run, each benchmark times collectives on all ranks,
// each started together after a barrier; one collective's time is the slowest rank's device time
// between marks around its part (CUDA timing events on GPUs). It reports their mean as its one
// iteration's manual time, and how many it timed as the counter "ops" (time_ranks).
//
// Counters, as nccl-tests defines them (doc/PERFORMANCE.md there):
//   algbw = bytes / time                       (GB/s, 1e9)
//   busbw = algbw * 2(k-1)/k  for allreduce;   algbw * (k-1)/k for allgather and reduce-scatter
// "memcpy" copies the same bytes from one device's buffer to another's: what one link can move.
// The context records the backend, the launcher, --graphs and, on glibc x86, the size from which
// the C library's memcpy stores past the caches (memcpy_non_temporal_threshold_bytes).
//
// --graphs (default auto: where the group can share one CUDA graph, i.e. virtual devices of one
// GPU in one process): each benchmark's collective, memcpy included, is captured once as one
// graph over the group and every timed collective is a launch of it, timed between marks the
// capture took around each rank's part. The host's work per message (launches, event records,
// hand-offs between rank threads) then leaves the timing, as it leaves the strategies' graphed
// steps; the label says "graph". The replay is checked for the exact sum too, before timing.
#include "experiments/allreduce_bench.h"

#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/lenet.h"
#include "core/ops.h"
#include "strategies/collectives/collectives.h"
#include "strategies/collectives/mpi_transport.h"
#include "strategies/collectives/transport.h"
#include "strategies/spmd_group.h"
#include "strategies/step_graphs.h"

namespace paralab {
namespace {

std::string g_backend = "cpu";  // --backend
std::string g_graphs = "auto";  // --graphs: auto, on, off
DeviceWrapper g_wrap;           // a test's decorator of every device (allreduce_bench_main)

DeviceOptions bench_device_options() {
  DeviceOptions o;
  o.virtual_devices = true;  // CUDA: k devices on however many GPUs there are
  return o;
}

// The size from which the C library's memcpy stores past the caches (non-temporal stores), as
// its dynamic loader lists it (glibc on x86: the tunable glibc.cpu.x86_non_temporal_threshold,
// from the cache sizes it detects or GLIBC_TUNABLES); empty where it cannot be read. A copy's
// cost per byte drops there (one 2-core AMD EPYC VM: 0.13 ns/B at 64 MiB, 0.08 at 256 MiB, with a
// threshold of 192 MiB; 0.08 at 64 MiB when it is set lower), so the memcpy rows record it.
std::string memcpy_non_temporal_threshold() {
  std::string loader;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) {
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *static_cast<std::string*>(out) =
                reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
            return 1;
          }
        return 1;  // the first object is the program itself: it alone names the loader
      },
      &loader);
  if (loader.empty() || loader.find('\'') != std::string::npos) return "";
  FILE* p = popen(("'" + loader + "' --list-tunables 2>/dev/null").c_str(), "r");
  if (!p) return "";
  const std::string key = "glibc.cpu.x86_non_temporal_threshold: ";
  std::string found;
  char line[512];
  while (std::fgets(line, sizeof line, p))
    if (std::strncmp(line, key.c_str(), key.size()) == 0 && found.empty()) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(line + key.size(), &end, 0);
      if (end != line + key.size()) found = std::to_string(v);
    }
  pclose(p);
  return found;
}

// Under mpirun: every process is one rank of the group (its size the world's), with one device
// of its own and the MPI transport; the benchmarks, their checks and their timing decisions are
// collective. Otherwise one process holds the whole group, a thread per rank.
bool g_mpi = false;

// A group of k devices of --backend, reused across benchmarks of the same k: in one process, one
// thread per rank; under MPI, this process's rank only (CPU: the MPI transport; a GPU, that of
// its node-local rank: NCCL's point-to-point, whose communicator also runs "nccl").
struct BenchGroup {
  explicit BenchGroup(int k) : size(k) {
    DeviceOptions options = bench_device_options();
#if PARALAB_HAVE_MPI
    if (g_mpi && g_backend == "cuda") options.gpus = {MpiWorld::get().local_rank()};
#endif
    devices = make_devices(g_backend, g_mpi ? 1 : k, options);
    if (g_wrap)
      for (auto& d : devices) d = g_wrap(std::move(d));
    for (auto& d : devices) ptrs.push_back(d.get());
    spmd = make_group(ptrs, g_mpi);
    if (g_graphs != "off" && !ptrs.front()->supports_capture())
      why_no_graph = ptrs.front()->name() + " cannot capture work (CUDA Graphs are CUDA only)";
    else if (g_graphs != "off")
      why_no_graph = plan_group_graph("timing collectives as graphs", *spmd, ptrs, &graph);
    if (g_graphs == "on" && !graph) throw Error("--graphs=on: " + why_no_graph);
  }
  // fn(rank, transport) on every rank: each thread of the group, or this process's rank.
  void run(const std::function<void(int, Transport&)>& fn) { spmd->run(fn); }
  // The device of rank r (r must be local: any rank in one process, this one under MPI).
  Device& device(int r) const { return spmd->device(r); }
  int size;
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<Device*> ptrs;  // the local ones
  std::unique_ptr<SpmdGroup> spmd;
  // --graphs: the group's capture, null when collectives run eagerly (and why, unless off).
  std::unique_ptr<GroupCapture> graph;
  std::string why_no_graph;
};

// The largest of every rank's `value`: the slowest rank's time (in one process the caller has
// them all; under MPI, an allreduce).
double slowest(double value) {
#if PARALAB_HAVE_MPI
  if (g_mpi) return MpiWorld::get().max(value);
#endif
  return value;
}

// Whether any rank's `flag` is set.
bool any_rank(bool flag) {
#if PARALAB_HAVE_MPI
  if (g_mpi) return MpiWorld::get().sum(flag ? 1 : 0) > 0;
#endif
  return flag;
}

BenchGroup& group(int k) {
  static std::vector<std::unique_ptr<BenchGroup>> groups(65);
  if (!groups[k]) groups[k] = std::make_unique<BenchGroup>(k);
  return *groups[k];
}

int host_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

bool g_failed = false;  // any correctness check failed: exit non-zero
bool g_wrong = false;   // a collective gave a wrong result (also g_failed)
bool g_unmade = false;  // a graph --graphs=on asked for could not be made (also g_failed)
// How many collectives a benchmark times: until their measured time reaches g_min_time seconds,
// or g_max_wall seconds of wall time have passed, whichever is first, and at least one. Each one
// also pays, outside its measured time, for waking the rank threads and two barriers (tens of
// microseconds here), which for a small message is far more than the message itself; without
// the wall-time cap a 4-byte memcpy would be repeated a million times. --max-wall sets the cap
// (default 0.5 s) and with it the minimum, at most 0.2 s: a sweep of 250 rows takes about
// 250 x the cap (the performance model's sweep on a GPU: 0.1 s, a collective's mean over hundreds).
constexpr double kDefaultMinTime = 0.2;
double g_max_wall = 0.5;
double g_min_time = kDefaultMinTime;
std::map<std::string, AllreduceFactory> g_algorithms;  // naive, ring, tree, and any extras
// --chunk-bytes: the ring's and tree's piece sizes to time; -1 is "auto" (auto_chunk_bytes of
// the group: whole messages between virtual devices on one GPU, 256 KiB otherwise). All-gather
// and reduce-scatter take the first (their rows carry no chunk in their names).
std::vector<int64_t> g_chunks{-1};

// The allreduce to time: a built-in one with the benchmark's piece size, or an extra as given.
std::unique_ptr<Allreduce> make_timed_allreduce(const std::string& algorithm, int64_t chunk,
                                                const std::vector<Device*>& group) {
  const auto known = known_allreduces();
  if (std::find(known.begin(), known.end(), algorithm) == known.end())
    return g_algorithms.at(algorithm)();
  return make_allreduce(algorithm, {chunk < 0 ? auto_chunk_bytes(group) : chunk});
}

enum class Op { Allreduce, Allgather, ReduceScatter };

double bus_factor(Op op, int k) {
  if (k == 1) return 0.0;
  return op == Op::Allreduce ? 2.0 * (k - 1) / k : static_cast<double>(k - 1) / k;
}

// Exact data: rank r holds (r+1) * (i % 7 + 1), so every sum is a small integer.
std::vector<float> exact_input(int64_t n, int r) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((r + 1) * (i % 7 + 1));
  return v;
}

// Rank r's result of `op` over exact_input on k ranks: "" when right, else the first wrong
// element.
std::string verify(Op op, int k, int r, const std::vector<float>& got) {
  const auto n = static_cast<int64_t>(got.size());
  const auto bounds = equal_segments(n, k);
  for (int64_t i = 0; i < n; ++i) {
    const bool mine = i >= bounds[r] && i < bounds[r + 1];
    float want;
    if (op == Op::Allgather) {
      int owner = 0;
      while (i >= bounds[owner + 1]) ++owner;
      want = static_cast<float>((owner + 1) * (i % 7 + 1));
    } else if (op == Op::ReduceScatter && !mine) {
      continue;  // partial sums outside this rank's segment are unspecified
    } else {
      want = static_cast<float>(k * (k + 1) / 2 * (i % 7 + 1));
    }
    if (got[i] != want)
      return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": got " +
             std::to_string(got[i]) + ", want " + std::to_string(want);
  }
  return "";
}

// The first of every rank's errors. Every rank must skip, or none: under MPI, ranks learn of
// each other's errors here.
std::string first_error(const std::vector<std::string>& errors) {
  std::string error;
  for (const auto& e : errors)
    if (!e.empty() && error.empty()) error = e;
  if (any_rank(!error.empty()) && error.empty()) error = "another rank got a wrong result";
  return error;
}

// Runs `op` once on every rank over fresh exact data and checks every rank's result.
std::string check(Op op, Allreduce* ar, BenchGroup& g, int64_t n, int64_t chunk_bytes) {
  const int k = g.size;
  const auto bounds = equal_segments(n, k);
  std::vector<std::string> errors(k);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(g.device(r), {n}, exact_input(n, r));
    if (op == Op::Allreduce) ar->run(t, buf);
    if (op == Op::ReduceScatter) reduce_scatter_ring(t, buf, bounds, chunk_bytes);
    if (op == Op::Allgather) allgather_ring(t, buf, bounds, chunk_bytes);
    errors[r] = verify(op, k, r, buf.to_host_f32());
  });
  return first_error(errors);
}

// Exact data into every rank's buffer (bufs[r], on rank r's device), `run` once (the collective
// eagerly, or its captured replay), each rank's result checked as `op`'s over the whole buffer,
// and the buffers zeroed again for timing.
std::string check_in_place(Op op, BenchGroup& g, std::vector<Tensor>& bufs,
                           const std::function<void(int, Transport&)>& run) {
  std::vector<std::string> errors(static_cast<std::size_t>(g.size));
  g.run([&](int r, Transport& t) {
    const int64_t n = bufs[r].numel();
    bufs[r].copy_from_host(exact_input(n, r));
    run(r, t);
    errors[r] = verify(op, g.size, r, bufs[r].to_host_f32());
    g.device(r).fill_zero(bufs[r].raw(), bufs[r].bytes());
  });
  return first_error(errors);
}

// Skips the benchmark, marking the run failed, when `error` is not empty.
bool failed(benchmark::State& state, const std::string& error) {
  if (error.empty()) return false;
  g_failed = g_wrong = true;
  state.SkipWithError(("wrong result before timing: " + error).c_str());
  return true;
}

// A rank's way to run the benchmark's captured collective once (GroupCapture::launch), for a
// check of the replay.
using Replay = std::function<void(int, Transport&)>;

// Times body(rank, transport) on every rank, after prepare(rank) (untimed) and a barrier with
// every device idle; one collective's time is the slowest rank's. Each rank's time is its
// device's, between two marks queued around its part (Device::mark: CUDA timing events on a
// GPU, so the launches' host overhead is not counted; the host clock on the CPU, whose work is
// done when queued), read after a synchronisation. After one untimed warm-up collective it times
// as many as g_min_time / g_max_wall allow, like nccl-tests' iterations, and reports their mean as
// the benchmark's one iteration (registered with Iterations(1)); "ops" counts them.
//
// With the group's graph (--graphs), body and its two marks are captured once after the eager
// warm-up (which fills the allocators' caches), and every collective after that is a launch;
// check_replay(replay) then runs before timing, and an error it returns skips the benchmark. A
// graph the GPU cannot make (CaptureFailed, which every rank's end() throws alike; nothing was
// captured or run) is, under --graphs=auto, said on stderr, and this benchmark and every later
// one of the group are timed eagerly (labelled without "graph", graph=0); under --graphs=on it
// skips the benchmark with the reason and the run exits 2.
template <typename Prepare, typename Body>
void time_ranks(benchmark::State& state, BenchGroup& g, Prepare prepare, Body body,
                const std::function<std::string(const Replay&)>& check_replay = nullptr) {
  std::vector<double> seconds(static_cast<std::size_t>(g.size));
  std::vector<TimeMark> starts(seconds.size()), ends(seconds.size());
  GroupCapture* graph = nullptr;
  auto one = [&](bool timed) {
    g.run([&](int r, Transport& t) {
      Device& dev = g.device(r);
      prepare(r);
      dev.synchronize();
      t.barrier();
      if (graph) {
        launch_step(graph, r, t, nullptr);
      } else {
        starts[r] = dev.mark();
        body(r, t);
        ends[r] = dev.mark();
      }
      dev.synchronize();
      t.barrier();
      if (timed) seconds[r] = dev.elapsed_ms(starts[r], ends[r]) / 1e3;
    });
    return slowest(*std::max_element(seconds.begin(), seconds.end()));
  };
  one(false);  // warm-up: first touches, lazy module loading, cold caches
  if (g.graph) {
    std::vector<std::string> refused(seconds.size());
    g.run([&](int r, Transport& t) {
      Device& dev = g.device(r);
      dev.synchronize();
      try {
        capture_step(
            g.graph.get(), r, t, dev, nullptr,
            [&] {
              starts[r] = dev.mark();
              body(r, t);
              ends[r] = dev.mark();
            },
            wake_peers(*g.spmd));
      } catch (const CaptureFailed& e) {
        refused[static_cast<std::size_t>(r)] = e.what();
      }
    });
    if (const auto why = std::find_if(refused.begin(), refused.end(),
                                      [](const std::string& s) { return !s.empty(); });
        why != refused.end()) {
      if (g_graphs == "on") {
        g_failed = g_unmade = true;
        state.SkipWithError(("--graphs=on: capture failed: " + *why).c_str());
        return;
      }
      std::fprintf(stderr,
                   "allreduce_bench: a graph over %d devices could not be made (%s): this "
                   "benchmark and every later one on %d devices are timed eagerly\n",
                   g.size, why->c_str(), g.size);
      g.graph.reset();
    }
    graph = g.graph.get();
  }
  if (graph) {
    const Replay replay = [graph](int r, Transport& t) { launch_step(graph, r, t, nullptr); };
    if (check_replay && failed(state, check_replay(replay))) return;
    one(false);  // the graph's first timed-like launch, untimed
  }
  for (auto _ : state) {
    double measured = 0;
    int64_t ops = 0;
    const auto wall0 = std::chrono::steady_clock::now();
    do {
      measured += one(true);
      ++ops;
    } while (
        measured < g_min_time &&
        // The slowest rank's wall time: under MPI every rank decides alike.
        slowest(std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count()) <
            g_max_wall);
    state.SetIterationTime(measured / static_cast<double>(ops));
    state.counters["ops"] = static_cast<double>(ops);
  }
  state.counters["graph"] = graph ? 1 : 0;
}

void set_counters(benchmark::State& state, int k, double bytes, double bus, std::string label) {
  if (g_backend != "cpu") {
    const nlohmann::json d = group(k).device(group(k).spmd->local_ranks()[0]).describe();
    label += " " + g_backend;
    if (d.value("virtual", false)) label += " virtual";
  }
  if (g_mpi) label += " mpi (" + std::to_string(k) + " processes)";
  if (group(k).graph) label += " graph";
  if (const int cores = host_cores(); g_backend == "cpu" && k > cores)
    label +=
        " time-shared (" + std::to_string(k) + " ranks on " + std::to_string(cores) + " cores)";
  state.counters["devices"] = k;
  state.counters["bytes"] = bytes;
  state.counters["algbw"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] =
      benchmark::Counter(bytes / 1e9 * bus, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(label);
}

void run_collective(benchmark::State& state, Op op, const std::string& algorithm) {
  const int k = static_cast<int>(state.range(0));
  const int64_t bytes = state.range(1);
  const int64_t n = bytes / 4;
  BenchGroup& g = group(k);
  const int64_t chunk = op == Op::Allreduce && g_chunks.size() > 1 ? state.range(2) : g_chunks[0];
  const int64_t used_chunk = chunk < 0 ? auto_chunk_bytes(g.ptrs) : chunk;
  std::unique_ptr<Allreduce> ar;
  if (op == Op::Allreduce) {
    ar = make_timed_allreduce(algorithm, chunk, g.ptrs);
    ar->prepare(g.ptrs);
  }
  if (failed(state, check(op, ar.get(), g, n, used_chunk))) return;
  std::vector<Tensor> bufs(k);
  const auto bounds = equal_segments(n, k);
  g.run([&](int r, Transport&) { bufs[r] = Tensor::zeros(g.device(r), {n}); });
  // The captured collective on exact data, checked like the eager one; then zeros again.
  auto check_replay = [&](const Replay& replay) { return check_in_place(op, g, bufs, replay); };
  time_ranks(
      state, g, [](int) {},
      [&](int r, Transport& t) {
        if (op == Op::Allreduce) ar->run(t, bufs[r]);
        if (op == Op::ReduceScatter) reduce_scatter_ring(t, bufs[r], bounds, used_chunk);
        if (op == Op::Allgather) allgather_ring(t, bufs[r], bounds, used_chunk);
      },
      check_replay);
  set_counters(state, k, static_cast<double>(n * 4), bus_factor(op, k),
               op == Op::Allreduce   ? algorithm
               : op == Op::Allgather ? "allgather"
                                     : "reduce_scatter");
  // The piece size used (0: whole messages), for fits of time against messages per rank.
  state.counters["chunk_bytes"] = static_cast<double>(used_chunk);
  // 1 where the group's collective steps moved whole (one unit per step for all ranks: virtual
  // devices of one GPU, transport.h), 0 where each message was its receiver's own.
  state.counters["whole_steps"] = g.spmd->moves_steps_whole() ? 1.0 : 0.0;
  // 1 where, moreover, each collective's steps moved together as one unit (one kernel).
  state.counters["whole_collectives"] = g.spmd->moves_collectives_whole() ? 1.0 : 0.0;
}

// The same bytes from device 0's buffer into device 1's, by device 1's thread (the transport's
// pull model): the reference for what one transfer can move. Device 0 rewrites its buffer
// before every copy, untimed, because a collective always moves data its producer has just
// written (still in that core's cache); copying long-settled data would flatter the baseline.
//
// Under MPI each rank copies between two buffers of its own device at once (a rank's transfers
// are its own process's copies), timed as the slowest.
void run_memcpy_mpi(benchmark::State& state, int k) {
  const int64_t bytes = state.range(1);
  BenchGroup& g = group(k);
  Tensor src, dst;
  g.run([&](int r, Transport&) {
    src = Tensor::zeros(g.device(r), {bytes / 4});
    dst = Tensor::zeros(g.device(r), {bytes / 4});
  });
  time_ranks(
      state, g, [](int) {},
      [&](int r, Transport&) { g.device(r).copy_on_device(dst.raw(), src.raw(), dst.bytes()); });
  set_counters(state, k, static_cast<double>(dst.bytes()), 1.0, "memcpy");
}

void run_memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(1);
  if (g_mpi) return run_memcpy_mpi(state, static_cast<int>(state.range(0)));
  BenchGroup& g = group(2);
  std::vector<Tensor> bufs(2);
  g.run([&](int r, Transport&) { bufs[r] = Tensor::zeros(g.device(r), {bytes / 4}); });
  float stamp = 0;
  auto produce = [&](int r) {
    if (r != 0 || g.ptrs[0]->kind() != DeviceKind::Cpu) return;  // CUDA: no CPU cache to warm
    stamp += 1;
    float* p = bufs[0].f32();
    for (int64_t i = 0; i < bufs[0].numel(); ++i) p[i] = stamp;
  };
  time_ranks(state, g, produce, [&](int r, Transport&) {
    if (r == 1) g.device(1).copy_on_device(bufs[1].raw(), bufs[0].raw(), bufs[1].bytes());
  });
  set_counters(state, 2, static_cast<double>(bufs[0].bytes()), 1.0, "memcpy");
}

// LeNet's 8 gradient tensors as 8 allreduces, against one flat 516,272-byte buffer. Checked like
// the flat rows, eagerly and replayed, on exact data over the whole buffer: each tensor's
// allreduce sums its own values, so the buffer must hold the flat allreduce's result (views of
// 10 and 128 floats on 8 ranks leave some ranks empty segments).
void run_lenet_per_tensor(benchmark::State& state, const std::string& algorithm) {
  const int k = static_cast<int>(state.range(0));
  BenchGroup& g = group(k);
  auto ar = make_timed_allreduce(algorithm, g_chunks[0], g.ptrs);
  ar->prepare(g.ptrs);
  std::vector<Tensor> bufs(k);
  g.run([&](int r, Transport&) { bufs[r] = Tensor::zeros(g.device(r), {kLeNetParameters}); });
  const auto per_tensor = [&](int r, Transport& t) {
    for (const auto& p : lenet_layout()) {
      Tensor v = bufs[r].view(p.offset, {shape_numel(p.shape)});
      ar->run(t, v);
    }
  };
  if (failed(state, check_in_place(Op::Allreduce, g, bufs, per_tensor))) return;
  time_ranks(
      state, g, [](int) {}, per_tensor,
      [&](const Replay& replay) { return check_in_place(Op::Allreduce, g, bufs, replay); });
  set_counters(state, k, kLeNetParameters * 4.0, bus_factor(Op::Allreduce, k),
               algorithm + " per_tensor (8 allreduces)");
}

// --launches: a chain of kChainLaunches tiny operations per rank (each adds one float into
// another, after the last one), every rank's chain at once, timed like a collective (one CUDA
// graph over the group where --graphs allows). Its time over kChainLaunches is what one queued
// operation costs a rank while k ranks queue theirs: if it grows with k, the device takes the
// ranks' operations one at a time (on a GPU, its front end launching a graph's kernels), so a
// collective between virtual devices pays for every rank's messages, not for one rank's.
bool g_launches = false;
constexpr int kChainLaunches = 32;

void run_launches(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  BenchGroup& g = group(k);
  std::vector<Tensor> acc(k), one(k);
  g.run([&](int r, Transport&) {
    acc[r] = Tensor::zeros(g.device(r), {1});
    one[r] = Tensor::zeros(g.device(r), {1});
  });
  time_ranks(
      state, g, [](int) {},
      [&](int r, Transport&) {
        Ops& ops = g.device(r).ops();
        for (int i = 0; i < kChainLaunches; ++i) ops.add_inplace(acc[r], one[r]);
      });
  std::string label = "launches";
  if (g_backend != "cpu") label += " " + g_backend;
  if (group(k).graph) label += " graph";
  state.SetLabel(label);
  state.counters["devices"] = k;
  state.counters["launches_per_rank"] = kChainLaunches;
  state.counters["graph"] = group(k).graph ? 1 : 0;
}

// The items of a comma-separated flag value ("4,,8" has an empty one).
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  for (;;) {
    const std::size_t comma = list.find(',', pos);
    out.push_back(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

// The whole number an item spells in at most max_digits decimal digits ("2abc" is not 2), or
// -1.
int64_t whole_number(const std::string& item, std::size_t max_digits) {
  const bool digits = !item.empty() && item.size() <= max_digits &&
                      item.find_first_not_of("0123456789") == std::string::npos;
  return digits ? std::stoll(item) : -1;
}

// "auto" or comma-separated byte counts (0: whole messages; else whole floats, >= 4), each once.
std::vector<int64_t> parse_chunks(const std::string& list) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(list)) {
    const int64_t v = item == "auto" ? -1 : whole_number(item, 12);
    if ((v == -1 && item != "auto") || (v > 0 && v < 4) || (v > 0 && v % 4 != 0))
      throw Error("--chunk-bytes: '" + item.substr(0, 20) +
                  "' is not auto, 0 (whole messages) or a byte count >= 4 and a multiple of 4 "
                  "(pieces are whole floats)");
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

// --sizes: the message sizes in bytes, ascending. lenet: the LeNet gradient alone; sweep (and
// all): 4 B..256 MiB by 4x and the LeNet gradient; fine: 4 B..256 MiB by 2x and the LeNet
// gradient (a per-byte cost that changes with the caches is resolved twice as finely, for the
// performance model's interpolation between sizes); or a list of byte counts, each a multiple of
// 4 (whole floats) from 4 to 4 GiB, timed as given.
std::vector<int64_t> message_sizes(const std::string& sizes) {
  std::vector<int64_t> out;
  if (sizes == "lenet" || sizes == "sweep" || sizes == "all" || sizes == "fine") {
    const int64_t step = sizes == "fine" ? 2 : 4;
    if (sizes != "lenet")
      for (int64_t b = 4; b <= (int64_t{256} << 20); b *= step) out.push_back(b);
    out.push_back(kLeNetParameters * 4);  // the flat LeNet gradient, in every named mode
  } else {
    for (const std::string& item : split_commas(sizes)) {
      const int64_t v = whole_number(item, 12);
      if (v < 4 || v % 4 != 0 || v > (int64_t{4} << 30))
        throw Error("--sizes: '" + item.substr(0, 20) +
                    "' is not lenet, sweep, fine, all or a byte count (a multiple of 4 from 4 "
                    "to 4294967296)");
      out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// --max-wall: seconds, a plain decimal number in (0, 3600].
double parse_max_wall(const std::string& text) {
  const bool plain = !text.empty() && text.size() <= 12 &&
                     text.find_first_not_of("0123456789.") == std::string::npos &&
                     std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  const double v = plain ? std::strtod(text.c_str(), nullptr) : -1.0;
  if (!(v > 0.0 && v <= 3600.0))
    throw Error("--max-wall: '" + text.substr(0, 20) + "' is not a number of seconds in (0, 3600]");
  return v;
}

std::vector<int> parse_devices(const std::string& list) {
  std::vector<int> out;
  for (const std::string& item : split_commas(list)) {
    const int64_t k = whole_number(item, 2);
    if (k < 1 || k > 64)
      throw Error("--devices: '" + item.substr(0, 20) + "' is not a device count in 1..64");
    // Each once (--devices=2,2 timed every row twice under one name).
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(static_cast<int>(k));
  }
  return out;
}

// Google Benchmark also takes its flags from BENCHMARK_* variables (BENCHMARK_OUT=FILE for
// --benchmark_out=FILE), read before main(): such a file was overwritten, and written by every
// rank under mpirun, past the checks here. Each one set becomes its flag, placed before the
// command line's (whose own flags win), so that the checks see it and it is given explicitly.
std::vector<std::string> flags_from_environment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (entry.rfind("BENCHMARK_", 0) != 0 || eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    out.push_back("--" + name + "=" + entry.substr(eq + 1));
  }
  return out;
}

// Values of Google Benchmark's flags that it would take by printing its usage and exiting 0
// (an unknown --benchmark_format, say), or take silently (--benchmark_repetitions=0: no row):
// one line naming the flag instead.
void check_benchmark_flag(const std::string& a) {
  const auto eq = a.find('=');
  const std::string name = a.substr(0, eq), value = eq == std::string::npos ? "" : a.substr(eq + 1);
  const auto one_of = [&](std::initializer_list<const char*> known) {
    std::string list;
    for (const char* k : known) {
      if (value == k) return;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    throw Error(name + ": '" + value.substr(0, 20) + "' (known: " + list + ")");
  };
  if (name == "--benchmark_format" || name == "--benchmark_out_format")
    one_of({"console", "json", "csv"});
  else if (name == "--benchmark_time_unit")
    one_of({"ns", "us", "ms", "s"});
  else if (name == "--benchmark_repetitions" && whole_number(value, 6) < 1)
    throw Error(name + ": '" + value.substr(0, 20) + "' is not a whole number >= 1");
}

// --benchmark_out: the rows go to a hidden file beside it, which becomes FILE once every row
// is written (never over a file that appeared meanwhile). A failure, or SIGINT or SIGTERM, on
// the way removes it: no cut-off JSON is left, nor one that would block the rerun.
char g_partial[4096] = {};  // the hidden file's path while it is written (read by the handler)

void remove_partial_and_exit(int sig) {
  if (g_partial[0] != 0) ::unlink(g_partial);
  ::_exit(128 + sig);
}

struct PartialOut {
  std::string final_path;
  explicit PartialOut(const std::string& out) : final_path(out) {
    const auto slash = out.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : out.substr(0, slash);
    const std::string base = slash == std::string::npos ? out : out.substr(slash + 1);
    std::string tmpl = dir + "/." + base + ".partial-XXXXXX";
    if (tmpl.size() >= sizeof g_partial) throw Error("--benchmark_out=" + out + ": path too long");
    const int fd = ::mkstemp(tmpl.data());
    if (fd < 0)
      throw Error("--benchmark_out=" + out + ": cannot write in " + dir + ": " +
                  std::strerror(errno));
    ::close(fd);
    std::snprintf(g_partial, sizeof g_partial, "%s", tmpl.c_str());
    for (int sig : {SIGINT, SIGTERM}) ::signal(sig, remove_partial_and_exit);
  }
  std::string path() const { return g_partial; }
  // The rows are all written: FILE (link(): fails rather than replace a file made meanwhile).
  void commit() {
    if (::link(g_partial, final_path.c_str()) != 0) {
      const int err = errno;
      const std::string kept = g_partial;
      g_partial[0] = 0;
      throw Error("--benchmark_out=" + final_path + ": " + std::strerror(err) +
                  " (the rows are in " + kept + ")");
    }
    ::unlink(g_partial);
    g_partial[0] = 0;
  }
  ~PartialOut() {
    for (int sig : {SIGINT, SIGTERM}) ::signal(sig, SIG_DFL);
    if (g_partial[0] != 0) ::unlink(g_partial);
    g_partial[0] = 0;
  }
};

// The flags checked, and agreed by every rank (allreduce_bench_setup_done).
bool g_setup_done = false;

void print_help() {
  std::printf(
      "allreduce_bench: ParaLab's collectives timed as nccl-tests reports them\n"
      "  --backend=cpu|cuda|auto   devices to run on (default cpu)\n"
      "  --devices=K[,K...]        group sizes, each 1..64 (default 2,4,8)\n"
      "  --oversubscribe           run groups with more ranks than cores (labeled time-shared)\n"
      "  --sizes=lenet|sweep|fine|all|N[,N...]  message sizes: the LeNet gradient, or\n"
      "                            4 B..256 MiB by 4x (sweep, all; default sweep) or by 2x\n"
      "                            (fine) with it, or these byte counts (multiples of 4)\n"
      "  --chunk-bytes=auto|N[,N...]  ring/tree piece sizes (default auto: whole messages\n"
      "                            between virtual devices on one GPU, 262144 otherwise; 0:\n"
      "                            whole messages); several values time each; all-gather\n"
      "                            and reduce-scatter take the first\n"
      "  --graphs=auto|on|off      time each collective as one CUDA graph over the group\n"
      "                            (auto: where it can be, virtual devices of one GPU)\n"
      "  --launches                also time a chain of 32 tiny operations per rank, every rank\n"
      "                            at once (\"launches\": the cost of one queued operation)\n"
      "  --max-wall=SECONDS        stop timing a row after this much wall time (default 0.5;\n"
      "                            at least one collective; it also stops once 0.2 s, or\n"
      "                            SECONDS if less, of collectives are measured)\n"
      "  --help                    this text\n"
      "A --benchmark_out file must not exist (results are never overwritten); it is\n"
      "written whole, or not at all. A --benchmark_filter that selects nothing, or is\n"
      "not a valid regex, is an error. BENCHMARK_* variables count as their flags;\n"
      "under mpirun every rank needs rank 0's arguments.\n"
      "Each row is one Google Benchmark iteration that times as many collectives as\n"
      "--max-wall allows (counter ops; time is per collective): --benchmark_min_time\n"
      "and --benchmark_min_warmup_time do not apply and are refused. algbw and busbw\n"
      "are in GB/s, printed with a bare \"/s\" (bytes x 1e-9 per second, as nccl-tests).\n"
      "Google Benchmark's flags:\n");
#if PARALAB_BENCHMARK_PRINTS_HELP
  benchmark::PrintDefaultHelp();
#else
  // Google Benchmark < 1.7 (Ubuntu 22.04 has 1.6) prints its flags only when its own parser
  // meets --help, and then exits with status 0.
  std::fflush(stdout);
  int help_argc = 2;
  char help_flag[] = "--help";
  char* help_argv[] = {const_cast<char*>("allreduce_bench"), help_flag, nullptr};
  benchmark::Initialize(&help_argc, help_argv);
#endif
}

}  // namespace

bool allreduce_bench_setup_done() { return g_setup_done; }

int allreduce_bench_main(int argc, char** argv,
                         const std::map<std::string, AllreduceFactory>& extra, DeviceWrapper wrap) {
  g_wrap = std::move(wrap);
  for (const auto& name : known_allreduces())
    g_algorithms[name] = [name] { return make_allreduce(name, {}); };
  for (const auto& [name, factory] : extra) g_algorithms[name] = factory;
#if PARALAB_HAVE_MPI
  g_mpi = launched_by_mpi();
#endif
  int world_rank = 0, world = 1;
#if PARALAB_HAVE_MPI
  if (g_mpi) {
    world_rank = MpiWorld::get().rank();
    world = MpiWorld::get().size();
  }
#endif
  // One device has nothing to reduce (a collective is a no-op there): the sweep starts at 2.
  std::vector<int> devices{2, 4, 8};
  bool devices_given = false;
  bool oversubscribe = false;
  std::string sizes = "sweep";
  std::vector<std::string> args = flags_from_environment();
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
#if PARALAB_HAVE_MPI
  // Every rank runs every row together: ranks given other arguments (another filter, size or
  // algorithm) timed other collectives under rank 0's labels, or waited for each other forever.
  if (g_mpi) {
    std::string mine;
    for (const auto& a : args) mine += a + '\n';
    const std::string root = MpiWorld::get().broadcast(mine);
    const std::string why =
        mine == root ? ""
                     : "its arguments (or BENCHMARK_* variables) differ from rank 0's: under "
                       "mpirun every rank runs every row, with rank 0's arguments";
    if (const std::string first = MpiWorld::get().first_reason(why); !first.empty())
      throw Error(first);
  }
#endif
  std::string out;  // --benchmark_out
  std::vector<std::string> rest;
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
    if (a.rfind("--benchmark_out=", 0) == 0) {
      out = a.substr(16);
      struct stat st {};
      if (out.empty()) throw Error("--benchmark_out: needs a file name");
      if (::lstat(out.c_str(), &st) == 0)
        throw Error("--benchmark_out=" + out + ": file exists (results are never overwritten)");
      continue;  // given to Google Benchmark below, as the hidden file it becomes
    }
    if (a.rfind("--benchmark_min_time", 0) == 0 || a.rfind("--benchmark_min_warmup_time", 0) == 0)
      throw Error(a.substr(0, a.find('=')) +
                  ": not used here: each row times collectives for --max-wall=SECONDS "
                  "(default 0.5; 0.2 s of collectives suffice); --benchmark_repetitions=N "
                  "repeats rows");
    if (a.rfind("--benchmark_", 0) == 0) check_benchmark_flag(a);
    if (g_mpi && a.rfind("--benchmark_enable_random_interleaving", 0) == 0 &&
        a != "--benchmark_enable_random_interleaving=false")
      throw Error(
          "--benchmark_enable_random_interleaving: not under mpirun (each rank would shuffle "
          "the rows its own way, and the collectives of different rows would meet)");
    if (a.rfind("--devices=", 0) == 0) {
      devices = parse_devices(a.substr(10));
      devices_given = true;
    } else if (a.rfind("--backend=", 0) == 0)
      g_backend = resolve_backend(a.substr(10));
    else if (a == "--oversubscribe")
      oversubscribe = true;
    else if (a.rfind("--sizes=", 0) == 0)
      sizes = a.substr(8);
    else if (a.rfind("--chunk-bytes=", 0) == 0)
      g_chunks = parse_chunks(a.substr(14));
    else if (a == "--launches") {
      if (g_mpi)
        throw Error(
            "--launches: not under mpirun (the chain of launches is timed in one "
            "process's group)");
      g_launches = true;
    } else if (a.rfind("--max-wall=", 0) == 0) {
      g_max_wall = parse_max_wall(a.substr(11));
      g_min_time = std::min(kDefaultMinTime, g_max_wall);
    } else if (a.rfind("--graphs=", 0) == 0) {
      g_graphs = a.substr(9);
      if (g_graphs != "auto" && g_graphs != "on" && g_graphs != "off")
        throw Error("--graphs: '" + g_graphs.substr(0, 20) + "' (known: auto, on, off)");
    } else
      rest.push_back(a);
  }
  const std::vector<int64_t> byte_sizes = message_sizes(sizes);
  std::string lacking = backend_unavailable(g_backend);
  if (!lacking.empty()) lacking = "--backend=" + g_backend + ": " + lacking;
#if PARALAB_HAVE_MPI
  // Under mpirun a GPU rank takes the GPU of its node-local rank; what any node lacks stops every
  // rank, and rank 0 (which alone speaks) says which rank saw it.
  if (g_mpi) {
    if (lacking.empty() && g_backend == "cuda")
      lacking = gpu_per_rank_shortfall(MpiWorld::get().local_size(), usable_gpu_count());
    lacking = MpiWorld::get().first_reason(lacking);
  }
#endif
  if (!lacking.empty()) throw Error(lacking);
  if (g_mpi) {
    // The group is the world: one rank per process.
    if (world < 2)
      throw Error("under mpirun: 1 process has nothing to reduce (mpirun -np 2 or more)");
    if (devices_given && devices != std::vector<int>{world})
      throw Error("--devices: under mpirun the group is the world's " + std::to_string(world) +
                  " processes (--devices=" + std::to_string(world) + " or none)");
    devices = {world};
  }
  benchmark::AddCustomContext("paralab_backend", g_backend);
  benchmark::AddCustomContext("paralab_launcher", g_mpi ? "mpi" : "threads");
  benchmark::AddCustomContext("paralab_graphs", g_graphs);
  benchmark::AddCustomContext("paralab_max_wall_s", std::to_string(g_max_wall));
  // How collective steps move in one process (PARALAB_STEP_MOVES; each row's whole_steps says
  // what its group did).
  if (const char* v = std::getenv("PARALAB_STEP_MOVES"); v && *v) {
    (void)step_moves_from_env();  // an unknown value: its Error, before any row runs
    benchmark::AddCustomContext("paralab_step_moves", v);
  } else {
    benchmark::AddCustomContext("paralab_step_moves", "auto");
  }
  // The GPUs the rows ran on (the performance model checks them against the directory a file is
  // committed in): their distinct names in GPU order, and the first one's SM count.
  if (g_backend == "cuda") {
    const nlohmann::json gpus = usable_gpu_properties();
    std::vector<std::string> names;
    for (const auto& g : gpus)
      if (const auto name = g.at("gpu_model").get<std::string>();
          std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    std::string models;
    for (const auto& n : names) models += (models.empty() ? "" : ", ") + n;
    benchmark::AddCustomContext("paralab_gpu_model", models);
    if (!gpus.empty())
      benchmark::AddCustomContext("paralab_gpu_sm_count", gpus[0]["sm_count"].dump());
  }
  // Not under mpirun, where a rank should not fork (some MPI transports forbid it).
  if (const std::string t = g_mpi ? "" : memcpy_non_temporal_threshold(); !t.empty())
    benchmark::AddCustomContext("memcpy_non_temporal_threshold_bytes", t);
#if PARALAB_HAVE_MPI
  if (g_mpi) {
    benchmark::AddCustomContext("mpi_world_size", std::to_string(world));
    benchmark::AddCustomContext("mpi_library", MpiWorld::get().library());
  }
#endif
  // Under MPI only rank 0 writes; the others are told so explicitly (a BENCHMARK_OUT variable
  // would be their default otherwise).
  std::optional<PartialOut> partial;
  if (!out.empty() && world_rank == 0) partial.emplace(out);
  rest.push_back("--benchmark_out=" + (partial ? partial->path() : std::string()));
  std::vector<char*> rest_argv{argv[0]};
  for (std::string& a : rest) rest_argv.push_back(a.data());
  int rest_argc = static_cast<int>(rest_argv.size());
  benchmark::Initialize(&rest_argc, rest_argv.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest_argv.data())) return 1;
  g_setup_done = true;

  const int cores = host_cores();

  for (int k : devices) {
    if (k > cores && !oversubscribe && !g_mpi) {
      const std::string name = "allreduce/devices:" + std::to_string(k);
      benchmark::RegisterBenchmark(name.c_str(), [k, cores](benchmark::State& s) {
        s.SkipWithError(("skipped: " + std::to_string(k) + " devices need " + std::to_string(k) +
                         " cores, this machine has " + std::to_string(cores) +
                         " (--oversubscribe to time-share)")
                            .c_str());
      })->Iterations(1);
      continue;
    }
    // An algorithm this group cannot run (nccl on CPU devices) is one skipped entry, with why.
    std::map<std::string, std::string> unavailable;
    for (const auto& [algo, factory] : g_algorithms) try {
        factory()->prepare(group(k).ptrs);
      } catch (const Unavailable& e) {
        unavailable[algo] = e.what();
        const std::string name = "allreduce/" + algo + "/devices:" + std::to_string(k);
        benchmark::RegisterBenchmark(name.c_str(), [why = std::string(e.what())](
                                                       benchmark::State& st) {
          st.SkipWithError(("skipped: " + why).c_str());
        })->Iterations(1);
      }
    for (const auto& [algo, factory] : g_algorithms)
      for (int64_t b : byte_sizes) {
        if (unavailable.count(algo)) break;
        // One entry per piece size when several are asked for (their names say "chunk:N",
        // -1 for auto); the default, one, keeps the names as they were.
        for (int64_t chunk : g_chunks) {
          auto* bench = benchmark::RegisterBenchmark(
              ("allreduce/" + algo).c_str(),
              [algo = algo](benchmark::State& s) { run_collective(s, Op::Allreduce, algo); });
          if (g_chunks.size() > 1)
            bench->Args({k, b, chunk})->ArgNames({"devices", "bytes", "chunk"});
          else
            bench->Args({k, b})->ArgNames({"devices", "bytes"});
          bench->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
        }
      }
    for (Op op : {Op::Allgather, Op::ReduceScatter})
      for (int64_t b : byte_sizes)
        benchmark::RegisterBenchmark(op == Op::Allgather ? "allgather/ring" : "reduce_scatter/ring",
                                     [op](benchmark::State& s) { run_collective(s, op, "ring"); })
            ->Args({k, b})
            ->ArgNames({"devices", "bytes"})
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMicrosecond);
    if (g_launches && !g_mpi)
      benchmark::RegisterBenchmark("launches", run_launches)
          ->Args({k})
          ->ArgNames({"devices"})
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMicrosecond);
    for (const auto& [algo, factory] : g_algorithms)
      if (!unavailable.count(algo))
        benchmark::RegisterBenchmark(
            ("lenet_per_tensor/" + algo).c_str(),
            [algo = algo](benchmark::State& s) { run_lenet_per_tensor(s, algo); })
            ->Args({k, kLeNetParameters * 4})
            ->ArgNames({"devices", "bytes"})
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMicrosecond);
  }
  if (2 <= cores || oversubscribe || g_mpi) {
    // Its group now: what it lacks for --graphs=on is then said before any row runs.
    if (g_graphs == "on") (void)group(g_mpi ? world : 2);
    for (int64_t b : byte_sizes)
      benchmark::RegisterBenchmark("memcpy", run_memcpy)
          ->Args({g_mpi ? world : 2, b})
          ->ArgNames({"devices", "bytes"})
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMicrosecond);
  }
  // Under MPI every rank runs every benchmark (they are collective); rank 0 alone reports.
  struct Silent final : benchmark::BenchmarkReporter {
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  } silent;
  const std::size_t ran = world_rank == 0 ? benchmark::RunSpecifiedBenchmarks()
                                          : benchmark::RunSpecifiedBenchmarks(&silent);
  benchmark::Shutdown();
  if (world_rank != 0) return g_failed ? 2 : ran == 0 ? 1 : 0;
  if (partial && ran > 0) partial->commit();
  if (ran == 0) {
    std::fprintf(stderr,
                 "allreduce_bench: no benchmark ran (--benchmark_filter selects none, or is not a "
                 "valid regex; see --benchmark_list_tests)\n");
    return 1;
  }
  if (g_unmade)
    std::fprintf(stderr,
                 "allreduce_bench: --graphs=on: a collective's graph could not be made "
                 "(see above)\n");
  if (g_wrong)
    std::fprintf(stderr, "allreduce_bench: a collective gave a wrong result (see above)\n");
  return g_failed ? 2 : 0;
}

}  // namespace paralab
