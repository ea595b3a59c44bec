// Collectives (naive, ring, tree allreduce; ring reduce-scatter and all-gather) over the
// in-process transport, on k CPU devices driven by k threads, against a double-precision sum.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "strategies/collectives/collectives.h"
#include "strategies/collectives/p2p_transport.h"
#include "strategies/collectives/transport.h"
#include "strategies/rank_group.h"
#include "strategies/spmd_group.h"
#include "strategies/step_graphs.h"
#include "tests/fake_gpu.h"
#include "tests/fake_nccl.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

using testing::all_close;
using testing::collective;
using testing::FakeGpu;
using testing::FakeNcclPointToPoint;
using testing::Op;
using testing::random_data;
using testing::Wire;

// k devices (CPU, or CUDA devices that may share GPUs) and their SPMD group.
struct Group {
  explicit Group(int k, const std::string& backend = "cpu")
      : devices(make_devices(backend, k, virtual_ok())), spmd(pointers(devices)) {
    ptrs = pointers(devices);
  }
  void run(const std::function<void(int, Transport&)>& fn) { spmd.run(fn); }
  static DeviceOptions virtual_ok() {
    DeviceOptions o;
    o.virtual_devices = true;  // CUDA: k devices on however many GPUs there are
    return o;
  }
  static std::vector<Device*> pointers(const std::vector<std::unique_ptr<Device>>& owned) {
    std::vector<Device*> p;
    for (const auto& d : owned) p.push_back(d.get());
    return p;
  }
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<Device*> ptrs;
  SpmdGroup spmd;
};

// Each rank's input for exact tests: rank r contributes (r+1) * (i % 5 + 1), whose sums are
// small integers and so exact in float32 in any order.
std::vector<float> exact_data(int64_t n, int r) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = float((r + 1) * (i % 5 + 1));
  return v;
}

// Runs `algorithm` on k ranks with inputs(r); returns every rank's result.
std::vector<std::vector<float>> allreduce_all(const std::string& algorithm, int k, int64_t n,
                                              const std::function<std::vector<float>(int)>& inputs,
                                              int64_t chunk_bytes = 1 << 18,
                                              const std::string& backend = "cpu") {
  Group g(k, backend);
  auto ar = make_allreduce(algorithm, {chunk_bytes});
  ar->prepare(g.ptrs);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(k));
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(*g.ptrs[r], {n}, inputs(r));
    ar->run(t, buf);
    out[static_cast<std::size_t>(r)] = buf.to_host_f32();
  });
  return out;
}

struct Case {
  int k;
  int64_t n;
};

std::vector<Case> sweep() {
  std::vector<Case> cases;
  for (int k : {1, 2, 3, 4, 5, 8})
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{7}, int64_t(k - 1), int64_t{129068}, int64_t{1000003}})
      cases.push_back({k, n});
  return cases;
}

class AllreduceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AllreduceTest, MatchesDoubleReferenceOnEveryRank) {
  for (const Case c : sweep()) {
    auto input = [&](int r) { return random_data(c.n, 1000 * c.k + r); };
    const auto out = allreduce_all(GetParam(), c.k, c.n, input);
    std::vector<double> ref(static_cast<std::size_t>(c.n), 0.0);
    for (int r = 0; r < c.k; ++r) {
      const auto v = input(r);
      for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += v[i];
    }
    // Sums of at most 8 float32 terms of magnitude ~1: rounding stays below ~8 ulp of the
    // largest partial sum, so atol 1e-5 is ~10x above it; a missing or doubled term is >= ~0.1.
    for (int r = 0; r < c.k; ++r)
      ASSERT_TRUE(all_close(out[static_cast<std::size_t>(r)], ref, 1e-5, 1e-6))
          << GetParam() << " k=" << c.k << " n=" << c.n << " rank " << r;
    for (int r = 1; r < c.k; ++r)
      ASSERT_EQ(out[static_cast<std::size_t>(r)], out[0])
          << GetParam() << ": rank " << r << " differs from rank 0 (k=" << c.k << " n=" << c.n
          << ")";
  }
}

TEST_P(AllreduceTest, SmallChunksGiveTheSameResult) {
  // Pieces of 4 floats: many pipeline steps, and segments cut mid-piece.
  auto input = [](int r) { return random_data(1001, 7 + r); };
  const auto whole = allreduce_all(GetParam(), 5, 1001, input, 0);
  const auto cut = allreduce_all(GetParam(), 5, 1001, input, 16);
  std::vector<double> ref(1001, 0.0);
  for (int r = 0; r < 5; ++r)
    for (int i = 0; i < 1001; ++i) ref[i] += input(r)[i];
  EXPECT_TRUE(all_close(cut[0], ref, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(whole[0], ref, 1e-5, 1e-6));
  // Every element is summed in the same order however the messages are cut: the same bits on
  // every rank ("auto" may choose whole messages on one GPU and pieces elsewhere).
  EXPECT_EQ(cut, whole);
  EXPECT_EQ(allreduce_all(GetParam(), 5, 1001, input, 1 << 18), whole);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceTest, ::testing::Values("naive", "ring", "tree"),
                         [](const auto& param_info) { return param_info.param; });

TEST(Allreduce, ExactDataGivesBitIdenticalResultsAcrossAlgorithms) {
  for (const Case c : sweep()) {
    // Sanitizer builds (testing::kSanitizerBuild): up to 129,068 floats. Bit-identity is
    // arithmetic, which the sanitizers do not check;
    // AllreduceTest.MatchesDoubleReferenceOnEveryRank runs every size there, 1,000,003 floats
    // included, through the same ranks and pieces.
    if (testing::kSanitizerBuild && c.n > 129068) continue;
    auto input = [&](int r) { return exact_data(c.n, r); };
    const auto naive = allreduce_all("naive", c.k, c.n, input);
    const auto ring = allreduce_all("ring", c.k, c.n, input);
    const auto tree = allreduce_all("tree", c.k, c.n, input);
    std::vector<float> expect(static_cast<std::size_t>(c.n));
    for (int64_t i = 0; i < c.n; ++i)
      expect[static_cast<std::size_t>(i)] = float(c.k * (c.k + 1) / 2 * (i % 5 + 1));
    for (int r = 0; r < c.k; ++r) {
      ASSERT_EQ(naive[r], expect) << "naive k=" << c.k << " n=" << c.n << " rank " << r;
      ASSERT_EQ(ring[r], expect) << "ring k=" << c.k << " n=" << c.n << " rank " << r;
      ASSERT_EQ(tree[r], expect) << "tree k=" << c.k << " n=" << c.n << " rank " << r;
    }
  }
}

TEST(Allreduce, CudaVirtualDevicesMatchReferenceAndAreExactOnExactData) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (const char* algorithm : {"naive", "ring", "tree"})
    for (int k : {2, 3, 4, 8})
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{129068}}) {
        auto exact = [&](int r) { return exact_data(n, r); };
        const auto got = allreduce_all(algorithm, k, n, exact, 1 << 18, "cuda");
        std::vector<float> expect(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          expect[static_cast<std::size_t>(i)] = float(k * (k + 1) / 2 * (i % 5 + 1));
        for (int r = 0; r < k; ++r)
          ASSERT_EQ(got[r], expect) << algorithm << " k=" << k << " n=" << n << " rank " << r;
        auto random = [&](int r) { return random_data(n, 77 + r); };
        const auto rnd = allreduce_all(algorithm, k, n, random, 1 << 18, "cuda");
        std::vector<double> ref(static_cast<std::size_t>(n), 0.0);
        for (int r = 0; r < k; ++r) {
          const auto v = random(r);
          for (int64_t i = 0; i < n; ++i) ref[i] += v[i];
        }
        for (int r = 0; r < k; ++r)
          ASSERT_TRUE(all_close(rnd[r], ref, 1e-5, 1e-6)) << algorithm << " k=" << k;
      }
}

