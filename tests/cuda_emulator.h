// Runs ParaLab's own CUDA kernels on the CPU, so that their index maps, tiles, bounds and
// reduction orders are tested on machines without a GPU (tests/test_fused_kernels.cpp).
//
// Include this before a kernel header (.cuh) and launch with emulate(grid, block, kernel, args...):
// the blocks run one after another, first to last in a host thread's even launches and last to
// first in its odd ones (a GPU keeps no order: a result that depends on it differs between the
// two), and __syncthreads() is a real barrier among a block's threads, so a missing one shows up
// as a wrong result, and under TSan as a race.
//
// On x86-64 Linux a block's threads are fibers: one stack per CUDA thread, all on the calling
// thread. Each runs until it reaches __syncthreads() or returns from the kernel, then the next;
// a barrier opens once every thread still running has reached it. Every other block runs its
// threads in descending order, the others in ascending order (which ones alternates between
// launches), so a read of another thread's value without a barrier between sees a stale value
// from one side or the other. Under TSan the
// switches between fibers order nothing, and only the barriers do, so TSan reports what a
// missing one leaves unordered whatever the order the fibers ran in. Deterministic, and cheap:
// the two emulated suites' 30 tests took 0.7 s (3.2 s under ASan) on a 2-core AMD EPYC VM,
// against 73 (131) CPU seconds with a host thread per CUDA thread, most of them in the kernel's
// futex calls of 256 threads meeting at barriers on 2 cores (2026-12-05). Elsewhere each CUDA
// thread is a host thread, all of a block's at once, and blocks run first to last.
// __shared__ arrays become function statics: one per kernel instantiation, shared by the block's
// threads, reused by the next block (as on a GPU, nothing carries over that a correct kernel may
// rely on). fmaf is the C library's, correctly rounded like the GPU's, and the suites are built
// without contraction (-ffp-contract=off), so a kernel gives the GPU's bits where its products
// are summed through fmaf; a product added to something in one plain expression (p - step * g)
// is one rounding on the GPU, where nvcc fuses it, and two here.
//
// A launch is checked as the GPU checks it (at most 1,024 threads a block, 64 along z; grids of
// at most 2^31 - 1, 65,535, 65,535 blocks; no zero dimension); a barrier that the block's
// running threads reach at different __syncthreads() calls, undefined on a GPU, aborts. What
// the emulator cannot show: races between blocks (one runs after another), a missing
// barrier between writes to shared memory that every block makes alike (the previous block
// left the same values), and the limits __launch_bounds__ and the shared-memory size impose.
//
// The kernels may use blockIdx, threadIdx, blockDim, gridDim (x, y, z), static __shared__ arrays
// (__align__ too), __syncthreads() and early return; not warp shuffles, atomics or dynamic shared
// memory.
#pragma once

#include <barrier>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define PARALAB_EMULATOR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PARALAB_EMULATOR_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PARALAB_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARALAB_EMULATOR_ASAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__linux__)
#define PARALAB_EMULATOR_FIBERS 1
#include <sys/mman.h>
#ifdef PARALAB_EMULATOR_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef PARALAB_EMULATOR_TSAN
#include <sanitizer/tsan_interface.h>
// The launch's own bookkeeping, which TSan is not to see: only the kernels' accesses and the
// barriers' happens-before (below) are the fibers' own.
#define PARALAB_EMULATOR_UNSEEN __attribute__((no_sanitize("thread")))
#endif
#endif
#ifndef PARALAB_EMULATOR_UNSEEN
#define PARALAB_EMULATOR_UNSEEN
#endif

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
#define __syncthreads() ::paralab::testing::sync_threads(__FILE__, __LINE__)
#define __align__(n) __attribute__((aligned(n)))

using std::fmaf;

