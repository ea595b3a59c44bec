// Runs ParaLab's own CUDA kernels on the CPU, so that their index maps, tiles, bounds and
// reduction orders are tested on machines without a GPU (tests/test_fused_kernels.cpp).
//
// Include this before a kernel header (.cuh) and launch with emulate(grid, block, kernel, args...):
// the blocks run one after another; each block's threads run as host threads at once, so
// __syncthreads() is a real barrier and a missing one shows up as a wrong result (or, under
// TSan, as a race). __shared__ arrays become function statics: one per kernel instantiation,
// shared by the block's threads, reused by the next block (as on a GPU, nothing carries over that
// a correct kernel may rely on). fmaf is the C library's, correctly rounded like the GPU's, so a
// kernel whose arithmetic is written with fmaf and plain float operations gives the GPU's bits.
//
// The kernels may use blockIdx, threadIdx, blockDim, gridDim (x, y, z), static __shared__ arrays
// (__align__ too), __syncthreads() and early return; not warp shuffles, atomics or dynamic shared
// memory.
#pragma once

#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

using std::fmaf;

namespace paralab::testing {

// A barrier for one block whose party shrinks when a thread returns from the kernel early, as
// CUDA's __syncthreads() waits only for the threads still running.
class BlockBarrier {
 public:
  void reset(int parties) {
    std::lock_guard lock(mutex_);
    parties_ = parties;
    arrived_ = 0;
  }
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == parties_) {
      release();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  void leave() {
    std::lock_guard lock(mutex_);
    --parties_;
    if (arrived_ > 0 && arrived_ == parties_) release();
  }

 private:
  void release() {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  int parties_ = 0, arrived_ = 0;
  uint64_t generation_ = 0;
};

inline BlockBarrier*& current_block_barrier() {
  static BlockBarrier* barrier = nullptr;
  return barrier;
}

// Runs kernel(args...) over grid x block, blocks in order (x fastest, then y, then z).
template <typename Kernel, typename... Args>
void emulate(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  BlockBarrier barrier;
  current_block_barrier() = &barrier;
  // Between blocks every thread waits here; the completion step readies the next block.
  int64_t next = 0;
  auto start_block = [&]() noexcept {
    barrier.reset(threads);
    ++next;
  };
  std::barrier fence(threads, start_block);
  barrier.reset(threads);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      threadIdx =
          dim3(static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
               static_cast<unsigned>(t) / (block.x * block.y));
      blockDim = block;
      gridDim = grid;
      for (int64_t b = 0; b < blocks; ++b) {
        blockIdx =
            dim3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                 static_cast<unsigned>(b / (int64_t{grid.x} * grid.y)));
        kernel(args...);
        barrier.leave();
        fence.arrive_and_wait();
      }
    });
  for (auto& t : pool) t.join();
  current_block_barrier() = nullptr;
  (void)next;
}

}  // namespace paralab::testing

inline void __syncthreads() { paralab::testing::current_block_barrier()->arrive_and_wait(); }
