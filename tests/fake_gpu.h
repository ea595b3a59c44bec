// Virtual devices of one GPU without a GPU (FakeGpu: CPU devices whose group mover does each
// unit's moves on the host), and one collective over a group's transport (collective): shared by
// tests/test_collectives.cpp and tests/test_model_kernels.cpp (the mover's CUDA kernel, emulated).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "strategies/collectives/collectives.h"
#include "strategies/collectives/transport.h"
#include "strategies/spmd_group.h"
#include "tests/test_util.h"

namespace paralab::testing {

inline std::vector<float> random_data(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

// Virtual devices of one GPU without a GPU: CPU devices in memory domain 0 whose group mover
// does each step's moves as the CUDA kernel defines them (core/cuda/group_moves.h), or through
// StepLog::apply, and logs every step it is handed.
struct StepLog {
  std::mutex mu;
  std::vector<std::vector<GroupMove>> steps;
  std::chrono::milliseconds delay{0};     // how long each step's moves take
  std::vector<bool> captures_with_moves;  // each capture_group()'s group_moves
  // How the mover does a unit's moves (tests/test_model_kernels.cpp: the CUDA kernel, emulated);
  // empty: one after another, in order.
  std::function<void(std::span<const GroupMove>)> apply;
};

class FakeMover final : public GroupMover {
 public:
  explicit FakeMover(StepLog& log) : log_(log) {}
  Done run(std::span<const GroupMove> moves, std::span<const Event> after, bool timed) override {
    (void)after;
    {
      std::lock_guard lock(log_.mu);
      log_.steps.emplace_back(moves.begin(), moves.end());
    }
    Done done;
    if (timed) done.can_move = TimeMark{std::chrono::steady_clock::now(), nullptr};
    std::this_thread::sleep_for(log_.delay);
    if (log_.apply) {
      log_.apply(moves);
    } else {
      for (const GroupMove& m : moves)
        for (int64_t i = 0; i < m.floats; ++i) {
          float v = m.reduce ? m.dst[i] + m.src[0][i] : m.src[0][i];
          if (m.reduce && m.sources == 2) v = v + m.src[1][i];
          m.dst[i] = v;
        }
    }
    if (timed) done.moved = TimeMark{std::chrono::steady_clock::now(), nullptr};
    return done;
  }
  std::string describe() const override { return "fake: one unit per call"; }

 private:
  StepLog& log_;
};

class FakeVirtualDevice final : public ForwardingDevice {
 public:
  FakeVirtualDevice(Device& inner, StepLog& log) : ForwardingDevice(inner), log_(log) {}
  int memory_domain() const override { return 0; }
  std::unique_ptr<GroupMover> group_mover(const std::vector<Device*>& group,
                                          std::string* why_not) override {
    (void)group;
    (void)why_not;
    return std::make_unique<FakeMover>(log_);
  }
  // No graphs here: records what a capture over the group was asked to hold.
  std::unique_ptr<GroupCapture> capture_group(const std::vector<Device*>& group, bool comm_streams,
                                              bool group_moves, std::string* why_not) override {
    (void)group;
    (void)comm_streams;
    std::lock_guard lock(log_.mu);
    log_.captures_with_moves.push_back(group_moves);
    if (why_not) *why_not = "fake: no graphs";
    return nullptr;
  }

 private:
  StepLog& log_;
};

struct FakeGpu {
  explicit FakeGpu(int k) : cpus(make_devices("cpu", k, {})) {
    for (auto& c : cpus) owned.push_back(std::make_unique<FakeVirtualDevice>(*c, log));
    for (auto& d : owned) devices.push_back(d.get());
  }
  StepLog log;
  std::vector<std::unique_ptr<Device>> cpus;
  std::vector<std::unique_ptr<FakeVirtualDevice>> owned;
  std::vector<Device*> devices;
};

// One collective on k CPU ranks whose fabric moves steps `moves`; every rank's result.
enum class Op { Allreduce, ReduceScatter, Allgather };
inline std::vector<std::vector<float>> collective(std::vector<Device*> devices, StepMoves moves,
                                                  const std::string& algorithm, Op op, int64_t n,
                                                  int64_t chunk_bytes, uint64_t seed) {
  const int k = static_cast<int>(devices.size());
  SpmdGroup g(devices, moves);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(k));
  auto ar = make_allreduce(algorithm, {chunk_bytes});
  // Uneven segments with an empty one where k > 2 (channel_split's uneven channel splits).
  std::vector<int64_t> counts;
  for (int r = 0; r < k; ++r) counts.push_back(r == 1 && k > 2 ? 0 : n / k + (r < n % k ? 1 : 0));
  counts.back() += n - std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const auto bounds = segments_from_counts(counts);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(*devices[r], {n}, random_data(n, seed + r));
    if (op == Op::Allreduce) ar->run(t, buf);
    if (op == Op::ReduceScatter) reduce_scatter_ring(t, buf, bounds, chunk_bytes);
    if (op == Op::Allgather) allgather_ring(t, buf, bounds, chunk_bytes);
    out[r] = buf.to_host_f32();
  });
  return out;
}

}  // namespace paralab::testing
