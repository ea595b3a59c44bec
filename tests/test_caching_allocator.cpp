// The CUDA backend's caching allocator and event pools (core/caching_allocator.h,
// core/event_pool.h), over fake backing calls: host memory with a capacity, and int handles; then
// the same on a CUDA device through its describe(), where a GPU is visible (skipped otherwise).
// Run: ctest -R 'CachingAllocator|EventAllocator'.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/event_pool.h"
#include "core/tensor.h"

namespace paralab {
namespace {

// Host memory standing in for a device's: at most `capacity` bytes live at once (nullptr past
// it, as the CUDA callback answers cudaErrorMemoryAllocation), every call counted.
struct FakeBacking {
  std::size_t capacity = std::size_t{1} << 30;
  std::size_t live_bytes = 0;
  int allocs = 0, failed = 0, frees = 0;
  std::map<void*, std::size_t> live;
  std::mutex mu;

  CachingAllocator make() {
    return CachingAllocator(
        "fake:0",
        [this](std::size_t bytes) -> void* {
          std::lock_guard lock(mu);
          ++allocs;
          if (live_bytes + bytes > capacity) {
            ++failed;
            return nullptr;
          }
          void* p = std::malloc(bytes);
          live.emplace(p, bytes);
          live_bytes += bytes;
          return p;
        },
        [this](void* p) {
          std::lock_guard lock(mu);
          ++frees;
          const auto it = live.find(p);
          ASSERT_NE(it, live.end()) << "backing free of a pointer it did not allocate";
          live_bytes -= it->second;
          live.erase(it);
          std::free(p);
        });
  }
};

TEST(CachingAllocator, RoundsToTheGranularity) {
  EXPECT_EQ(CachingAllocator::kGranularity, 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(516272), 516608u);  // LeNet's parameters, 1009 blocks
  EXPECT_THROW(CachingAllocator::round_size(static_cast<std::size_t>(-1)), Error);
  FakeBacking fake;
  {
    CachingAllocator a = fake.make();
    void* p = a.allocate(100);
    EXPECT_EQ(fake.live.at(p), 512u) << "the backing block is the rounded size";
    EXPECT_EQ(a.stats().in_use_bytes, 512u);
    EXPECT_EQ(a.allocate(0), nullptr);
    a.deallocate(nullptr);  // a no-op
    EXPECT_EQ(a.stats().allocations, 1u);
    a.deallocate(p);
  }
}

TEST(CachingAllocator, ReusesAFreedBlockWithoutBackingCalls) {
  FakeBacking fake;
  CachingAllocator a = fake.make();
  void* p = a.allocate(4000);
  a.deallocate(p);
  EXPECT_EQ(fake.frees, 0) << "a freed block stays cached";
  EXPECT_EQ(a.stats().cached_bytes, 4096u);
  for (int i = 0; i < 10; ++i) {
    void* q = a.allocate(4096);
    EXPECT_EQ(q, p);
    a.deallocate(q);
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(fake.allocs, 1);
  EXPECT_EQ(s.backing_allocations, 1u);
  EXPECT_EQ(s.allocations, 11u);
  EXPECT_EQ(s.cache_hits, 10u);
  EXPECT_EQ(s.backing_frees, 0u);
}

TEST(CachingAllocator, TakesTheBestFitWithinBoundedWaste) {
  FakeBacking fake;
  CachingAllocator a = fake.make();
  void* b8k = a.allocate(8192);
  void* b2560 = a.allocate(2560);
  void* b3k = a.allocate(3072);
  for (void* p : {b8k, b2560, b3k}) a.deallocate(p);
  // 2048 fits 2560 (waste 512 = a quarter), 3072 and 8192: the smallest wins.
  void* q = a.allocate(2048);
  EXPECT_EQ(q, b2560);
  // 4096 fits only 8192, which would waste 4096 > 1024: a new block instead.
  const int before = fake.allocs;
  void* r = a.allocate(4096);
  EXPECT_NE(r, b8k);
  EXPECT_EQ(fake.allocs, before + 1);
  // 1536 would take 3072 (waste 1536 > 384): a new block too; 3072 itself still hits.
  void* small = a.allocate(1536);
  EXPECT_NE(small, b3k);
  EXPECT_EQ(a.allocate(3000), b3k);
  EXPECT_EQ(a.allocate(8192), b8k);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  for (void* p : {q, r, small, b3k, b8k}) a.deallocate(p);
}

TEST(CachingAllocator, FreesNothingBeforeReleaseOrDestruction) {
  FakeBacking fake;
  {
    CachingAllocator a = fake.make();
    std::vector<void*> ps;
    for (std::size_t n : {512u, 1024u, 4096u, 1u << 20}) ps.push_back(a.allocate(n));
    for (void* p : ps) a.deallocate(p);
    EXPECT_EQ(fake.frees, 0);
    EXPECT_EQ(a.release_cached(), 512u + 1024u + 4096u + (1u << 20));
    EXPECT_EQ(fake.frees, 4);
    EXPECT_TRUE(fake.live.empty());
    const AllocatorStats s = a.stats();
    EXPECT_EQ(s.cached_bytes, 0u);
    EXPECT_EQ(s.reserved_bytes, 0u);
    EXPECT_EQ(s.backing_frees, 4u);
    a.deallocate(a.allocate(512));  // cached again, for the destructor
    a.allocate(1024);               // and one leaked (logged)
  }
  EXPECT_EQ(fake.frees, 6) << "the destructor gives back cached and leaked blocks";
  EXPECT_TRUE(fake.live.empty());
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  FakeBacking fake;
  fake.capacity = 1 << 20;
  CachingAllocator a = fake.make();
  void* big = a.allocate(600 << 10);
  a.deallocate(big);
  // 800 KiB fits no cached block, and 600 + 800 KiB exceed the capacity: release, then retry.
  void* p = a.allocate(800 << 10);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(fake.failed, 1);
  EXPECT_EQ(fake.frees, 1);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.out_of_memory_retries, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, std::size_t{800} << 10);
  EXPECT_EQ(s.peak_reserved_bytes, std::size_t{800} << 10);
  // Nothing cached to release: no retry, an Error that says out of memory.
  const int allocs = fake.allocs;
  try {
    a.allocate(300 << 10);
    ADD_FAILURE() << "no error past the capacity";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fake:0: out of memory allocating 307200 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fake.allocs, allocs + 1);
  EXPECT_EQ(a.stats().out_of_memory_retries, 1u);
  // Still out of memory after the release: one retry, then the Error.
  void* small = a.allocate(100 << 10);
  a.deallocate(small);
  EXPECT_THROW(a.allocate(300 << 10), Error);
  EXPECT_EQ(a.stats().out_of_memory_retries, 2u);
  EXPECT_EQ(a.stats().in_use_bytes, std::size_t{800} << 10);
  a.deallocate(p);
}

TEST(CachingAllocator, ABackingErrorOtherThanOutOfMemoryPropagates) {
  int allocs = 0;
  bool broken = false;
  CachingAllocator a(
      "fake:1",
      [&](std::size_t bytes) -> void* {
        ++allocs;
        if (broken) throw Error("CUDA: cudaErrorInvalidValue");
        return std::malloc(bytes);
      },
      [](void* p) { std::free(p); });
  a.deallocate(a.allocate(512));  // a cached block: a release and retry would free it
  broken = true;
  try {
    a.allocate(1024);
    ADD_FAILURE() << "the backing error was swallowed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "CUDA: cudaErrorInvalidValue");
  }
  EXPECT_EQ(allocs, 2) << "an error that is not out of memory is not retried";
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.out_of_memory_retries, 0u);
  EXPECT_EQ(s.cached_bytes, 512u);
  EXPECT_EQ(s.reserved_bytes, 512u);
}

TEST(CachingAllocator, ACaptureTakesCachedBlocksAndRefusesMisses) {
  FakeBacking fake;
  CachingAllocator a = fake.make();
  void* warm = a.allocate(4096);
  a.deallocate(warm);
  a.begin_capture();
  EXPECT_EQ(a.allocate(4096), warm) << "a cache hit is served during a capture";
  const int allocs = fake.allocs;
  try {
    a.allocate(8192);
    ADD_FAILURE() << "a miss during a capture must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("during a CUDA graph capture"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fake.allocs, allocs) << "no backing call during a capture";
  EXPECT_THROW(a.release_cached(), Error);
  EXPECT_EQ(fake.frees, 0);
  // Freed during the capture: the graph's, not the cache's.
  a.deallocate(warm);
  EXPECT_EQ(a.stats().graph_bytes, 4096u);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  std::vector<CachingAllocator::Block> graph = a.end_capture();
  ASSERT_EQ(graph.size(), 1u);
  EXPECT_EQ(graph[0].ptr, warm);
  void* after = a.allocate(4096);
  EXPECT_NE(after, warm) << "a block the graph still uses was handed out again";
  a.deallocate(after);
  // The graph destroyed: its block is cached again.
  a.restore(std::move(graph));
  EXPECT_EQ(a.stats().graph_bytes, 0u);
  EXPECT_EQ(a.stats().cached_bytes, 8192u);
  EXPECT_EQ(a.stats().reserved_bytes, 8192u);
  // An aborted capture replays nothing: its freed blocks go straight back to the cache.
  a.begin_capture();
  void* p = a.allocate(4096);
  a.deallocate(p);
  a.abort_capture();
  EXPECT_EQ(a.stats().graph_bytes, 0u);
  EXPECT_EQ(a.stats().cached_bytes, 8192u);
  void* q = a.allocate(100 << 10);  // misses are allowed again
  a.deallocate(q);
}

TEST(CachingAllocator, CountsPeakInUseAndReserved) {
  FakeBacking fake;
  CachingAllocator a = fake.make();
  void* x = a.allocate(1 << 20);
  void* y = a.allocate(1 << 20);
  a.deallocate(x);
  void* z = a.allocate(512);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.in_use_bytes, (1u << 20) + 512u);
  EXPECT_EQ(s.cached_bytes, 1u << 20);
  EXPECT_EQ(s.reserved_bytes, (2u << 20) + 512u);
  EXPECT_EQ(s.peak_in_use_bytes, 2u << 20);
  EXPECT_EQ(s.peak_reserved_bytes, (2u << 20) + 512u);
  EXPECT_EQ(s.backing_allocations, 3u);
  a.deallocate(y);
  a.deallocate(z);
  s = a.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.peak_in_use_bytes, 2u << 20);
  // A pointer it did not hand out is logged and ignored.
  int other = 0;
  a.deallocate(&other);
  EXPECT_EQ(a.stats().cached_bytes, (2u << 20) + 512u);
}

