// CachingAllocator: device memory handed out from a cache of freed blocks, written once over raw
// backing calls (CUDA: cudaMalloc / cudaFree; tests/test_caching_allocator.cpp: a fake), so that
// its policy is tested on any machine. Header-only: the CUDA backend and the CPU tests share it
// without a library of its own.
//
// Policy:
// - Sizes round up to kGranularity (512 bytes; cudaMalloc aligns to 256). Blocks are never split
//   or merged: each is one backing allocation. A training step asks for the same sizes in every
//   iteration, so a freed block is nearly always taken again by a request of its own size.
// - A request takes the smallest cached block that fits (best fit) when that block wastes at most
//   a quarter of the rounded request (size <= rounded + rounded / kWasteDivisor); otherwise the
//   backing allocator makes a block of the rounded size.
// - Nothing goes back to the backing allocator before release_cached() or the destructor. When a
//   backing allocation fails for lack of memory (the callback returns nullptr), the allocator
//   releases its cache and retries once; a second failure throws Error.
// - Reuse is immediate: a freed block may be handed out by the very next allocate(). That is
//   correct only when every user of the memory is ordered after the block's earlier users; on a
//   CUDA device, by its single stream (CudaDevice::deallocate says what keeps that true).
// - Capture (CUDA graphs): between begin_capture() and end_capture() the backing allocator must
//   not be called (cudaMalloc and cudaFree are illegal in a capture). A cache hit is served; a
//   miss throws Error. A block freed during a capture is still used by every replay of the
//   captured work, so it is not cached: end_capture() hands such blocks to the caller (the graph
//   object), who gives them back with restore() once the graph is gone.
//
// Thread safety: every member takes one mutex; a block may be freed from any thread (whichever
// drops the last tensor sharing it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace paralab {

struct AllocatorStats {
  std::size_t in_use_bytes = 0;       // blocks handed out (rounded sizes)
  std::size_t cached_bytes = 0;       // free blocks kept for reuse
  std::size_t graph_bytes = 0;        // blocks freed during a capture, held for its graph
  std::size_t reserved_bytes = 0;     // held from the backing allocator: the three above
  std::size_t peak_in_use_bytes = 0;  // highest in_use_bytes so far
  std::size_t peak_reserved_bytes = 0;
  std::uint64_t allocations = 0;  // allocate() calls answered with a block
  std::uint64_t cache_hits = 0;   // of those, answered from the cache
  std::uint64_t backing_allocations = 0;
  std::uint64_t backing_frees = 0;
  std::uint64_t out_of_memory_retries = 0;  // failed backing allocations retried after a release
};

class CachingAllocator {
 public:
  // Returns a block of exactly `bytes`, or nullptr when out of memory; throws Error for any other
  // failure.
  using BackingAlloc = std::function<void*(std::size_t bytes)>;
  // Must not throw (it runs in destructors); logs its own failures.
  using BackingFree = std::function<void(void* ptr)>;

  struct Block {
    void* ptr;
    std::size_t bytes;
  };

  static constexpr std::size_t kGranularity = 512;
  static constexpr std::size_t kWasteDivisor = 4;

  // name: what errors and logs call the owner ("cuda:0").
  CachingAllocator(std::string name, BackingAlloc alloc, BackingFree free)
      : name_(std::move(name)), alloc_(std::move(alloc)), free_(std::move(free)) {}

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Gives every block back, cached or not: tensors must not outlive their device, so blocks still
  // in use here are a leak in the caller, logged.
  ~CachingAllocator() {
    std::lock_guard lock(mu_);
    if (!used_.empty())
      log_error(name_ + ": " + std::to_string(used_.size()) + " block(s) of " +
                std::to_string(stats_.in_use_bytes) + " bytes still in use when freed");
    for (const auto& [ptr, bytes] : used_) backing_free(ptr, bytes);
    for (const Block& b : captured_) backing_free(b.ptr, b.bytes);
    release_cached_locked();
  }

  // `bytes` rounded up to kGranularity; Error when that overflows.
  static std::size_t round_size(std::size_t bytes) {
    PARALAB_REQUIRE(bytes <= std::numeric_limits<std::size_t>::max() - (kGranularity - 1),
                    "allocator: " + std::to_string(bytes) + " bytes cannot be allocated");
    return (bytes + kGranularity - 1) / kGranularity * kGranularity;
  }

