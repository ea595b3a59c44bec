// Steps whose figures are read once, later: the host queues an epoch's steps on a device that
// queues work (a GPU) without waiting for any of them, and reads their losses, accuracies and
// device times in one go at the end (Strategy::collect).
//
// Each step's {loss sum, correct count} is copied on the device into slots of its own (one per
// loss the step computed: a pipeline's last stage has one per micro-batch, a rank that computes
// no loss none), and its phases are device time marks; collect() waits for the device once,
// copies the slots to the host (one copy per 512 slots) and turns the marks into times.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "strategies/strategy.h"

namespace paralab {

// What a strategy knows of a queued step when it queues it.
struct QueuedStep {
  // The step's figures this device holds: its examples and the stats slots saved for it (summed
  // in order, the loss in double, as a step read at once sums them).
  int64_t samples = 0;
  int stats = 1;
  // How many training steps this queued work holds: more than 1 for a CUDA graph of several
  // steps (single's steps_per_launch). Each then has `samples` examples and stats / steps slots
  // of its own, in order, and a steps-th of the work's time (its steps are not timed apart).
  int steps = 1;
  TimeMark start, end;  // the step's first and last work (end after its stats are copied)
  // Eager steps mark their phases: forward_end after the loss, backward_end after the
  // gradients, optimizer_end after the update. Without them (a graph replay) only the total
  // is known.
  bool phases = false;
  TimeMark forward_end, backward_end, optimizer_end;
  // Host time to add to the step's total: a CUDA-graph capture, which the device does not see.
  double host_ms = 0;
  // The step's total runs from the previous queued step's end (so that the device's idle time
  // between the two, waiting for the host, is counted), not from its own start. False after
  // anything that is not a step ran on the host in between (a capture).
  bool from_previous = true;
  nlohmann::json detail = nlohmann::json::object();
};

class DeferredSteps {
 public:
  explicit DeferredSteps(Device& device) : device_(&device) {}
  DeferredSteps() = default;

  // Queues a copy of `stats` (two floats on the device: a loss sum and correct count, as
  // SoftmaxXent writes them; or 2 n floats, n such pairs in order) into the next slot (slots).
  // Call after the step's work and before marking its end; the copy is ordered after the work
  // on the device's queue.
  void save_stats(const Tensor& stats);
  // Notes the step whose step.stats slots were saved since the last one noted.
  void add(QueuedStep step);
  bool empty() const { return steps_.empty(); }
  // Waits for the device once, then every noted step's result (pending = false), in order.
  std::vector<StepResult> collect();

 private:
  static constexpr int64_t kSlotsPerChunk = 512;
  Device* device_ = nullptr;
  std::vector<Tensor> chunks_;  // kept between epochs: 2 floats per slot
  int64_t saved_ = 0;           // slots written since the last collect
  int64_t noted_ = 0;           // of them, slots of the steps noted
  std::vector<QueuedStep> steps_;
};

// One step read once from each rank's queue (every rank's collect(), in step order): its loss,
// correct count and examples are the sums of what the ranks held, its time the slowest rank's;
// the detail is the first rank's. `who` names the strategy in the error for ranks that queued
// different numbers of steps.
std::vector<StepResult> merge_rank_steps(const std::vector<std::vector<StepResult>>& per_rank,
                                         const std::string& who);

// Strategy::collect() of a group whose ranks queue their graph launches, each rank `ranks[r]`
// holding its DeferredSteps (`deferred`) and StepGraph (`graph`): every rank's steps read once
// on its own thread (`run(fn)` calls fn(r) for every rank), merged (merge_rank_steps), and each
// merged step given its strategy's per-step figures by `each(step)`. Where every rank's last
// queued step was its graph's last launch, whose times the graph's marks still hold,
// `finish(r, last)` reads that launch into rank r (on its own thread; `last` the merged step),
// whose `times` then take its graph's bytes and the step's time on that rank, and
// `figures(last)` returns the merged step with the figures read, which must hold the same loss,
// correct count and samples.
template <typename Ranks, typename Run, typename Each, typename Finish, typename Figures>
std::vector<StepResult> collect_queued_steps(Ranks& ranks, Run&& run, const std::string& who,
                                             Each&& each, Finish&& finish, Figures&& figures) {
  const std::size_t k = ranks.size();
  std::vector<std::vector<StepResult>> per(k);
  std::vector<char> launched(k, 0);
  run([&](int r) {
    auto& me = ranks[static_cast<std::size_t>(r)];
    per[r] = me.deferred.collect();
    launched[r] = !per[r].empty() && me.graph.replayed();
  });
  std::vector<StepResult> out = merge_rank_steps(per, who);
  for (StepResult& s : out) each(s);
  if (out.empty() || !std::all_of(launched.begin(), launched.end(), [](char l) { return l; }))
    return out;
  StepResult& last = out.back();
  run([&](int r) {
    auto& me = ranks[static_cast<std::size_t>(r)];
    finish(r, std::as_const(last));
    me.times.bytes_sent = me.graph.bytes();
    me.times.total_ms = per[r].back().times.total_ms;
  });
  StepResult read = figures(std::as_const(last));
  // A run that diverged has a NaN loss both ways (NaN != NaN): the runner records it as diverged.
  const bool same_loss =
      read.loss_sum == last.loss_sum || (std::isnan(read.loss_sum) && std::isnan(last.loss_sum));
  PARALAB_REQUIRE(same_loss && read.correct == last.correct && read.samples == last.samples,
                  who + ": the last queued step's figures differ from what its ranks saved");
  last = std::move(read);
  return out;
}

}  // namespace paralab
