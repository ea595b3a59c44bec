// HandlePool and PooledEvent: device events (CUDA: cudaEvent_t) created once and reused, written
// once over create/destroy callbacks so that the bookkeeping is tested on any machine
// (tests/test_caching_allocator.cpp). Header-only, like core/caching_allocator.h.
//
// A device's record() and mark() take a handle from its pool inside a PooledEvent; the handle
// goes back to the pool when the last Event (or TimeMark) sharing that PooledEvent is released,
// never earlier, so nobody can still wait on it or time with it when it is recorded anew. The pool
// lives as long as its owner or any PooledEvent of it, whichever is last, so events may outlive
// the device that made them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/device.h"

namespace paralab {

template <typename Handle>
class HandlePool {
 public:
  using Create = std::function<Handle()>;       // throws on failure
  using Destroy = std::function<void(Handle)>;  // must not throw; logs its own failures

  struct Stats {
    std::size_t created = 0;     // handles made so far: the pool's size
    std::size_t idle = 0;        // of those, waiting in the pool
    std::uint64_t acquired = 0;  // acquire() calls
    std::uint64_t reused = 0;    // of those, answered from the pool
  };

  // Always held by a shared_ptr: every PooledEvent keeps its pool alive.
  static std::shared_ptr<HandlePool> make(Create create, Destroy destroy) {
    return std::shared_ptr<HandlePool>(new HandlePool(std::move(create), std::move(destroy)));
  }

  HandlePool(const HandlePool&) = delete;
  HandlePool& operator=(const HandlePool&) = delete;
  // Destroys the idle handles: by now all of them (an acquired handle's PooledEvent holds the
  // pool).
  ~HandlePool() {
    for (Handle h : idle_) destroy_(h);
  }

  // An idle handle, else a new one.
  Handle acquire() {
    {
      std::lock_guard lock(mu_);
      ++stats_.acquired;
      if (!idle_.empty()) {
        ++stats_.reused;
        Handle h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    Handle h = create_();  // outside the lock: creation may be slow
    std::lock_guard lock(mu_);
    ++stats_.created;
    return h;
  }

  void release(Handle h) noexcept {
    std::lock_guard lock(mu_);
    try {
      idle_.push_back(h);
    } catch (...) {  // no host memory to keep it
      destroy_(h);
      --stats_.created;
    }
  }

  Stats stats() const {
    std::lock_guard lock(mu_);
    Stats s = stats_;
    s.idle = idle_.size();
    return s;
  }

 private:
  HandlePool(Create create, Destroy destroy)
      : create_(std::move(create)), destroy_(std::move(destroy)) {}

  Create create_;
  Destroy destroy_;
  mutable std::mutex mu_;
  std::vector<Handle> idle_;
  Stats stats_;
};

// A device event holding one pooled handle; the handle returns to the pool with the last Event
// that shares this object.
template <typename Handle>
class PooledEvent final : public DeviceEvent {
 public:
  explicit PooledEvent(std::shared_ptr<HandlePool<Handle>> pool)
      : pool_(std::move(pool)), handle_(pool_->acquire()) {}
  ~PooledEvent() override { pool_->release(handle_); }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;

  Handle get() const { return handle_; }

 private:
  std::shared_ptr<HandlePool<Handle>> pool_;
  Handle handle_;
};

}  // namespace paralab
