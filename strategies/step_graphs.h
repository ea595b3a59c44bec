// Steps captured as CUDA graphs, the same way in every multi-device strategy: a step's work is
// captured once per batch size, then launched as a whole with its inputs set before each launch.
// Where the ranks hand messages to each other through the transport (every algorithm but
// NCCL's), the step is one graph over the whole group (GroupCapture, core/device.h): each rank's
// thread queues its part as it does eagerly, and a launch replays every rank's work with no host
// work per message. Where a rank's step talks only to a collective library that captures itself
// (NCCL), each device captures its own graph.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "strategies/collectives/transport.h"
#include "strategies/spmd_group.h"

namespace paralab {

// Why `devices` (the group's, rank r on devices[r]) cannot run their step as one graph over the
// group, or "" when they can: *capture is then that capture. `what` names the traffic that needs
// it (e.g. "the ring allreduce").
inline std::string plan_group_graph(const std::string& what, SpmdGroup& group,
                                    const std::vector<Device*>& devices,
                                    std::unique_ptr<GroupCapture>* capture) {
  capture->reset();
  if (static_cast<int>(group.local_ranks().size()) != group.size())
    return what + " between processes: one graph cannot span processes";
  std::string why;
  *capture = devices.front()->capture_group(devices, &why);
  return *capture ? "" : what + " needs one graph over the group: " + why;
}

// Queues enqueue() as rank r's part of a capture: the group's (group non-null), or else the
// device's own graph into *own. A failure ends the capture and is rethrown.
template <typename Fn>
void capture_step(GroupCapture* group, int r, Transport& t, Device& dev,
                  std::unique_ptr<CapturedWork>* own, Fn&& enqueue) {
  const GroupBarrier barrier = [&t] { t.barrier(); };
  PARALAB_REQUIRE(group || own,
                  std::string("capture_step: neither a group's graph nor a device's"));
  if (group)
    group->begin(r, barrier);
  else
    dev.begin_capture();
  try {
    enqueue();
    if (group)
      group->end(r, barrier);
    else
      *own = dev.end_capture();
  } catch (...) {
    if (group)
      group->abort(r);
    else
      dev.abort_capture();
    throw;
  }
}

// Launches rank r's captured step: the group's graph (collective: every rank calls it), or its
// device's own.
inline void launch_step(GroupCapture* group, int r, Transport& t, CapturedWork* own) {
  if (group)
    group->launch(r, [&t] { t.barrier(); });
  else if (own)
    own->launch();
  else
    throw Error("launch_step: no captured step to launch");
}

}  // namespace paralab
