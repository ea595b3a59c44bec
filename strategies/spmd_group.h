// SpmdGroup: a device group ready for SPMD code, one host thread per rank (RankGroup) and the
// in-process transport between them (LocalFabric). Strategies, the collective tests and
// allreduce_bench all drive their ranks through it.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "strategies/collectives/transport.h"
#include "strategies/rank_group.h"

namespace paralab {

class SpmdGroup {
 public:
  explicit SpmdGroup(std::vector<Device*> devices) : fabric_(devices), ranks_(std::move(devices)) {}

  int size() const { return ranks_.size(); }
  Device& device(int rank) const { return ranks_.device(rank); }
  Transport& transport(int rank) { return fabric_.endpoint(rank); }

  // Runs fn(rank, transport) on every rank's thread at once. A rank that throws aborts the
  // fabric, so that peers blocked on its messages fail too instead of waiting forever; the first
  // error is rethrown here.
  void run(const std::function<void(int, Transport&)>& fn) {
    ranks_.run([&](int r) {
      try {
        fn(r, fabric_.endpoint(r));
      } catch (...) {
        fabric_.abort();
        throw;
      }
    });
  }

 private:
  LocalFabric fabric_;
  RankGroup ranks_;  // after the fabric: its threads stop before the fabric goes
};

}  // namespace paralab