// CUDA ranks under mpirun take the GPU of their node-local rank: a node with more ranks than
// GPUs is refused with one line that says how to start them (trainer.cpp and allreduce_bench
// make every rank agree on it through MpiWorld::first_reason, tested by mpi_transport_test).
TEST(GpuRanks, MoreRanksOnANodeThanGpusIsOneLineThatSaysHowToStartThem) {
  EXPECT_EQ(gpu_per_rank_shortfall(1, 1), "");
  EXPECT_EQ(gpu_per_rank_shortfall(8, 8), "");
  EXPECT_EQ(gpu_per_rank_shortfall(2, 8), "");
  const std::string two_on_one = gpu_per_rank_shortfall(2, 1);
  EXPECT_EQ(two_on_one.rfind("cuda: 2 ranks on this node and 1 GPU(s): ", 0), 0u) << two_on_one;
  EXPECT_NE(two_on_one.find("start at most 1 per node, e.g. mpirun --map-by ppr:1:node"),
            std::string::npos)
      << two_on_one;
  EXPECT_EQ(two_on_one.find('\n'), std::string::npos);
  EXPECT_EQ(gpu_per_rank_shortfall(3, 0), "cuda: no usable GPU on this node");
  // This process's count: none where the CUDA backend cannot make a device.
  if (!backend_unavailable("cuda").empty()) {
    EXPECT_EQ(usable_gpu_count(), 0);
  }
  EXPECT_GE(usable_gpu_count(), 0);
}

TEST(VirtualDevices, CudaGreenContextsGiveEqualDisjointSmSharesOrSayWhyNot) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (int k : {2, 4}) {
    auto devices = make_devices("cuda", k, Group::virtual_ok());
    std::map<int, int> used;  // GPU -> SMs handed out
    for (const auto& d : devices) {
      const nlohmann::json info = d->describe();
      if (info["devices_sharing_gpu"].get<int>() < 2) continue;
      if (info["green_context"].get<bool>()) {
        EXPECT_GT(info["sm_share"].get<int>(), 0) << info.dump();
        used[info["gpu"].get<int>()] += info["sm_share"].get<int>();
        EXPECT_LE(used[info["gpu"].get<int>()], info["sm_count"].get<int>()) << info.dump();
      } else {
        EXPECT_TRUE(info["sm_share"].is_null()) << info.dump();
        EXPECT_TRUE(info["sm_share_note"].is_string()) << "no share and no reason: " << info.dump();
      }
    }
  }
  DeviceOptions off = Group::virtual_ok();
  off.green_contexts = false;
  auto plain = make_devices("cuda", 2, off);
  if (plain[0]->describe()["devices_sharing_gpu"].get<int>() > 1) {
    EXPECT_EQ(plain[0]->describe()["sm_share_note"],
              "no SM share: green contexts off (green_contexts: false)");
  }
}

// How many GPUs give a device of their own each (up to 8; 1 on a one-GPU machine).
int usable_gpus() {
  int gpus = 1;
  for (; gpus < 8; ++gpus) try {
      make_devices("cuda", gpus + 1, {});
    } catch (const Error&) {
      break;
    }
  return gpus;
}

TEST(Nccl, CpuDevicesAreUnavailableWithTheReason) {
  auto ar = make_allreduce("nccl", {});
  auto devices = make_devices("cpu", 2, {});
  try {
    ar->prepare({devices[0].get(), devices[1].get()});
    FAIL() << "no error";
  } catch (const Unavailable& e) {
    EXPECT_STREQ(e.what(), "nccl: needs CUDA devices, and cpu:0 is not one");
  }
}

TEST(Nccl, CudaMatchesReferenceOnDistinctGpusAndRefusesSharedOnes) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  // Two ranks on one GPU (virtual devices): NCCL cannot, and says so.
  {
    auto shared = make_devices("cuda", 2, Group::virtual_ok());
    if (shared[0]->describe()["gpu"] == shared[1]->describe()["gpu"]) {
      try {
        make_allreduce("nccl", {})->prepare(Group::pointers(shared));
        FAIL() << "no error for two ranks on one GPU";
      } catch (const Unavailable& e) {
        EXPECT_NE(std::string(e.what()).find("nccl: cannot put two ranks on one GPU"),
                  std::string::npos)
            << e.what();
      }
    }
  }
  // One rank per GPU, as many as there are (1 on a one-GPU machine).
  const int gpus = usable_gpus();
  auto owned = make_devices("cuda", gpus, {});
  const auto ptrs = Group::pointers(owned);
  SpmdGroup spmd(ptrs);
  auto ar = make_allreduce("nccl", {});
  ar->prepare(ptrs);
  for (int64_t n : {int64_t{1}, int64_t{129068}}) {
    std::vector<std::vector<float>> got(static_cast<std::size_t>(gpus));
    spmd.run([&](int r, Transport& t) {
      Tensor buf = Tensor::from_host(*ptrs[r], {n}, exact_data(n, r));
      ar->run(t, buf);
      got[static_cast<std::size_t>(r)] = buf.to_host_f32();
    });
    std::vector<float> expect(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      expect[static_cast<std::size_t>(i)] = float(gpus * (gpus + 1) / 2 * (i % 5 + 1));
    for (int r = 0; r < gpus; ++r) EXPECT_EQ(got[r], expect) << "n=" << n << " rank " << r;
  }
}

TEST(Allreduce, UnknownNameListsTheKnownOnes) {
  try {
    make_allreduce("butterfly", {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown allreduce 'butterfly' (known: naive, nccl, ring, tree)");
  }
}

TEST(ReduceScatterAllgather, UnevenSegmentsMatchReference) {
  for (int k : {1, 2, 3, 4}) {
    // Uneven splits such as LeNet's 20 channels over 3 devices (7/7/6), and an empty segment.
    std::vector<int64_t> counts;
    for (int r = 0; r < k; ++r) counts.push_back(r == k - 1 && k > 2 ? 0 : 7 - r % 2);
    const auto bounds = segments_from_counts(counts);
    const int64_t n = bounds.back();
    Group g(k);
    std::vector<std::vector<float>> scattered(k), gathered(k);
    g.run([&](int r, Transport& t) {
      Tensor buf = Tensor::from_host(*g.ptrs[r], {n}, random_data(n, 50 + r));
      reduce_scatter_ring(t, buf, bounds);
      scattered[r] = buf.to_host_f32();
      allgather_ring(t, buf, bounds);
      gathered[r] = buf.to_host_f32();
    });
    std::vector<double> ref(static_cast<std::size_t>(n), 0.0);
    for (int r = 0; r < k; ++r) {
      const auto v = random_data(n, 50 + r);
      for (int64_t i = 0; i < n; ++i) ref[i] += v[i];
    }
    for (int r = 0; r < k; ++r) {
      const std::vector<float> own(scattered[r].begin() + bounds[r],
                                   scattered[r].begin() + bounds[r + 1]);
      const std::vector<double> want(ref.begin() + bounds[r], ref.begin() + bounds[r + 1]);
      EXPECT_TRUE(all_close(own, want, 1e-5, 1e-6)) << "reduce-scatter k=" << k << " rank " << r;
      EXPECT_TRUE(all_close(gathered[r], ref, 1e-5, 1e-6)) << "all-gather k=" << k << " rank " << r;
      EXPECT_EQ(gathered[r], gathered[0]) << "k=" << k << " rank " << r;
    }
  }
}

TEST(ReduceScatterAllgather, PieceSizeChangesNoBit) {
  // channel_split passes auto_chunk_bytes (whole messages on one GPU, 256 KiB elsewhere): each
  // element's sum follows the ring's steps, not the pieces, so every piece size gives the bits.
  const int k = 3;
  const auto bounds = segments_from_counts(std::vector<int64_t>{700, 700, 600});
  const int64_t n = bounds.back();
  std::vector<std::vector<float>> first;
  for (int64_t chunk : {int64_t{0}, int64_t{4}, int64_t{400}, kDefaultChunkBytes}) {
    Group g(k);
    std::vector<std::vector<float>> got(k);
    g.run([&](int r, Transport& t) {
      Tensor buf = Tensor::from_host(*g.ptrs[r], {n}, random_data(n, 70 + r));
      reduce_scatter_ring(t, buf, bounds, chunk);
      allgather_ring(t, buf, bounds, chunk);
      got[r] = buf.to_host_f32();
    });
    if (first.empty()) first = got;
    for (int r = 0; r < k; ++r) EXPECT_EQ(got[r], first[r]) << "chunk " << chunk << " rank " << r;
  }
}

TEST(ReduceScatterAllgather, AllgatherMovesEachRanksSegmentExactly) {
  const int k = 3;
  const auto bounds = segments_from_counts(std::vector<int64_t>{7, 7, 6});
  Group g(k);
  std::vector<std::vector<float>> out(k);
  g.run([&](int r, Transport& t) {
    std::vector<float> v(20, -1.0f);
    for (int64_t i = bounds[r]; i < bounds[r + 1]; ++i) v[i] = float(100 * r + i);
    Tensor buf = Tensor::from_host(*g.ptrs[r], {20}, v);
    allgather_ring(t, buf, bounds);
    out[r] = buf.to_host_f32();
  });
  std::vector<float> expect(20);
  for (int r = 0; r < k; ++r)
    for (int64_t i = bounds[r]; i < bounds[r + 1]; ++i) expect[i] = float(100 * r + i);
  for (int r = 0; r < k; ++r) EXPECT_EQ(out[r], expect) << "rank " << r;
}

TEST(Transport, CountsBytesSent) {
  Group g(4);
  std::vector<int64_t> sent(4);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::zeros(*g.ptrs[r], {1000});
    make_allreduce("ring", {})->run(t, buf);
    sent[r] = t.bytes_sent();
  });
  // Ring: 2 (k-1) steps of n/k elements each: 2 * 3 * 250 * 4 bytes.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(sent[r], 6000) << "rank " << r;
}