// Tensors are freed by whichever thread drops the last reference: allocation and release from
// several threads must keep the books.
TEST(CachingAllocator, KeepsItsBooksAcrossThreads) {
  FakeBacking fake;
  CachingAllocator a = fake.make();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, t] {
      for (int i = 0; i < 2000; ++i) {
        void* p = a.allocate(static_cast<std::size_t>(512 * (1 + (i + t) % 5)));
        a.deallocate(p);
      }
    });
  for (auto& th : threads) th.join();
  const AllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 8000u);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  EXPECT_EQ(s.cache_hits + s.backing_allocations, 8000u);
  EXPECT_LE(s.backing_allocations, 20u) << "at most 4 threads x 5 sizes live at once";
}

// Fake handles: ints, created and destroyed with counts.
struct FakeEvents {
  int created = 0, destroyed = 0;
  std::set<int> live;
  std::shared_ptr<HandlePool<int>> make() {
    return HandlePool<int>::make(
        [this] {
          live.insert(++created);
          return created;
        },
        [this](int h) {
          ++destroyed;
          live.erase(h);
        });
  }
};

using FakeEvent = PooledEvent<int>;

int handle_of(const Event& e) { return dynamic_cast<const FakeEvent&>(*e).get(); }

TEST(EventAllocator, ReusesReleasedEventsAfterWarmUp) {
  FakeEvents fake;
  auto pool = fake.make();
  // Warm-up: a step holds three marks at once.
  for (int step = 0; step < 5; ++step) {
    TimeMark a{{}, std::make_shared<FakeEvent>(pool)};
    TimeMark b{{}, std::make_shared<FakeEvent>(pool)};
    TimeMark c{{}, std::make_shared<FakeEvent>(pool)};
    EXPECT_NE(handle_of(a.event), handle_of(b.event));
    EXPECT_NE(handle_of(b.event), handle_of(c.event));
  }
  const auto s = pool->stats();
  EXPECT_EQ(fake.created, 3) << "no event made after the first step";
  EXPECT_EQ(s.created, 3u);
  EXPECT_EQ(s.idle, 3u);
  EXPECT_EQ(s.acquired, 15u);
  EXPECT_EQ(s.reused, 12u);
}