  // nullptr for 0 bytes.
  void* allocate(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    const std::size_t size = round_size(bytes);
    std::lock_guard lock(mu_);
    auto fit = cache_.lower_bound(size);
    if (fit != cache_.end() && fit->first - size <= size / kWasteDivisor) {
      const Block b{fit->second, fit->first};
      cache_.erase(fit);
      stats_.cached_bytes -= b.bytes;
      ++stats_.cache_hits;
      return hand_out(b);
    }
    PARALAB_REQUIRE(!capturing_,
                    name_ + ": " + std::to_string(bytes) +
                        " bytes asked for during a CUDA graph capture, and no cached block fits "
                        "(a capture cannot allocate device memory: run the work once before "
                        "capturing it, so that its buffers exist)");
    void* p = alloc_(size);
    if (!p && !cache_.empty()) {
      ++stats_.out_of_memory_retries;
      release_cached_locked();
      p = alloc_(size);
    }
    if (!p)
      throw Error(name_ + ": out of memory allocating " + std::to_string(bytes) + " bytes (" +
                  std::to_string(stats_.in_use_bytes) + " bytes in use, " +
                  std::to_string(stats_.graph_bytes) + " held for CUDA graphs, none cached)");
    ++stats_.backing_allocations;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    try {
      return hand_out({p, size});
    } catch (...) {  // no host memory to record it: give it back
      stats_.reserved_bytes -= size;
      backing_free(p, size);
      throw;
    }
  }

  // Takes a block back into the cache (or, during a capture, aside for the graph). nullptr is a
  // no-op; a pointer this allocator did not hand out is logged and ignored.
  void deallocate(void* ptr) noexcept {
    if (!ptr) return;
    std::lock_guard lock(mu_);
    const auto it = used_.find(ptr);
    if (it == used_.end()) {
      log_error(name_ + ": freeing a pointer it did not allocate");
      return;
    }
    const Block b{it->first, it->second};
    used_.erase(it);
    stats_.in_use_bytes -= b.bytes;
    try {
      if (capturing_) {
        captured_.push_back(b);
        stats_.graph_bytes += b.bytes;
      } else {
        cache_.emplace(b.bytes, b.ptr);
        stats_.cached_bytes += b.bytes;
      }
    } catch (...) {  // no host memory to keep it: give it back at once
      stats_.reserved_bytes -= b.bytes;
      backing_free(b.ptr, b.bytes);
    }
  }

  // Gives every cached block back to the backing allocator; returns the bytes released. Not
  // during a capture (a backing free is illegal there): Error.
  std::size_t release_cached() {
    std::lock_guard lock(mu_);
    PARALAB_REQUIRE(!capturing_, name_ + ": release_cached() during a CUDA graph capture");
    return release_cached_locked();
  }

  // Capture bracket: see the policy above. end_capture() returns the blocks freed during the
  // capture, which the captured work still uses; restore() takes them back into the cache once
  // nothing will replay that work. abort_capture() caches them at once (nothing will replay).
  void begin_capture() {
    std::lock_guard lock(mu_);
    capturing_ = true;
  }
  std::vector<Block> end_capture() {
    std::lock_guard lock(mu_);
    capturing_ = false;
    return std::exchange(captured_, {});
  }
  void abort_capture() noexcept {
    std::vector<Block> blocks;
    {
      std::lock_guard lock(mu_);
      capturing_ = false;
      blocks = std::exchange(captured_, {});
    }
    restore(std::move(blocks));
  }
  void restore(std::vector<Block> blocks) noexcept {
    std::lock_guard lock(mu_);
    for (const Block& b : blocks) {
      stats_.graph_bytes -= b.bytes;
      try {
        cache_.emplace(b.bytes, b.ptr);
        stats_.cached_bytes += b.bytes;
      } catch (...) {
        stats_.reserved_bytes -= b.bytes;
        backing_free(b.ptr, b.bytes);
      }
    }
  }

  AllocatorStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  void* hand_out(const Block& b) {
    used_.emplace(b.ptr, b.bytes);
    ++stats_.allocations;
    stats_.in_use_bytes += b.bytes;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    return b.ptr;
  }

  void backing_free(void* ptr, std::size_t bytes) noexcept {
    (void)bytes;
    try {
      free_(ptr);
    } catch (...) {
      log_error(name_ + ": the backing free threw");
    }
    ++stats_.backing_frees;
  }

  std::size_t release_cached_locked() noexcept {
    std::size_t released = 0;
    for (const auto& [bytes, ptr] : cache_) {
      backing_free(ptr, bytes);
      released += bytes;
    }
    cache_.clear();
    stats_.cached_bytes = 0;
    stats_.reserved_bytes -= released;
    return released;
  }

  std::string name_;
  BackingAlloc alloc_;
  BackingFree free_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> cache_;      // free blocks by size: lower_bound is the best fit
  std::unordered_map<void*, std::size_t> used_;  // handed-out blocks and their sizes
  std::vector<Block> captured_;                  // freed during the current capture
  bool capturing_ = false;
  AllocatorStats stats_;
};

}  // namespace paralab
