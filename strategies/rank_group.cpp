#include "strategies/rank_group.h"

#include <string>
#include <system_error>

#include "core/error.h"

namespace paralab {
namespace {

// How much an error says about the cause: 2 for a rank's own error, 1 for a call on a capture
// another call invalidated (CaptureInvalidated), 0 for a peer's report that it failed.
int weight(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CaptureInvalidated&) {
    return 1;
  } catch (const PeerFailed&) {
    return 0;
  } catch (...) {
    return 2;
  }
}

}  // namespace

RankGroup::RankGroup(std::vector<Device*> devices) : devices_(std::move(devices)) {
  // A thread the system refuses (out of threads or of memory for its stack) fails the group
  // with an Error; the ranks already started are stopped and joined first, since a joinable
  // std::thread destroyed by the unwinding would end the process.
  for (int r = 0; r < size(); ++r) {
    try {
      threads_.emplace_back([this, r] { loop(r); });
    } catch (const std::system_error& e) {
      stop();
      throw Error("rank group: could not start the thread of rank " + std::to_string(r) + " of " +
                  std::to_string(size()) + " (" + device(r).name() + "): " + e.what());
    }
  }
}

RankGroup::~RankGroup() { stop(); }

void RankGroup::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void RankGroup::run(const std::function<void(int)>& fn) {
  std::unique_lock lock(mu_);
  task_ = &fn;
  pending_ = size();
  error_ = nullptr;
  ++generation_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void RankGroup::loop(int rank) {
  // A device that cannot be bound (a CUDA device that is gone) fails every task run on it, as
  // an error run() rethrows, instead of ending the process from a thread with nobody to catch.
  std::exception_ptr unbound;
  try {
    device(rank).bind_thread();
  } catch (...) {
    unbound = std::current_exception();
  }
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr err = unbound;
    try {
      if (!err) (*task)(rank);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      if (err && (!error_ || weight(err) > weight(error_))) error_ = err;
      // This thread's reference goes under the lock too: the error's last owner is then the
      // caller's thread, which destroys it after catching it (a destructor run here, after the
      // caller read it, is ordered only by the reference count inside the C++ library).
      err = nullptr;
      if (--pending_ == 0) cv_.notify_all();
    }
  }
}

}  // namespace paralab
