// Steps captured as CUDA graphs, the same way in every multi-device strategy: a step's work is
// captured once per run, then launched as a whole with its inputs set before each launch.
// Where the ranks hand messages to each other through the transport (every algorithm but
// NCCL's), the step is one graph over the whole group (GroupCapture, core/device.h): each rank's
// thread queues its part as it does eagerly, and a launch replays every rank's work with no host
// work per message. Where a rank's step talks only to a collective library that captures itself
// (NCCL), each device captures its own graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "strategies/collectives/transport.h"
#include "strategies/spmd_group.h"
#include "strategies/timing.h"

namespace paralab {

// Why `devices` (the group's, rank r on devices[r]) cannot run their step as one graph over the
// group, or "" when they can: *capture is then that capture. `what` names the traffic that needs
// it (e.g. "the ring allreduce"); comm_streams: each rank also queues from a communication
// thread (Device::capture_group). steps: the strategy moves collective steps (Transport::step);
// then the trial capture also holds the group's moves of whole collective steps where the
// group's transport makes them (SpmdGroup::moves_steps_whole). A strategy that only sends and
// receives (layer_split) passes false, so that a mover it never uses cannot cost it its graphs.
inline std::string plan_group_graph(const std::string& what, SpmdGroup& group,
                                    const std::vector<Device*>& devices,
                                    std::unique_ptr<GroupCapture>* capture,
                                    bool comm_streams = false, bool steps = true) {
  capture->reset();
  if (static_cast<int>(group.local_ranks().size()) != group.size())
    return what + " between processes: one graph cannot span processes";
  std::string why;
  *capture = devices.front()->capture_group(devices, comm_streams,
                                            steps && group.moves_steps_whole(), &why);
  return *capture ? "" : what + " needs one graph over the group: " + why;
}

// capture_step's stop_rank for a rank with no helpers of its own: it wakes its peers waiting for
// it in `group`'s transport.
inline std::function<std::string()> wake_peers(SpmdGroup& group) {
  return [&group] {
    group.abort();
    return std::string();
  };
}

// Queues enqueue() as rank r's part of a capture: the group's (group non-null), or else the
// device's own graph into *own (capture_work: a failure is CaptureFailed). A failure ends the
// capture and is rethrown; in the group's, an Error of this rank's own queueing (not a peer's
// PeerFailed, not the graph's CaptureFailed) is rethrown as CaptureBroken. Before the rank drops
// its part of a capture that stopped part-way (GroupCapture::abort), stop_rank() wakes its peers
// waiting for it in the transport (SpmdGroup::abort) and stops whatever else of the rank queues
// into the capture (data_parallel's communication thread), returning that helper's own error
// ("" if none): the origin's end of the capture waits for every rank's part to stop, and nothing
// queued after that end may run eagerly. A helper's own error is the rank's cause (CaptureBroken)
// where the rank itself only met its consequence (a call on the capture that the helper's failure
// invalidated). After CaptureFailed every rank has queued all of its part and the transport stays
// open (the step then runs eagerly on it).
template <typename Fn>
void capture_step(GroupCapture* group, int r, Transport& t, Device& dev,
                  std::unique_ptr<CapturedWork>* own, Fn&& enqueue,
                  const std::function<std::string()>& stop_rank = {}) {
  PARALAB_REQUIRE(group || own,
                  std::string("capture_step: neither a group's graph nor a device's"));
  if (!group) {
    *own = capture_work(dev, enqueue);
    return;
  }
  PARALAB_REQUIRE(static_cast<bool>(stop_rank),
                  std::string("capture_step: a group's capture needs its ranks' stop"));
  const GroupBarrier barrier = [&t] { t.barrier(); };
  const auto stop = [&] {
    std::string helper_error;
    try {
      helper_error = stop_rank();
    } catch (const std::exception& e) {  // the rank drops its part all the same
      helper_error = e.what();
    }
    group->abort(r);
    return helper_error;
  };
  try {
    // Inside the try: a begin that fails part-way (rank 0's fork record, a barrier a failed peer
    // breaks) must still end the capture it opened, or every later launch on that stream would
    // be captured instead of run.
    group->begin(r, barrier);
    enqueue();
    group->end(r, barrier);
  } catch (const CaptureFailed&) {
    group->abort(r);
    throw;
  } catch (const PeerFailed&) {
    if (const std::string helper_error = stop(); !helper_error.empty())
      throw CaptureBroken(helper_error);
    throw;
  } catch (const Error& e) {
    (void)stop();
    throw CaptureBroken(e.what());
  } catch (...) {
    (void)stop();
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

// from[offset, offset+count) into `to` (int32, made or remade for `count`): a step's example
// indices or labels in a buffer of their own, since a graph replays fixed pointers.
inline void copy_step_input(Device& dev, Tensor& to, const Tensor& from, int64_t offset,
                            int64_t count) {
  if (!to.defined() || to.numel() != count) to = Tensor::empty(dev, {count}, DType::I32);
  dev.copy_on_device(to.raw(), from.i32() + offset,
                     static_cast<std::size_t>(count) * sizeof(int32_t));
}

// A rank's captured step, kept the same way by every strategy: one capture serves the run. The
// first step runs eagerly and allocates and sizes what the step uses (which a capture must not
// do); the graph is of its batch (`key`: the global batch), captured at the next step of that
// batch and launched for every later one. A step of another batch (an epoch's shorter last one)
// is Apart: the strategy runs it eagerly in buffers of its own (slots of its model apart from the
// graph's, its own inputs), as it runs evaluations, so that nothing the graph points to moves.
// Marks: the strategy's time marks of a step, taken in the capture and recorded again by every
// launch. Every rank sees the same keys in the same order, so all of them capture, or launch,
// together.
template <typename Marks>
class StepGraph {
 public:
  enum class Next { Eager, Capture, Launch, Apart };
  // What the step of batch `key` does: Eager (the first step), Capture (and then a launch),
  // Launch, or Apart (a batch other than the first's; eager).
  Next next(int64_t key) {
    if (key_ < 0) {
      key_ = key;
      return Next::Eager;
    }
    if (key != key_) {
      replayed_ = false;
      return Next::Apart;
    }
    return captured_ ? Next::Launch : Next::Capture;
  }
  // Captures enqueue(), which queues rank r's step and returns its marks, into `group`'s graph
  // (null: the device's own), after lining the ranks up and resetting the transport's counts:
  // the bytes sent and the receives timed are the capture's, the same in every launch. False
  // when the group's graph could not be made (CaptureFailed, which every rank sees alike):
  // nothing was captured or run, failure() says why, and the caller runs this step eagerly and
  // every later one too (the strategy drops its graphs after the step). Any other error throws.
  // A rank that stopped queueing part-way throws CaptureBroken (capture_step; stop_rank as
  // there: required with a group), which run_step_falling_back turns into an eager step.
  template <typename Enqueue>
  bool capture(GroupCapture* group, int r, Transport& t, Device& dev, Enqueue&& enqueue,
               const std::function<std::string()>& stop_rank = {}) {
    t.barrier();
    t.reset_bytes_sent();
    t.reset_receive_times();
    try {
      capture_step(
          group, r, t, dev, &own_, [&] { marks_ = enqueue(); }, stop_rank);
    } catch (const CaptureFailed& e) {
      if (!group) throw;  // a device's own graph fails on that device only: not every rank's
      drop();
      failure_ = e.what();
      return false;
    }
    bytes_ = t.bytes_sent();
    receives_ = t.receive_marks();
    if (own_) described_ = own_->describe();
    captured_ = true;
    ++captures_;
    return true;
  }
  // Lines the ranks up, sets the step's scalar input (the SGD step, read by the graph when it
  // runs) and launches; returns when the launch began (host clock). The transport's receive
  // marks are then the capture's again, which the launch records.
  Clock::time_point launch(GroupCapture* group, int r, Transport& t, Device& dev, Tensor& step,
                           float value) {
    t.barrier();
    const auto t0 = Clock::now();
    dev.ops().set_scalar(step, value);
    launch_step(group, r, t, own_.get());
    t.set_receive_marks(receives_);
    ++replays_;
    replayed_ = true;
    return t0;
  }
  const Marks& marks() const { return marks_; }
  int64_t bytes() const { return bytes_; }     // what the captured step sends, per launch
  bool replayed() const { return replayed_; }  // the last step was a launch
  // Why the group's graph could not be made ("" unless a capture returned false).
  const std::string& failure() const { return failure_; }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // What the device's own graph held when it was captured (CapturedWork::describe; null with a
  // group's graph, which describes itself, or before a capture).
  const nlohmann::json& described() const { return described_; }

 private:
  void drop() {
    own_.reset();
    captured_ = false;
    marks_ = {};
    receives_.clear();
  }

  std::unique_ptr<CapturedWork> own_;  // the device's own graph; unused with a group's
  Marks marks_{};
  Transport::ReceiveMarks receives_;  // the transport's receive marks after the capture
  int64_t key_ = -1, bytes_ = 0, captures_ = 0, replays_ = 0;  // key_: the graph's batch
  bool captured_ = false, replayed_ = false;
  std::string failure_;
  nlohmann::json described_;
};

// One training step on every local rank through run (the strategy's run over its ranks):
// step(r, graphed), graphed while why_not is empty (the strategy's graph_step: the first step
// eager, then a capture, then launches), else eager. Where a rank's capture of the group's graph
// broke part-way (CaptureBroken: an operation failed as it was queued, e.g. a library call that
// a CUDA capture does not allow), nothing of the step ran, but the rank's peers stopped where
// they were and the transport was aborted under them. Once every rank has stopped, settle(r)
// lets each local rank's own helpers finish with the stopped step (data_parallel's
// communication thread), the transport is reopened, the graphs go (why_not becomes "capture
// failed: <the error>") and the step runs again eagerly on every rank, as every later step
// will. An error of the step itself then comes again with its own message and ends the run.
template <typename Run, typename Step, typename Settle>
void run_step_falling_back(SpmdGroup& group, std::string& why_not,
                           std::unique_ptr<GroupCapture>& capture, Run&& run, Step&& step,
                           Settle&& settle) {
  const bool graphed = why_not.empty();
  std::string broke;
  try {
    run([&](int r) { step(r, graphed); });
    return;
  } catch (const CaptureBroken& e) {
    broke = e.what();
  } catch (const CaptureInvalidated& e) {
    // No rank's own error came back, only calls on a capture over the group that something
    // else invalidated: every rank stopped all the same (capture_step).
    if (!graphed || !capture) throw;
    broke = e.what();
  }
  for (int r : group.local_ranks()) settle(r);
  group.reopen();
  why_not = "capture failed: " + broke;
  capture.reset();
  run([&](int r) { step(r, false); });
}

// After a step in which the ranks' capture of the group's graph failed (each ran the step
// eagerly instead, StepGraph::capture): every later step is eager too. why_not (the strategy's
// reason for not using graphs, "" while it does) becomes "capture failed: ..." and the group's
// capture goes. Every rank fails together, so any one local rank's failure stands for the
// group's. Called between steps, on the strategy's thread.
template <typename Ranks>
void drop_graphs_if_capture_failed(const Ranks& ranks, std::string& why_not,
                                   std::unique_ptr<GroupCapture>& capture) {
  if (!why_not.empty()) return;
  for (const auto& me : ranks)
    if (!me.graph.failure().empty()) {
      why_not = "capture failed: " + me.graph.failure();
      capture.reset();
      return;
    }
}

// The strategy_report's CUDA-graph fields (results/README): why_not is empty when the steps are
// graphs; group is the group's capture (null: one graph per device, `own` then what the first
// local rank's graph held: StepGraph::described).
inline void report_graphs(nlohmann::json& report, const std::string& why_not,
                          const GroupCapture* group, int devices, int64_t captures, int64_t replays,
                          const nlohmann::json& own = nullptr) {
  if (!why_not.empty()) {
    report["cuda_graphs"] = "not used: " + why_not;
    return;
  }
  report["cuda_graphs"] = "used";
  report["cuda_graph_scope"] =
      group ? "one graph over the group's " + std::to_string(devices) + " devices"
            : std::string("one graph per device");
  report["cuda_graph_captures"] = captures;
  report["cuda_graph_replays"] = replays;
  if (group && !group->describe().is_null()) report["cuda_graph"] = group->describe();
  if (!group && !own.is_null()) report["cuda_graph"] = own;
}

}  // namespace paralab