// Receive timing splits a rank's communication into waiting for the peer and moving the data:
// a receiver whose peer sends 60 ms late waits about that long (at least 40 ms, whatever the
// threads' wake-ups after the barrier), and the copy itself is timed apart from it. Off (the
// default), nothing is counted.
TEST(Transport, ReceiveTimesSplitWaitingForThePeerFromMoving) {
  constexpr int64_t kFloats = 1 << 18;  // 1 MiB: an add of measurable length
  Group g(2);
  std::vector<Transport::ReceiveTimes> times(2);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::zeros(*g.ptrs[r], {kFloats});
    t.set_receive_timing(r == 0);
    t.barrier();  // rank 0 receives at once; rank 1 sends 60 ms later
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      t.send(0, buf);
    } else {
      t.recv_reduce(1, buf);
    }
    times[r] = t.receive_times(*g.ptrs[r]);
  });
  EXPECT_EQ(times[0].receives, 1);
  EXPECT_GE(times[0].wait_ms, 40.0);
  EXPECT_GT(times[0].move_ms, 0.0);  // the add itself (its length depends on the build: no bound)
  EXPECT_EQ(times[1].receives, 0);   // timing off; and it only sent
  // A ring allreduce: 2 (k-1) receives per rank, each timed; a reset starts anew.
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::zeros(*g.ptrs[r], {1000});
    t.set_receive_timing(true);
    make_allreduce("ring", {})->run(t, buf);
    times[r] = t.receive_times(*g.ptrs[r]);
    t.reset_receive_times();
    EXPECT_EQ(t.receive_times(*g.ptrs[r]).receives, 0);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(times[r].receives, 2) << "rank " << r;
}

// A CPU device that hands out event objects, the way a CUDA device does, and logs the order of
// its records, waits and copies: the transport's ordering protocol, checked without a GPU.
class LoggingDevice final : public testing::ForwardingDevice {
 public:
  struct Mark final : DeviceEvent {
    explicit Mark(int serial) : id(serial) {}
    int id;
  };
  LoggingDevice(Device& inner, std::vector<std::string>& log, std::mutex& mu, int& next_id)
      : ForwardingDevice(inner), log_(log), mu_(mu), next_id_(next_id) {}

  void copy_on_device(void* d, const void* s, std::size_t n) override {
    note("copy");
    ForwardingDevice::copy_on_device(d, s, n);
  }
  void synchronize() override { note("synchronize"); }
  Event record() override {
    std::lock_guard lock(mu_);
    auto e = std::make_shared<Mark>(++next_id_);
    log_.push_back(name() + " record e" + std::to_string(e->id));
    return e;
  }
  void wait(const Event& e) override {
    ASSERT_NE(e, nullptr) << name() << " waits on a null event";
    note("wait e" + std::to_string(static_cast<const Mark&>(*e).id));
  }

 private:
  void note(const std::string& what) {
    std::lock_guard lock(mu_);
    log_.push_back(name() + " " + what);
  }
  std::vector<std::string>& log_;
  std::mutex& mu_;
  int& next_id_;
};

// Two LoggingDevices over CPU devices, sharing one log and one event numbering.
struct LoggedPair {
  LoggedPair() : cpus(make_devices("cpu", 2, {})) {
    for (auto& c : cpus) logged.push_back(std::make_unique<LoggingDevice>(*c, log, mu, next_id));
    devices = {logged[0].get(), logged[1].get()};
  }
  // Where `entry` is in the log (the log's size when it is not).
  std::ptrdiff_t at(const std::string& entry) const {
    return std::find(log.begin(), log.end(), entry) - log.begin();
  }
  std::vector<std::unique_ptr<Device>> cpus;
  std::vector<std::string> log;
  std::mutex mu;
  int next_id = 0;
  std::vector<std::unique_ptr<LoggingDevice>> logged;
  std::vector<Device*> devices;
};

// A CPU device in the memory domain of GPU `gpu` (what auto_chunk_bytes reads), counting its
// copies: virtual devices of one GPU, without a GPU.
class FakeGpuDevice final : public testing::ForwardingDevice {
 public:
  FakeGpuDevice(Device& inner, int gpu, std::atomic<int>& copies)
      : ForwardingDevice(inner), gpu_(gpu), copies_(copies) {}
  int memory_domain() const override { return gpu_; }
  void copy_on_device(void* d, const void* s, std::size_t n) override {
    ++copies_;
    ForwardingDevice::copy_on_device(d, s, n);
  }

 private:
  int gpu_;
  std::atomic<int>& copies_;
};

TEST(AutoChunk, WholeMessagesOnlyBetweenVirtualDevicesOfOneGpu) {
  auto cpus = make_devices("cpu", 3, {});
  std::atomic<int> copies{0};
  FakeGpuDevice a(*cpus[0], 0, copies), b(*cpus[1], 0, copies), c(*cpus[2], 1, copies);
  EXPECT_EQ(auto_chunk_bytes({&a, &b}), 0) << "two devices on GPU 0";
  EXPECT_EQ(auto_chunk_bytes({&a, &b, &c}), kDefaultChunkBytes) << "GPUs 0 and 1";
  EXPECT_EQ(auto_chunk_bytes({cpus[0].get(), cpus[1].get()}), kDefaultChunkBytes) << "CPU";
  EXPECT_EQ(auto_chunk_bytes({&a, cpus[1].get()}), kDefaultChunkBytes) << "mixed";
  EXPECT_EQ(auto_chunk_bytes({&a}), kDefaultChunkBytes) << "one device: nothing to cut";
}

TEST(AutoChunk, OneMessagePerRingStepOnOneGpu) {
  // 4 MiB on 2 devices: each ring step moves a 2 MiB segment, 8 pieces of 256 KiB, or one
  // message where "auto" sees one GPU. Counted as the all-gather's copies (the reduce-scatter
  // adds through ops): host work per message is what cost 29 us a piece on an H200.
  auto cpus = make_devices("cpu", 2, {});
  const int64_t n = int64_t{1} << 20;
  for (const bool one_gpu : {true, false}) {
    std::atomic<int> copies{0};
    FakeGpuDevice a(*cpus[0], 0, copies), b(*cpus[1], one_gpu ? 0 : 1, copies);
    std::vector<Device*> devices{&a, &b};
    auto ring = make_allreduce("ring", {auto_chunk_bytes(devices)});
    SpmdGroup g(devices);
    std::vector<std::vector<float>> out(2);
    g.run([&](int r, Transport& t) {
      Tensor buf = Tensor::from_host(*devices[r], {n}, exact_data(n, r));
      ring->run(t, buf);
      out[r] = buf.to_host_f32();
    });
    EXPECT_EQ(copies.load(), one_gpu ? 2 : 16) << (one_gpu ? "one GPU" : "two GPUs");
    EXPECT_EQ(out[0], out[1]);
    EXPECT_EQ(out[0][7], float(3 * (7 % 5 + 1)));
  }
}