TEST(EventAllocator, AnEventReturnsOnlyWithItsLastHolder) {
  FakeEvents fake;
  auto pool = fake.make();
  Event first = std::make_shared<FakeEvent>(pool);
  const int h = handle_of(first);
  Event copy = first;  // e.g. a Transport request's `ready`, held by sender and receiver
  first.reset();
  Event other = std::make_shared<FakeEvent>(pool);
  EXPECT_NE(handle_of(other), h) << "an event was reused while an Event still held it";
  EXPECT_EQ(pool->stats().idle, 0u);
  copy.reset();
  EXPECT_EQ(pool->stats().idle, 1u);
  Event again = std::make_shared<FakeEvent>(pool);
  EXPECT_EQ(handle_of(again), h);
  EXPECT_EQ(fake.destroyed, 0);
}

TEST(EventAllocator, EventsOutliveTheirDevicesPoolAndAreDestroyedOnce) {
  FakeEvents fake;
  auto pool = fake.make();
  Event kept = std::make_shared<FakeEvent>(pool);
  { Event dropped = std::make_shared<FakeEvent>(pool); }
  pool.reset();  // the device goes; its pool stays while an event needs it
  EXPECT_EQ(fake.destroyed, 0);
  kept.reset();
  EXPECT_EQ(fake.destroyed, 2);
  EXPECT_TRUE(fake.live.empty());
}