namespace paralab::testing {

inline dim3 thread_index(int t, dim3 block) {
  return dim3(static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
              static_cast<unsigned>(t) / (block.x * block.y));
}

inline dim3 block_index(int64_t b, dim3 grid) {
  return dim3(static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
              static_cast<unsigned>(b / (int64_t{grid.x} * grid.y)));
}

// The launch configuration a GPU accepts (CUDA's limits for every compute capability since 3.0).
inline void check_launch(dim3 grid, dim3 block) {
  const int64_t threads = int64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
    throw std::invalid_argument("cuda_emulator: a launch with a zero dimension");
  if (threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    throw std::invalid_argument("cuda_emulator: a block of " + std::to_string(threads) +
                                " threads, beyond a GPU's limits");
  if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    throw std::invalid_argument("cuda_emulator: a grid beyond a GPU's limits");
}

[[noreturn]] inline void emulation_abort(const char* what) {
  std::fprintf(stderr, "cuda_emulator: %s\n", what);
  std::abort();
}

#ifdef PARALAB_EMULATOR_FIBERS
namespace fibers {

// Stores the callee-saved registers, MXCSR and the x87 control word on the current stack, saves
// the stack pointer in *from, switches to the stack `to` and restores the same from it (System V
// x86-64: everything else a call may clobber anyway).
[[gnu::naked, gnu::noinline]] inline void switch_stack(void** /*from*/, void* /*to*/) {
  asm("pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "subq $8, %rsp\n\t"
      "stmxcsr (%rsp)\n\t"
      "fnstcw 4(%rsp)\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "ldmxcsr (%rsp)\n\t"
      "fldcw 4(%rsp)\n\t"
      "addq $8, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}

// One stack per CUDA thread, each above a page that faults on overflow; kept for the host
// thread's next launch (mapped once, not per launch).
class Stacks {
 public:
  // A guard as large as a stack: a frame larger than one page could step over a single page into
  // the stack below (the suites are not built with stack-clash protection).
  static constexpr std::size_t kStackBytes = std::size_t{64} << 10, kGuardBytes = kStackBytes,
                               kSlotBytes = kStackBytes + kGuardBytes;
  Stacks() = default;
  Stacks(const Stacks&) = delete;
  Stacks& operator=(const Stacks&) = delete;
  ~Stacks() { release(); }
  void reserve(int count) {
    if (count <= count_) return;
    release();
    const std::size_t bytes = std::size_t(count) * kSlotBytes;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("cuda_emulator: cannot map the fiber stacks");
    auto* base = static_cast<std::byte*>(p);
    for (int t = 0; t < count; ++t)
      if (mprotect(base + std::size_t(t) * kSlotBytes, kGuardBytes, PROT_NONE) != 0) {
        munmap(base, bytes);
        throw std::runtime_error("cuda_emulator: cannot protect a fiber stack's guard");
      }
    base_ = base;
    count_ = count;
  }
  // The lowest address of stack t and the address just above it.
  std::byte* bottom(int t) const { return base_ + std::size_t(t) * kSlotBytes + kGuardBytes; }
  std::byte* top(int t) const { return bottom(t) + kStackBytes; }

 private:
  void release() {
    if (base_ == nullptr) return;
#ifdef PARALAB_EMULATOR_ASAN
    // Redzones the frames left (fiber_main's never return) would poison a later mapping here.
    for (int t = 0; t < count_; ++t) ASAN_UNPOISON_MEMORY_REGION(bottom(t), kStackBytes);
#endif
    munmap(base_, std::size_t(count_) * kSlotBytes);
    base_ = nullptr;
    count_ = 0;
  }
  std::byte* base_ = nullptr;
  int count_ = 0;
};

#ifdef PARALAB_EMULATOR_TSAN
// TSan's fibers, one per CUDA thread, kept for the host thread's next launch: creating and
// destroying them per launch mapped and unmapped their traces each time (twice the test's time).
class TsanFibers {
 public:
  TsanFibers() = default;
  TsanFibers(const TsanFibers&) = delete;
  TsanFibers& operator=(const TsanFibers&) = delete;
  ~TsanFibers() {
    for (void* f : fibers_) __tsan_destroy_fiber(f);
  }
  void* get(int t) {
    while (int(fibers_.size()) <= t) fibers_.push_back(__tsan_create_fiber(0));
    return fibers_[std::size_t(t)];
  }

 private:
  std::vector<void*> fibers_;
};

// TSan's sync objects for the barriers, one set per host thread: kept off the launch's stack
// frame, whose addresses later frames reuse (a token's clocks would order their accesses too).
struct TsanTokens {
  char start = 0, barrier[2] = {}, block[2] = {}, done = 0;
};
inline TsanTokens& tsan_tokens() {
  static thread_local TsanTokens tokens;
  return tokens;
}
#endif

enum class State : unsigned char { kRunnable, kAtBarrier, kAtBlockEnd };

// Runs one launch: one block after another, each block's threads as fibers on the calling thread.
class Launch {
 public:
  Launch(dim3 grid, dim3 block, void (*run)(const void*), const void* kernel_and_args)
      : grid_(grid), block_(block), run_(run), kernel_and_args_(kernel_and_args) {}

  PARALAB_EMULATOR_UNSEEN void run_all() {
    check_launch(grid_, block_);
    // One launch at a time on a host thread: its fibers' stacks and TSan's fibers are the
    // thread's (a kernel does not launch kernels).
    if (current() != nullptr) emulation_abort("a launch inside a launch");
    const int threads = static_cast<int>(block_.x * block_.y * block_.z);
    const int64_t blocks = int64_t{grid_.x} * grid_.y * grid_.z;
    // Launches alternate the order of their blocks and which of them run their threads in
    // ascending order (a launch of one block runs them in either order over a suite's launches).
    static thread_local uint64_t launches = 0;
    const int64_t odd_launch = int64_t(launches++ % 2);
    static thread_local Stacks stacks;
    stacks.reserve(threads);
    unsigned mxcsr = 0;
    uint16_t fpcw = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    fibers_.assign(std::size_t(threads), Fiber{});
    for (int t = 0; t < threads; ++t) {
      Fiber& f = fibers_[std::size_t(t)];
      f.thread_idx = thread_index(t, block_);
      f.bottom = stacks.bottom(t);
#ifdef PARALAB_EMULATOR_ASAN
      // Frames of an earlier launch that never returned (fiber_main's) may have left redzones.
      ASAN_UNPOISON_MEMORY_REGION(f.bottom, Stacks::kStackBytes);
#endif
      // The stack as switch_stack leaves it: the control words, six callee-saved registers,
      // then fiber_main as the address `ret` goes to and a null return address for fiber_main
      // itself, at 8 mod 16 as at any function's entry.
      auto* top = reinterpret_cast<uint64_t*>(stacks.top(t));
      top[-1] = 0;
      top[-2] = reinterpret_cast<uint64_t>(&fiber_main);
      for (int r = 3; r <= 8; ++r) top[-r] = 0;
      top[-9] = uint64_t{mxcsr} | uint64_t{fpcw} << 32;
      f.sp = &top[-9];
#ifdef PARALAB_EMULATOR_TSAN
      static thread_local TsanFibers tsan_fibers;
      f.tsan = tsan_fibers.get(t);
#endif
    }
#ifdef PARALAB_EMULATOR_TSAN
    main_tsan_ = __tsan_get_current_fiber();
    __tsan_release(&tsan_tokens().start);  // this thread's writes of the kernel's inputs
#endif
    current() = this;
    blockDim = block_;
    gridDim = grid_;
    for (int64_t j = 0; j < blocks; ++j) {
      // Odd launches run their blocks last to first: a GPU runs them in no order, so a kernel
      // whose result depends on it gives a wrong value in one of two launches.
      const int64_t b = odd_launch == 0 ? j : blocks - 1 - j;
      block_number_ = j;
      blockIdx = block_index(b, grid_);
      for (Fiber& f : fibers_) f.state = State::kRunnable;
      // Passes until every thread has returned from the kernel; between passes the threads
      // waiting at a barrier go on.
      for (bool waiting = true; waiting;) {
        for (int i = 0; i < threads; ++i) {
          const int t = (j + odd_launch) % 2 == 0 ? i : threads - 1 - i;
          if (fibers_[std::size_t(t)].state == State::kRunnable) resume(t);
        }
        waiting = false;
        const Fiber* first = nullptr;
        for (Fiber& f : fibers_)
          if (f.state == State::kAtBarrier) {
            if (first == nullptr) first = &f;
            if (f.line != first->line || std::strcmp(f.file, first->file) != 0)
              emulation_abort(("a block's threads wait at different __syncthreads(): " +
                               std::string(first->file) + ":" + std::to_string(first->line) +
                               " and " + f.file + ":" + std::to_string(f.line))
                                  .c_str());
            f.state = State::kRunnable;
            waiting = true;
          }
        generation_ += waiting;
      }
    }
    // Each fiber leaves its stack for good (under ASan, so that its fake stack is released).
    finishing_ = true;
    for (int t = 0; t < threads; ++t) resume(t);
#ifdef PARALAB_EMULATOR_TSAN
    __tsan_acquire(&tsan_tokens().done);  // what the kernels wrote, for this thread's reads
#endif
    current() = nullptr;
  }

  // On a fiber: back to the launch until it resumes this thread.
  PARALAB_EMULATOR_UNSEEN void yield(State state, const char* file = "", int line = 0) {
    Fiber& f = fibers_[std::size_t(running_)];
    f.state = state;
    f.file = file;
    f.line = line;
#ifdef PARALAB_EMULATOR_TSAN
    // Switches between fibers order nothing (no_sync), so TSan reports any two accesses of
    // different threads that no barrier orders. A barrier's happens-before: every thread that
    // reaches barrier g releases a token that each acquires when the barrier opens; one of two
    // tokens by the parity of g (or of the block at a block's end), since a thread may reach the
    // next barrier before the others have left this one.
    char* const token = state == State::kAtBarrier ? &tsan_tokens().barrier[generation_ % 2]
                                                   : &tsan_tokens().block[block_number_ % 2];
    __tsan_release(token);
    __tsan_switch_to_fiber(main_tsan_, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_start_switch_fiber(&f.fake_stack, main_bottom_, main_size_);
#endif
    switch_stack(&f.sp, main_sp_);
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, nullptr, nullptr);
#endif
#ifdef PARALAB_EMULATOR_TSAN
    __tsan_acquire(token);
#endif
  }

  static Launch*& current() {
    static thread_local Launch* launch = nullptr;
    return launch;
  }

 private:
  struct Fiber {
    void* sp = nullptr;
    std::byte* bottom = nullptr;
    dim3 thread_idx;
    State state = State::kRunnable;
    void* fake_stack = nullptr;  // ASan's
    void* tsan = nullptr;        // TSan's fiber
    const char* file = "";       // the __syncthreads() it waits at
    int line = 0;
  };

  PARALAB_EMULATOR_UNSEEN void resume(int t) {
    Fiber& f = fibers_[std::size_t(t)];
    running_ = t;
    threadIdx = f.thread_idx;
#ifdef PARALAB_EMULATOR_TSAN
    __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_start_switch_fiber(&main_fake_stack_, f.bottom, Stacks::kStackBytes);
#endif
    switch_stack(&main_sp_, f.sp);
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_finish_switch_fiber(main_fake_stack_, nullptr, nullptr);
#endif
  }

  // Where every fiber starts: the kernel once per block until the launch ends.
  [[noreturn]] PARALAB_EMULATOR_UNSEEN static void fiber_main() noexcept {
    Launch& l = *current();
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &l.main_bottom_, &l.main_size_);
#endif
#ifdef PARALAB_EMULATOR_TSAN
    __tsan_acquire(&tsan_tokens().start);
#endif
    while (!l.finishing_) {
      l.run_(l.kernel_and_args_);
      l.yield(State::kAtBlockEnd);
    }
    Fiber& f = l.fibers_[std::size_t(l.running_)];
#ifdef PARALAB_EMULATOR_TSAN
    __tsan_release(&tsan_tokens().done);
    __tsan_switch_to_fiber(l.main_tsan_, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef PARALAB_EMULATOR_ASAN
    __sanitizer_start_switch_fiber(nullptr, l.main_bottom_, l.main_size_);
#endif
    switch_stack(&f.sp, l.main_sp_);
    __builtin_unreachable();
  }

  dim3 grid_, block_;
  void (*run_)(const void*);
  const void* kernel_and_args_;
  std::vector<Fiber> fibers_;
  void* main_sp_ = nullptr;
  int running_ = -1;
  bool finishing_ = false;
  void* main_fake_stack_ = nullptr;
  const void* main_bottom_ = nullptr;
  std::size_t main_size_ = 0;
  int64_t block_number_ = 0, generation_ = 0;
  [[maybe_unused]] void* main_tsan_ = nullptr;  // TSan builds only
};

}  // namespace fibers

// Runs kernel(args...) over grid x block, one block after another: in order (x fastest, then y,
// then z) in even launches of the host thread, in reverse in odd ones.
template <typename Kernel, typename... Args>
void emulate(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  const auto call = [&] { kernel(args...); };
  using Call = decltype(call);
  fibers::Launch launch(
      grid, block, [](const void* c) { (*static_cast<const Call*>(c))(); }, &call);
  launch.run_all();
}

// __syncthreads() at file:line.
PARALAB_EMULATOR_UNSEEN inline void sync_threads(const char* file, int line) {
  fibers::Launch* const launch = fibers::Launch::current();
  if (launch == nullptr) emulation_abort("__syncthreads() outside a launch");
  launch->yield(fibers::State::kAtBarrier, file, line);
}

}  // namespace paralab::testing

#else  // host threads

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

// The barrier of the block the calling thread runs a thread of.
inline BlockBarrier*& current_block_barrier() {
  static thread_local BlockBarrier* barrier = nullptr;
  return barrier;
}

// Runs kernel(args...) over grid x block, blocks in order (x fastest, then y, then z).
template <typename Kernel, typename... Args>
void emulate(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  check_launch(grid, block);
  const int threads = static_cast<int>(block.x * block.y * block.z);
  const int64_t blocks = int64_t{grid.x} * grid.y * grid.z;
  BlockBarrier barrier;
  // Between blocks every thread waits here; the completion step readies the next block.
  auto start_block = [&]() noexcept { barrier.reset(threads); };
  std::barrier fence(threads, start_block);
  barrier.reset(threads);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      current_block_barrier() = &barrier;
      threadIdx = thread_index(t, block);
      blockDim = block;
      gridDim = grid;
      for (int64_t b = 0; b < blocks; ++b) {
        blockIdx = block_index(b, grid);
        kernel(args...);
        barrier.leave();
        fence.arrive_and_wait();
      }
    });
  for (auto& t : pool) t.join();
}

// __syncthreads() (the barrier has no use for the call's place).
inline void sync_threads(const char*, int) {
  if (current_block_barrier() == nullptr) emulation_abort("__syncthreads() outside a launch");
  current_block_barrier()->arrive_and_wait();
}

}  // namespace paralab::testing

#endif