// `algorithm` over the point-to-point transport on a fake NCCL, k CPU ranks of n floats from
// input(r): every rank's result, and into `groups` (if given) how many groups each posted.
std::vector<std::vector<float>> allreduce_over_fake_nccl(
    const std::string& algorithm, int k, int64_t n,
    const std::function<std::vector<float>(int)>& input, int64_t chunk,
    std::vector<int>* groups = nullptr, std::vector<int>* largest = nullptr) {
  auto devices = make_devices("cpu", k, {});
  std::vector<Device*> ptrs;
  for (auto& d : devices) ptrs.push_back(d.get());
  Wire wire(k);
  RankGroup threads(ptrs);
  std::vector<std::vector<float>> got(static_cast<std::size_t>(k));
  if (groups) groups->assign(static_cast<std::size_t>(k), 0);
  if (largest) largest->assign(static_cast<std::size_t>(k), 0);
  auto ar = make_allreduce(algorithm, {chunk});
  threads.run([&](int r) {
    auto fake = std::make_unique<FakeNcclPointToPoint>(wire, r, k);
    FakeNcclPointToPoint* counted = fake.get();
    auto t = make_point_to_point_transport(*ptrs[r], std::move(fake), [] {});
    Tensor buf = Tensor::from_host(*ptrs[r], {n}, input(r));
    ar->run(*t, buf);
    got[r] = buf.to_host_f32();
    if (groups) (*groups)[r] = counted->groups;
    if (largest) (*largest)[r] = counted->largest_group;
  });
  return got;
}

// n = 0, 1 and k - 1 too: fewer floats than ranks, where the ring's steps carry empty pieces and
// a rank whose step adds nothing must still post its group, so that its peers' receives meet
// their sends.
TEST(PointToPoint, GroupedSendsRunEveryCollectiveWithTheSameBits) {
  for (int k : {2, 3, 4})
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{k - 1}, int64_t{1001}})
      for (const std::string algorithm : {"naive", "ring", "tree"})
        for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
          auto input = [&](int r) { return random_data(n, 40 + r); };
          const auto want = allreduce_all(algorithm, k, n, input, chunk);
          std::vector<std::vector<float>> got;
          EXPECT_NO_THROW(got = allreduce_over_fake_nccl(algorithm, k, n, input, chunk))
              << algorithm << " on " << k << " ranks, n " << n << ", chunk " << chunk;
          EXPECT_EQ(got, want) << algorithm << " on " << k << " ranks, n " << n << ", chunk "
                               << chunk;
        }
}

// Over NCCL's point-to-point a collective step is one group, however its messages are cut: a
// ring's 2(k-1) steps are 2(k-1) groups per rank with pieces of 16 bytes as whole; naive's rank
// 0 takes k groups (k-1 gathers, one broadcast), every other rank two. The bits are the
// in-process transport's. (Segments of 101 and 100 floats: 26 and 25 pieces, a step of 52
// operations at most, within the bound below.)
TEST(PointToPoint, AStepIsOneGroupHoweverItIsCut) {
  const int k = 3;
  const int64_t n = 301;
  for (const std::string algorithm : {"ring", "naive"})
    for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
      auto input = [&](int r) { return random_data(n, 60 + r); };
      const auto want = allreduce_all(algorithm, k, n, input, chunk);
      std::vector<int> groups;
      const auto got = allreduce_over_fake_nccl(algorithm, k, n, input, chunk, &groups);
      EXPECT_EQ(got, want) << algorithm << " chunk " << chunk;
      for (int r = 0; r < k; ++r) {
        const int expect = algorithm == "ring" ? 2 * (k - 1) : (r == 0 ? k : 2);
        EXPECT_EQ(groups[r], expect) << algorithm << " chunk " << chunk << " rank " << r;
      }
    }
}

// A step of more than 128 operations is not one group (NCCL would cut it into launches by each
// rank's own list): each receive goes with one send. n = 769 on 3 ranks in 16-byte pieces gives
// segments of 257, 256 and 256 floats, 65, 64 and 64 pieces, so steps of 129 and 128 operations:
// ranks on either side of the bound in one step, without a deadlock (the fake NCCL reports one),
// to the in-process transport's bits; and at 1001 floats (84 pieces a segment) every step. The
// tree and naive too, whose ranks take different numbers of operations in a step (a parent
// receives from two children: at 300 floats, 75 pieces a child, 150 receives beside its own 75
// sends, while a leaf's step holds 75).
TEST(PointToPoint, AStepOfMoreThan128OperationsGoesAPieceAtATime) {
  const int k = 3;
  for (const std::string algorithm : {"ring", "tree", "naive"})
    for (const int64_t n : {int64_t{300}, int64_t{769}, int64_t{1001}}) {
      const std::string what = algorithm + " n " + std::to_string(n);
      auto input = [&](int r) { return random_data(n, 70 + r); };
      const auto want = allreduce_all(algorithm, k, n, input, 16);
      std::vector<int> groups, largest;
      std::vector<std::vector<float>> got;
      ASSERT_NO_THROW(got = allreduce_over_fake_nccl(algorithm, k, n, input, 16, &groups, &largest))
          << what;
      EXPECT_EQ(got, want) << what;
      for (int r = 0; r < k; ++r) {
        EXPECT_LE(largest[r], 128) << what << " rank " << r;
        if (algorithm == "ring" && n > 300) {
          EXPECT_GT(groups[r], 2 * (k - 1)) << what << " rank " << r;
        }
      }
    }
}

// A device whose thread cannot be bound (as a CUDA device that is gone): each task the group
// runs fails with that error, rethrown by run(), instead of ending the process from the thread.
class UnbindableDevice final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  void bind_thread() override { throw Error("device 1 lost"); }
};

TEST(RankGroup, AThreadThatCannotBindFailsEveryRunWithItsError) {
  auto devices = make_devices("cpu", 2, {});
  UnbindableDevice lost(*devices[1]);
  RankGroup group({devices[0].get(), &lost});
  std::atomic<int> ran{0};
  for (int i = 0; i < 2; ++i) {
    try {
      group.run([&](int rank) {
        EXPECT_EQ(rank, 0);
        ++ran;
      });
      ADD_FAILURE() << "run() did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("device 1 lost"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ran.load(), 2);  // the bound rank ran each task
}

// A rank that fails aborts the fabric and wakes the peers waiting on it, whose "a peer failed"
// can be recorded before the failed rank's own error: the group reports the cause regardless.
// Here the order is forced: rank 0 aborts the fabric, waits until rank 1 has thrown from its
// receive, and only then throws its own error.
TEST(RankGroup, ReportsTheFailedRanksErrorNotThePeersReportOfIt) {
  auto devices = make_devices("cpu", 2, {});
  LocalFabric fabric({devices[0].get(), devices[1].get()});
  RankGroup group({devices[0].get(), devices[1].get()});
  std::mutex mu;
  std::condition_variable cv;
  bool peer_threw = false;
  try {
    group.run([&](int rank) {
      if (rank == 1) {
        Tensor buf = Tensor::zeros(*devices[1], {4});
        try {
          fabric.endpoint(1).recv(0, buf);  // never sent: woken only by the abort
        } catch (const PeerFailed&) {
          {
            std::lock_guard lock(mu);
            peer_threw = true;
          }
          cv.notify_all();
          throw;
        }
        return;
      }
      fabric.abort();
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return peer_threw; });
      throw Error("rank 0: its device failed");
    });
    ADD_FAILURE() << "run() did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 0: its device failed");
  }
}