// On a GPU: the device's counts in describe() move as the fakes' do.
class CachingAllocatorCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = backend_unavailable("cuda"); !why.empty())
      GTEST_SKIP() << "cuda: " << why;
    devices_ = make_devices("cuda", 1, DeviceOptions{});
  }
  Device& dev() { return *devices_[0]; }
  nlohmann::json allocator() { return dev().describe()["allocator"]; }
  nlohmann::json events() { return dev().describe()["event_pool"]; }
  std::vector<std::unique_ptr<Device>> devices_;
};

TEST_F(CachingAllocatorCuda, AFreedTensorsBlockServesTheNextWithItsOwnData) {
  const nlohmann::json before = allocator();
  void* first = nullptr;
  {
    Tensor a = Tensor::from_host(dev(), {1000}, std::vector<float>(1000, 7.0f));
    first = a.raw();
  }
  const std::vector<float> values(1000, 3.0f);
  Tensor b = Tensor::from_host(dev(), {1000}, values);
  EXPECT_EQ(b.raw(), first);
  EXPECT_EQ(b.to_host_f32(), values);
  const nlohmann::json after = allocator();
  EXPECT_EQ(after["backing_allocations"].get<int>() - before["backing_allocations"].get<int>(), 1)
      << after.dump();
  EXPECT_EQ(after["cache_hits"].get<int>() - before["cache_hits"].get<int>(), 1) << after.dump();
  EXPECT_EQ(after["backing_frees"], before["backing_frees"]);
  EXPECT_GE(after["peak_in_use_bytes"].get<int64_t>(), 4096);
}

TEST_F(CachingAllocatorCuda, MarksMakeNoEventsAfterWarmUp) {
  for (int i = 0; i < 3; ++i) {
    const TimeMark a = dev().mark();
    const TimeMark b = dev().mark();
    const Event e = dev().record();
    dev().wait(e);
    dev().synchronize();
    EXPECT_GE(dev().elapsed_ms(a, b), 0.0);
  }
  const nlohmann::json warm = events();
  for (int i = 0; i < 100; ++i) {
    const TimeMark a = dev().mark();
    const TimeMark b = dev().mark();
    dev().wait(dev().record());
    dev().synchronize();
    EXPECT_GE(dev().elapsed_ms(a, b), 0.0);
  }
  const nlohmann::json after = events();
  EXPECT_EQ(after["timing_events"], warm["timing_events"]) << after.dump();
  EXPECT_EQ(after["ordering_events"], warm["ordering_events"]) << after.dump();
  EXPECT_EQ(after["reused"].get<int>() - warm["reused"].get<int>(), 300) << after.dump();
}

TEST_F(CachingAllocatorCuda, ACaptureUsesCachedBlocksAndRefusesMisses) {
  { Tensor warm = Tensor::empty(dev(), {4096}); }
  dev().begin_capture();
  try {
    {
      Tensor t = Tensor::empty(dev(), {4096});  // a cached block: served
      t.fill_zero();
    }  // freed during the capture: the graph's until it goes (describe() only after the capture)
    try {
      Tensor::empty(dev(), {1 << 24});
      ADD_FAILURE() << "a miss during a capture did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("during a CUDA graph capture"), std::string::npos)
          << e.what();
    }
    std::unique_ptr<CapturedWork> graph = dev().end_capture();
    graph->launch();
    dev().synchronize();
    EXPECT_GT(allocator()["graph_bytes"].get<int64_t>(), 0);
    graph.reset();
  } catch (...) {
    dev().abort_capture();
    throw;
  }
  EXPECT_EQ(allocator()["graph_bytes"], 0);
  // The device works on, and allocates again.
  const std::vector<float> values(1 << 20, 2.0f);
  EXPECT_EQ(Tensor::from_host(dev(), {1 << 20}, values).to_host_f32(), values);
}

}  // namespace
}  // namespace paralab
