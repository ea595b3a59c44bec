// RankGroup: one persistent host thread per device of a group (SPMD ranks in one process).
// run(fn) executes fn(rank) on every rank's thread at once and returns when all are done,
// rethrowing the first error (the first that is not a PeerFailed, where a rank had one: the
// cause, not a peer's report that something failed; of PeerFaileds, a CaptureInvalidated before
// a plain one); each thread called bind_thread() on its device
// when it started. The constructor throws Error when the system cannot start a rank's thread.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/device.h"

namespace paralab {

class RankGroup {
 public:
  explicit RankGroup(std::vector<Device*> devices);
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  Device& device(int rank) const { return *devices_[static_cast<std::size_t>(rank)]; }
  void run(const std::function<void(int rank)>& fn);

 private:
  void loop(int rank);
  void stop();  // ends and joins every started thread

  std::vector<Device*> devices_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace paralab