// run() reports the error that says most about the cause, whatever the order the ranks throw
// in: a rank's own error over a call on a capture another call invalidated
// (CaptureInvalidated), and that over a peer's plain report (PeerFailed).
TEST(RankGroup, ReportsTheOwnErrorThenTheInvalidatedCaptureThenThePeersReport) {
  auto devices = make_devices("cpu", 3, {});
  RankGroup group({devices[0].get(), devices[1].get(), devices[2].get()});
  enum Kind { Peer, Invalidated, Own };
  const auto report = [&](std::vector<Kind> kinds) {
    try {
      group.run([&](int rank) {
        const std::string m = "rank " + std::to_string(rank);
        switch (kinds[static_cast<std::size_t>(rank)]) {
          case Peer:
            throw PeerFailed(m);
          case Invalidated:
            throw CaptureInvalidated(m);
          case Own:
            throw Error(m);
        }
      });
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("nothing");
  };
  for (int round = 0; round < 20; ++round) {
    EXPECT_EQ(report({Peer, Invalidated, Own}), "rank 2");
    EXPECT_EQ(report({Own, Peer, Invalidated}), "rank 0");
    EXPECT_EQ(report({Invalidated, Own, Peer}), "rank 1");
    EXPECT_EQ(report({Peer, Invalidated, Peer}), "rank 1");
    EXPECT_EQ(report({Invalidated, Peer, Peer}), "rank 0");
  }
}

// The process's address space in bytes (VmSize in /proc/self/status), 0 when unreadable.
std::size_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

// Limits this process's address space to room for one more thread stack and not for two, then
// starts a group of devices.size() ranks: exits 0 after printing the Error the constructor threw,
// 3 when every thread started, 4-6 when the limit could not be set up.
[[noreturn]] void start_group_with_room_for_one_thread(const std::vector<Device*>& devices) {
  pthread_attr_t attr;
  std::size_t stack = 0;
  if (pthread_getattr_default_np(&attr) != 0 || pthread_attr_getstacksize(&attr, &stack) != 0 ||
      stack == 0)
    std::_Exit(4);
  const std::size_t used = address_space_bytes();
  if (used == 0) std::_Exit(5);
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = used + stack + stack / 2;
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(6);
  try {
    RankGroup group(devices);
    std::fputs("every thread started\n", stderr);
    std::_Exit(3);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(0);
  }
}

// A rank whose thread the system refuses fails the group's construction with an Error naming the
// rank; the ranks already started are stopped and joined first, where a joinable std::thread
// left to the unwinding would abort the process.
TEST(RankGroup, AThreadTheSystemRefusesFailsTheGroupWithAnError) {
  if (testing::kSanitizerBuild)
    GTEST_SKIP() << "the sanitizers' shadow memory does not fit an address-space limit";
#ifdef GTEST_FLAG_SET
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#else  // GoogleTest < 1.12 (Ubuntu 22.04 has 1.11)
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
#endif
  auto devices = make_devices("cpu", 4, {});
  std::vector<Device*> ptrs;
  for (auto& d : devices) ptrs.push_back(d.get());
  EXPECT_EXIT(start_group_with_room_for_one_thread(ptrs), ::testing::ExitedWithCode(0),
              "rank group: could not start the thread of rank [1-3] of 4");
}

// The ranks' aborts of a group's capture (GroupAbortGate, core/device.h): the origin's wait
// returns only once every other rank has stopped (a repeat counts once), and the gate is then
// ready for the next capture, whose origin waits again.
TEST(RankGroup, TheCaptureOriginsAbortWaitsForEveryOtherRank) {
  const int k = 4;
  GroupAbortGate gate(k);
  for (int capture = 0; capture < 2; ++capture) {
    std::atomic<int> stopped{0};
    std::atomic<bool> origin_done{false};
    std::thread origin([&] {
      gate.wait_for_peers();
      origin_done = true;
      EXPECT_EQ(stopped.load(), k - 1) << "capture " << capture;
    });
    for (int r = 1; r < k; ++r) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_FALSE(origin_done) << "capture " << capture << ", before rank " << r << " stopped";
      ++stopped;
      gate.stopped(r);
      if (r == 1) gate.stopped(r);  // a repeat
    }
    origin.join();
    EXPECT_TRUE(origin_done);
  }
  GroupAbortGate alone(1);
  alone.wait_for_peers();  // a group of one: nobody to wait for
}

// A rank that does not stop keeps the origin waiting (ending the capture would run that rank's
// later work outside it), and after the gate's warning time the origin names it on stderr, once.
TEST(RankGroup, TheCaptureOriginNamesTheRanksItStillWaitsFor) {
  GroupAbortGate gate(4, std::chrono::milliseconds(50));
  ::testing::internal::CaptureStderr();
  std::atomic<bool> origin_done{false};
  std::thread origin([&] {
    gate.wait_for_peers();
    origin_done = true;
  });
  gate.stopped(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(origin_done);
  gate.stopped(1);
  gate.stopped(3);
  origin.join();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "paralab: a broken group capture's origin has waited 0.05 s for rank(s) 1 3 of 4 to "
            "stop queueing into it\n");
}

// A CPU device that says it is a CUDA device: what nccl's prepare() accepts, without a GPU.
class CudaKindDevice final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  DeviceKind kind() const override { return DeviceKind::Cuda; }
};

TEST(PointToPoint, NcclAllreduceUsesTheProcessCommunicator) {
  // Under mpirun each process prepares "nccl" with its one device and runs it over the
  // transport's own communicator (ncclCommInitRank), not a communicator of its own.
  for (int k : {2, 3}) {
    auto cpus = make_devices("cpu", k, {});
    std::vector<std::unique_ptr<CudaKindDevice>> gpus;
    std::vector<Device*> ptrs;
    for (auto& d : cpus) {
      gpus.push_back(std::make_unique<CudaKindDevice>(*d));
      ptrs.push_back(gpus.back().get());
    }
    // prepare() refuses "nccl" in a build without NCCL, whose processes could not have made
    // the communicator either.
    try {
      check_native_collectives("nccl", ptrs);
    } catch (const Unavailable& e) {
      GTEST_SKIP() << e.what();
    }
    Wire wire(k);
    RankGroup threads(ptrs);
    const int64_t n = 1001;
    std::vector<std::vector<float>> got(static_cast<std::size_t>(k));
    std::vector<int> calls(static_cast<std::size_t>(k));
    threads.run([&](int r) {
      auto p2p = std::make_unique<FakeNcclPointToPoint>(wire, r, k);
      FakeNcclPointToPoint& fake = *p2p;
      auto t = make_point_to_point_transport(*ptrs[r], std::move(p2p), [] {});
      auto ar = make_allreduce("nccl", {});
      ar->prepare({ptrs[r]});
      Tensor buf = Tensor::from_host(*ptrs[r], {n}, exact_data(n, r));
      ar->run(*t, buf);
      got[static_cast<std::size_t>(r)] = buf.to_host_f32();
      calls[static_cast<std::size_t>(r)] = fake.allreduces;
    });
    for (int r = 0; r < k; ++r) {
      EXPECT_EQ(calls[r], 1) << "rank " << r << " did not use the communicator's allreduce";
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[r][i], float(k * (k + 1) / 2 * (i % 5 + 1))) << "rank " << r << " at " << i;
    }
  }
}

// The GPU path between processes, in one process: one NCCL communicator of ncclCommInitRank
// ranks (one thread per GPU, as each process would run its rank) under the grouped transport.
// Every algorithm, and "nccl" over the same communicator, gives the exact sum. On a one-GPU
// machine this is one rank: the communicator, the grouping and the native allreduce still run.
TEST(PointToPoint, CudaNcclCommunicatorRunsEveryAllreduce) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  const int gpus = usable_gpus();
  auto owned = make_devices("cuda", gpus, {});
  const auto ptrs = Group::pointers(owned);
  std::string id;
  try {
    id = native_unique_id("nccl");
  } catch (const Unavailable& e) {
    GTEST_SKIP() << e.what();
  }
  std::vector<std::unique_ptr<Transport>> transports(static_cast<std::size_t>(gpus));
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0, generation = 0;
  auto barrier = [&] {  // the host barrier MPI gives between processes
    std::unique_lock lock(mu);
    const int g = generation;
    if (++arrived == gpus) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != g; });
    }
  };
  RankGroup threads(ptrs);
  threads.run([&](int r) {  // every rank's ncclCommInitRank at once, as processes would
    transports[static_cast<std::size_t>(r)] = make_point_to_point_transport(
        *ptrs[r], make_native_point_to_point("nccl", *ptrs[r], id, r, gpus), barrier);
  });
  for (const std::string algorithm : {"naive", "ring", "tree", "nccl"})
    for (int64_t n : {int64_t{1}, int64_t{129068}}) {
      auto ar = make_allreduce(algorithm, {int64_t{1} << 16});
      std::vector<std::vector<float>> got(static_cast<std::size_t>(gpus));
      threads.run([&](int r) {
        ar->prepare({ptrs[r]});  // one device per rank, as under mpirun
        Transport& t = *transports[static_cast<std::size_t>(r)];
        Tensor buf = Tensor::from_host(*ptrs[r], {n}, exact_data(n, r));
        ar->run(t, buf);
        t.barrier();
        got[static_cast<std::size_t>(r)] = buf.to_host_f32();
      });
      for (int r = 0; r < gpus; ++r)
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[r][i], float(gpus * (gpus + 1) / 2 * (i % 5 + 1)))
              << algorithm << " n=" << n << " rank " << r << " at " << i;
    }
}

TEST(Nccl, OneCpuDeviceIsUnavailableWithTheReason) {
  auto devices = make_devices("cpu", 1, {});
  try {
    make_allreduce("nccl", {})->prepare({devices[0].get()});
    FAIL() << "no error";
  } catch (const Unavailable& e) {
    EXPECT_STREQ(e.what(), "nccl: needs CUDA devices, and cpu:0 is not one");
  }
}

TEST(Transport, OrdersDevicesWithEventsNotHostSynchronisation) {
  LoggedPair pair;
  const auto& log = pair.log;
  const auto& devices = pair.devices;
  SpmdGroup g(devices);
  std::vector<std::string> before_wait;
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(*devices[r], {4}, std::vector<float>{1, 2, 3, float(r)});
    if (r == 0) {
      auto h = t.isend(1, buf);
      t.wait(h);
    } else {
      t.recv(0, buf);
      EXPECT_EQ(buf.to_host_f32(), (std::vector<float>{1, 2, 3, 0}));
    }
  });
  // The sender marks its buffer ready; the receiver's device waits on that mark, copies, marks
  // the copy; the sender's device waits on the copy's mark before it may reuse the buffer. No
  // host synchronisation anywhere.
  auto at = [&](const std::string& entry) { return pair.at(entry); };
  const std::vector<std::string> expected = {"cpu:0 record e1", "cpu:1 wait e1", "cpu:1 copy",
                                             "cpu:1 record e2", "cpu:0 wait e2"};
  for (const auto& entry : expected)
    ASSERT_LT(at(entry), static_cast<std::ptrdiff_t>(log.size())) << "missing: " << entry;
  for (std::size_t i = 1; i < expected.size(); ++i)
    EXPECT_LT(at(expected[i - 1]), at(expected[i])) << expected[i - 1] << " before " << expected[i];
  for (const auto& entry : log) EXPECT_EQ(entry.find("synchronize"), std::string::npos) << entry;
}

// ---------------------------------------------------------------------------------------------
// Whole steps (Transport::step, LocalFabric over devices of one memory domain): every rank's
// moves of a collective step queued at once by the last rank to arrive.

TEST(WholeSteps, EveryCollectiveGivesThePerRankBits) {
  // CPU devices have no group mover: whole steps move on the last rank's device, in order.
  // Sanitizer builds (testing::kSanitizerBuild): up to 5 ranks (8 too in the plain build), a
  // tree of three levels and a ring whose pieces do not divide n, as on 8.
  for (int k : {2, 3, 5, 8}) {
    if (testing::kSanitizerBuild && k == 8) continue;
    auto owned = make_devices("cpu", k, {});
    std::vector<Device*> devices = Group::pointers(owned);
    {
      SpmdGroup g(devices, StepMoves::Whole);
      EXPECT_EQ(g.step_moves().rfind("whole collectives: ", 0), 0u) << g.step_moves();
      EXPECT_TRUE(g.moves_collectives_whole());
      SpmdGroup steps(devices, StepMoves::WholeSteps);
      EXPECT_EQ(steps.step_moves().rfind("whole steps: ", 0), 0u) << steps.step_moves();
      EXPECT_TRUE(steps.moves_steps_whole());
      EXPECT_FALSE(steps.moves_collectives_whole());
    }
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t(k - 1), int64_t{1001}, int64_t{20000}})
      for (int64_t chunk : {int64_t{0}, n > 1001 ? int64_t{4096} : int64_t{64}, int64_t{1} << 18})
        for (StepMoves moves : {StepMoves::Whole, StepMoves::WholeSteps}) {
          for (const std::string algorithm : {"naive", "ring", "tree"}) {
            const auto want =
                collective(devices, StepMoves::PerRank, algorithm, Op::Allreduce, n, chunk, 7);
            const auto got = collective(devices, moves, algorithm, Op::Allreduce, n, chunk, 7);
            ASSERT_EQ(got, want) << algorithm << " k=" << k << " n=" << n << " chunk=" << chunk;
          }
          for (Op op : {Op::ReduceScatter, Op::Allgather}) {
            const auto want = collective(devices, StepMoves::PerRank, "ring", op, n, chunk, 9);
            const auto got = collective(devices, moves, "ring", op, n, chunk, 9);
            ASSERT_EQ(got, want) << (op == Op::Allgather ? "allgather" : "reduce-scatter")
                                 << " k=" << k << " n=" << n << " chunk=" << chunk;
          }
        }
  }
}

// A collective is one unit on one GPU (Auto: whole collectives), its steps the unit's phases in
// order; under WholeSteps each step is a unit of its own, with moves of the same shapes. Either way
// a step is one unit's worth whatever k and chunk.
TEST(WholeSteps, OneUnitPerCollectiveItsStepsInOrderWhateverKAndChunkOnOneGpu) {
  const int64_t n = 40003;
  for (int k : {2, 4, 8}) {
    for (const std::string algorithm : {"naive", "ring", "tree"})
      for (int64_t chunk : {int64_t{0}, int64_t{1024}}) {
        FakeGpu gpu(k);
        {
          SpmdGroup g(gpu.devices, StepMoves::Auto);  // Auto takes a group mover where there is one
          EXPECT_EQ(g.step_moves(),
                    "whole collectives: each collective's steps moved together, in order, as "
                    "fake: one unit per call");
          EXPECT_TRUE(g.moves_steps_whole());
          EXPECT_TRUE(g.moves_collectives_whole());
          EXPECT_FALSE(SpmdGroup(gpu.devices, StepMoves::PerRank).moves_steps_whole());
        }
        const auto got =
            collective(gpu.devices, StepMoves::Auto, algorithm, Op::Allreduce, n, chunk, 3);
        auto owned = make_devices("cpu", k, {});
        const auto want = collective(Group::pointers(owned), StepMoves::PerRank, algorithm,
                                     Op::Allreduce, n, chunk, 3);
        ASSERT_EQ(got, want) << algorithm << " k=" << k << " chunk=" << chunk;
        ASSERT_EQ(gpu.log.steps.size(), 1u) << algorithm << " k=" << k << " chunk=" << chunk;
        const std::vector<GroupMove> unit = gpu.log.steps.front();
        // The same collective a step at a time: its units are the one unit's phases.
        gpu.log.steps.clear();
        ASSERT_EQ(
            collective(gpu.devices, StepMoves::WholeSteps, algorithm, Op::Allreduce, n, chunk, 3),
            want);
        std::size_t at = 0;
        for (std::size_t s = 0; s < gpu.log.steps.size(); ++s)
          for (const GroupMove& m : gpu.log.steps[s]) {
            ASSERT_LT(at, unit.size());
            const GroupMove& u = unit[at++];
            EXPECT_EQ(u.phase, static_cast<int>(s)) << algorithm << " k=" << k << " step " << s;
            EXPECT_EQ(m.phase, 0);
            // (Other buffers, so other addresses: the moves' shapes.)
            EXPECT_TRUE(u.floats == m.floats && u.sources == m.sources && u.reduce == m.reduce)
                << algorithm << " k=" << k << " chunk=" << chunk << " step " << s;
          }
        EXPECT_EQ(at, unit.size());
        int depth = 0;
        for (int x = k; x > 1; x /= 2) ++depth;
        const std::size_t chunks =
            chunk ? static_cast<std::size_t>((n * 4 + chunk - 1) / chunk) : 1;
        std::size_t steps = 0, moves_per_step = 0;
        if (algorithm == "naive") steps = static_cast<std::size_t>(k);
        if (algorithm == "ring") steps = 2 * static_cast<std::size_t>(k - 1), moves_per_step = k;
        if (algorithm == "tree") steps = 2 * (chunks + depth - 1);
        EXPECT_EQ(gpu.log.steps.size(), steps) << algorithm << " k=" << k << " chunk=" << chunk;
        // A ring step's pieces of one segment are one move per rank, however the segment is cut.
        if (moves_per_step) {
          for (const auto& step : gpu.log.steps)
            EXPECT_EQ(step.size(), moves_per_step) << algorithm << " k=" << k << " chunk=" << chunk;
        }
        if (algorithm == "naive") {
          for (std::size_t s = 0; s + 1 < steps; ++s) EXPECT_EQ(gpu.log.steps[s].size(), 1u);
          EXPECT_EQ(gpu.log.steps.back().size(), static_cast<std::size_t>(k - 1));
        }
        if (algorithm == "tree" && !chunk) {
          // Up, deepest level first: a parent adds both children in one move; the root last.
          const auto& root = gpu.log.steps[static_cast<std::size_t>(depth - 1)];
          ASSERT_EQ(root.size(), 1u);
          EXPECT_EQ(root[0].sources, k > 2 ? 2 : 1);
          EXPECT_TRUE(root[0].reduce);
        }
      }
  }
}

// A graph over the group is tried with the work the transport will put in it: the group mover's
// runs where the fabric moves whole steps or collectives (the CUDA trial capture then runs the
// mover, core/cuda/group_capture.cpp), not where each message is its receiver's.
TEST(WholeSteps, TheGroupsTrialCaptureHoldsTheMoverWhereTheFabricUsesIt) {
  FakeGpu gpu(3);
  for (const auto& [moves, want] :
       {std::pair{StepMoves::Auto, true}, std::pair{StepMoves::WholeSteps, true},
        std::pair{StepMoves::PerRank, false}}) {
    SpmdGroup group(gpu.devices, moves);
    gpu.log.captures_with_moves.clear();
    std::unique_ptr<GroupCapture> capture;
    EXPECT_EQ(plan_group_graph("the ring allreduce", group, gpu.devices, &capture),
              "the ring allreduce needs one graph over the group: fake: no graphs");
    ASSERT_EQ(gpu.log.captures_with_moves.size(), 1u);
    EXPECT_EQ(gpu.log.captures_with_moves[0], want) << group.step_moves();
  }
}

TEST(WholeSteps, ARankThatFailsBeforeAStepFailsItsPeersInsteadOfHanging) {
  FakeGpu gpu(3);
  SpmdGroup g(gpu.devices, StepMoves::Auto);
  try {
    g.run([&](int r, Transport& t) {
      if (r == 1) throw Error("rank 1 lost its device");
      Tensor buf = Tensor::zeros(*gpu.devices[r], {100});
      make_allreduce("ring", {0})->run(t, buf);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rank 1 lost its device");
  }
}

// Runs body(rank, transport, buf) on every rank of a fake GPU of k devices (buf: 8 zeros of the
// rank's, or `floats(rank)`); expects every rank to fail, none to hang, and returns the error
// the group reports.
std::string error_of_every_rank(int k, const std::function<void(int, Transport&, Tensor&)>& body,
                                const std::function<int64_t(int)>& floats = nullptr) {
  FakeGpu gpu(k);
  SpmdGroup g(gpu.devices, StepMoves::Auto);
  std::atomic<int> failed{0};
  try {
    g.run([&](int r, Transport& t) {
      Tensor buf = Tensor::zeros(*gpu.devices[r], {floats ? floats(r) : 8});
      try {
        body(r, t, buf);
      } catch (const Error&) {
        ++failed;
        throw;
      }
    });
  } catch (const Error& e) {
    EXPECT_EQ(failed.load(), k) << "every rank fails, none hangs";
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(WholeSteps, SizeMismatchFailsEveryRankWithTheMessage) {
  const std::string error = error_of_every_rank(
      3, [](int, Transport& t, Tensor& buf) { make_allreduce("naive", {0})->run(t, buf); },
      [](int r) { return r == 1 ? 5 : 4; });
  EXPECT_NE(error.find("transport: rank 0 expected 4 values from rank 1, got 5"), std::string::npos)
      << error;
}

// A step whose sends and receives do not pair up fails every rank with one line naming the
// ranks, whichever side has the extra message.
TEST(WholeSteps, UnpairedMessagesFailEveryRankNamingThem) {
  for (const bool extra_receive : {true, false}) {
    const std::string error = error_of_every_rank(2, [&](int r, Transport& t, Tensor& buf) {
      std::vector<Transport::StepSend> sends;
      std::vector<Transport::StepReceive> receives;
      if (r == 0 && extra_receive) receives.push_back({1, buf, true});
      if (r == 0 && !extra_receive) sends.push_back({1, buf});
      t.step(sends, receives);
    });
    EXPECT_EQ(error, extra_receive ? "transport: rank 0 receives from rank 1 in a step where it "
                                     "sends rank 0 nothing more"
                                   : "transport: rank 0 sends rank 1 more in a step than rank 1 "
                                     "receives");
  }
}

TEST(WholeSteps, ReceiveTimesCountEveryReceive) {
  FakeGpu gpu(2);
  SpmdGroup g(gpu.devices, StepMoves::Auto);
  std::vector<Transport::ReceiveTimes> times(2);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::zeros(*gpu.devices[r], {1000});
    t.set_receive_timing(true);
    make_allreduce("ring", {0})->run(t, buf);
    times[r] = t.receive_times(*gpu.devices[r]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(times[r].receives, 2) << "rank " << r;
    EXPECT_GE(times[r].wait_ms, 0.0);
    EXPECT_GE(times[r].move_ms, 0.0);
  }
  // A tree's root receives both children in one step: two receives, one unit's time (each
  // unit of moves takes 30 ms here; the tree on 3 ranks, one step up and one down, is one unit).
  FakeGpu three(3);
  three.log.delay = std::chrono::milliseconds(30);
  SpmdGroup g3(three.devices, StepMoves::Auto);
  std::vector<Transport::ReceiveTimes> tree(3);
  g3.run([&](int r, Transport& t) {
    Tensor buf = Tensor::zeros(*three.devices[r], {1000});
    t.set_receive_timing(true);
    make_allreduce("tree", {0})->run(t, buf);
    tree[r] = t.receive_times(*three.devices[r]);
  });
  EXPECT_EQ(tree[0].receives, 2);
  EXPECT_GE(tree[0].move_ms, 29.0);
  EXPECT_LT(tree[0].move_ms, 55.0) << "the root's one step of moves counted once, not per receive";
  for (int r = 1; r < 3; ++r) EXPECT_EQ(tree[r].receives, 1) << "rank " << r;
}

// The log of a pair that moved data in whole steps: no host synchronisation; the moving device
// (the leader) waits on events 1 and 2 (the ranks' work so far) before its copies and records
// event 3 after them; both ranks wait on event 3 after it. Returns the leader's name.
std::string expect_ordered_by_events(const LoggedPair& pair) {
  const auto& log = pair.log;
  std::string leader;
  for (const auto& entry : log) {
    EXPECT_EQ(entry.find("synchronize"), std::string::npos) << entry;
    if (entry.find(" copy") != std::string::npos) leader = entry.substr(0, entry.find(' '));
  }
  EXPECT_FALSE(leader.empty()) << "no copy";
  auto at = [&](const std::string& entry) { return pair.at(entry); };
  const auto end = static_cast<std::ptrdiff_t>(log.size());
  for (const char* e : {"e1", "e2"})
    EXPECT_LT(at(leader + " wait " + e), at(leader + " copy")) << e << " waited before the copy";
  EXPECT_LT(at(leader + " copy"), at(leader + " record e3"));
  for (const std::string d : {"cpu:0", "cpu:1"}) {
    EXPECT_LT(at(d + " wait e3"), end) << d << " waits for the moves";
    EXPECT_LT(at(leader + " record e3"), at(d + " wait e3"));
  }
  return leader;
}

TEST(WholeSteps, OrderedByEventsNotHostSynchronisation) {
  // The step waits for every rank's work so far and every rank's later work waits for the step:
  // each rank records, the leader's device waits on all, moves, records; each rank waits on it.
  LoggedPair pair;
  const auto& devices = pair.devices;
  SpmdGroup g(devices, StepMoves::Whole);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(*devices[r], {4}, std::vector<float>{1, 2, 3, float(r)});
    if (r == 0)
      t.step(std::vector<Transport::StepSend>{{1, buf}}, {});
    else
      t.step({}, std::vector<Transport::StepReceive>{{0, buf, false}});
    if (r == 1) {
      EXPECT_EQ(buf.to_host_f32(), (std::vector<float>{1, 2, 3, 0}));
    }
  });
  expect_ordered_by_events(pair);
}

// A run of steps (a collective) waits for each rank's work before its first step, moves its
// steps' data in order after that, and every rank's later work waits for the whole run: no host
// synchronisation, no event per later step.
TEST(WholeSteps, ARunOfStepsIsOrderedByEventsAsOneStep) {
  LoggedPair pair;
  const auto& log = pair.log;
  const auto& devices = pair.devices;
  SpmdGroup g(devices, StepMoves::Whole);
  g.run([&](int r, Transport& t) {
    Tensor buf = Tensor::from_host(*devices[r], {4}, std::vector<float>{1, 2, 3, float(r)});
    using Send = Transport::StepSend;
    using Receive = Transport::StepReceive;
    StepRun run(t);
    // Rank 0's buffer to rank 1, then rank 1's (now rank 0's) back, added.
    if (r == 0) {
      t.step(std::vector<Send>{{1, buf}}, {});
      t.step({}, std::vector<Receive>{{1, buf, true}});
    } else {
      t.step({}, std::vector<Receive>{{0, buf, false}});
      t.step(std::vector<Send>{{0, buf}}, {});
    }
    run.end();
    EXPECT_EQ(buf.to_host_f32(),
              r == 0 ? (std::vector<float>{2, 4, 6, 0}) : (std::vector<float>{1, 2, 3, 0}));
  });
  // Event 3 is the run's end: no event per step after it.
  const std::string leader = expect_ordered_by_events(pair);
  EXPECT_EQ(pair.at(leader + " record e4"), static_cast<std::ptrdiff_t>(log.size()))
      << "one event for the run's end, none per step";
}

// Ranks that disagree on whether a step belongs to a run, or to which run, all fail with one
// line, none hangs: a step of a run against a step of its own; a run's second step against the
// first of a new run (after a rank dropped the run it was in).
TEST(WholeSteps, RanksOutOfStepWithARunFailEveryRank) {
  for (const bool dropped : {false, true}) {
    const std::string error = error_of_every_rank(2, [&](int r, Transport& t, Tensor& buf) {
      std::vector<Transport::StepSend> sends;
      std::vector<Transport::StepReceive> receives;
      if (r == 0) sends.push_back({1, buf});
      if (r == 1) receives.push_back({0, buf, false});
      if (r == 1 && !dropped) {
        t.step(sends, receives);  // a step of its own
        return;
      }
      StepRun run(t);
      t.step(sends, receives);
      if (dropped && r == 0) {
        t.drop_steps();
        StepRun again(t);
        t.step(sends, receives);  // the first step of another run
        again.end();
      } else if (dropped) {
        t.step(sends, receives);  // the run's second step
      }
      run.end();
    });
    EXPECT_NE(error.find("transport: ranks out of step"), std::string::npos)
        << (dropped ? "dropped: " : "run against step: ") << error;
  }
}

// On a GPU: virtual devices of one GPU move whole collectives by default (one kernel per
// collective on the whole GPU; whole steps on request: one per step), with the bits each
// message's own kernel gives, for every collective, chunked or not.
TEST(WholeSteps, CudaVirtualDevicesMoveWholeStepsWithThePerRankBits) {
  if (const std::string why = backend_unavailable("cuda"); !why.empty())
    GTEST_SKIP() << "cuda: " << why;
  for (int k : {2, 3, 4, 8}) {
    auto owned = make_devices("cuda", k, Group::virtual_ok());
    std::vector<Device*> devices = Group::pointers(owned);
    {
      SpmdGroup g(devices, StepMoves::Auto);
      ASSERT_EQ(g.step_moves().rfind("whole collectives: ", 0), 0u) << g.step_moves();
      ASSERT_NE(g.step_moves().find("one kernel for all"), std::string::npos) << g.step_moves();
    }
    for (int64_t n : {int64_t{1}, int64_t(k - 1), int64_t{129068}, int64_t{1000003}})
      for (int64_t chunk : {int64_t{0}, int64_t{1} << 18})
        for (StepMoves moves : {StepMoves::Auto, StepMoves::WholeSteps}) {
          const char* how = moves == StepMoves::Auto ? " (whole collectives)" : " (whole steps)";
          for (const std::string algorithm : {"naive", "ring", "tree"}) {
            const auto want =
                collective(devices, StepMoves::PerRank, algorithm, Op::Allreduce, n, chunk, 11);
            const auto got = collective(devices, moves, algorithm, Op::Allreduce, n, chunk, 11);
            ASSERT_EQ(got, want) << algorithm << " k=" << k << " n=" << n << " chunk=" << chunk
                                 << how;
            for (int r = 1; r < k; ++r)
              ASSERT_EQ(got[r], got[0]) << algorithm << " rank " << r << how;
          }
          for (Op op : {Op::ReduceScatter, Op::Allgather}) {
            const auto want = collective(devices, StepMoves::PerRank, "ring", op, n, chunk, 13);
            const auto got = collective(devices, moves, "ring", op, n, chunk, 13);
            ASSERT_EQ(got, want) << (op == Op::Allgather ? "allgather" : "reduce-scatter")
                                 << " k=" << k << " n=" << n << " chunk=" << chunk << how;
          }
        }
  }
}

TEST(WholeSteps, UnknownStepMovesNamesTheVariable) {
  testing::EnvGuard env("PARALAB_STEP_MOVES");
  env.set("sometimes");
  try {
    step_moves_from_env();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "PARALAB_STEP_MOVES: 'sometimes' is none of auto, per_rank, whole, whole_steps");
  }
  env.set("per_rank");
  EXPECT_EQ(step_moves_from_env(), StepMoves::PerRank);
  env.set("whole");
  EXPECT_EQ(step_moves_from_env(), StepMoves::Whole);
  env.set("whole_steps");
  EXPECT_EQ(step_moves_from_env(), StepMoves::WholeSteps);
  env.unset();
  EXPECT_EQ(step_moves_from_env(), StepMoves::Auto);
}

TEST(Transport, SizeMismatchFailsEveryRankInsteadOfHanging) {
  Group g(3);
  try {
    g.run([&](int r, Transport& t) {
      Tensor buf = Tensor::zeros(*g.ptrs[r], {r == 1 ? 5 : 4});
      make_allreduce("naive", {})->run(t, buf);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transport: rank"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace paralab
