#include "strategies/pipeline.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "strategies/timing.h"

namespace paralab {

std::vector<std::string> known_pipeline_schedules() { return {"1f1b", "gpipe"}; }

std::vector<PipelinePass> pipeline_schedule(const std::string& schedule, int stage, int stages,
                                            int m) {
  PARALAB_REQUIRE(stages >= 1 && 0 <= stage && stage < stages && m >= 1,
                  "pipeline: stage " + std::to_string(stage) + " of " + std::to_string(stages) +
                      " with " + std::to_string(m) + " micro-batches");
  std::vector<PipelinePass> passes;
  if (schedule == "forward") {
    for (int j = 0; j < m; ++j) passes.push_back({true, j});
  } else if (schedule == "gpipe") {
    for (int j = 0; j < m; ++j) passes.push_back({true, j});
    for (int j = m - 1; j >= 0; --j) passes.push_back({false, j});
  } else if (schedule == "1f1b") {
    const int fill = std::min(stages - stage - 1, m);
    int f = 0, b = 0;
    for (; f < fill; ++f) passes.push_back({true, f});
    while (f < m) {
      passes.push_back({true, f++});
      passes.push_back({false, b++});
    }
    while (b < m) passes.push_back({false, b++});
  } else {
    std::string known;
    for (const auto& n : known_pipeline_schedules()) known += (known.empty() ? "" : ", ") + n;
    throw Error("pipeline: unknown schedule '" + schedule + "' (known: " + known + ")");
  }
  return passes;
}

double ideal_bubble_fraction(int stages, int m) {
  return static_cast<double>(stages - 1) / static_cast<double>(m + stages - 1);
}

double measured_bubble_fraction(const std::vector<std::vector<PipelineEvent>>& events) {
  double first = 1e300, last = -1e300, busy = 0;
  for (const auto& stage : events)
    for (const PipelineEvent& e : stage) {
      first = std::min(first, e.start_ms);
      last = std::max(last, e.end_ms);
      busy += e.end_ms - e.start_ms;
    }
  const double span = last - first;
  if (events.empty() || !(span > 0)) return 0;
  return 1.0 - busy / (static_cast<double>(events.size()) * span);
}

PipelineMarks queue_pipeline(Transport& t, Device& device, const std::vector<PipelinePass>& passes,
                             const PipelineStage& stage) {
  const int s = t.rank(), k = t.size();
  PARALAB_REQUIRE(stage.slots >= 1, std::string("pipeline: a stage needs at least one slot"));
  PipelineMarks marks;
  marks.origin = device.mark();
  // In-flight sends by (direction, slot): a slot's buffer must not change until its send is done.
  std::map<std::pair<bool, int>, Transport::Handle> pending;
  // What the device spends receiving and on sends' completions (on a GPU: waiting for the
  // peer's event and copying, not the host's queueing).
  auto timed = [&](auto&& fn) {
    const TimeMark a = device.mark();
    fn();
    marks.transfers.push_back({a, device.mark()});
  };
  // reuse: the slot is about to take another micro-batch, whose shape may differ (evaluation's
  // short last chunk), and the stage may then free the buffer the peer is copying from. The
  // stream's wait orders this device's work only, so the host waits too.
  auto settle = [&](bool forward, int slot, bool reuse) {
    auto it = pending.find({forward, slot});
    if (it == pending.end()) return;
    timed([&] { t.wait(it->second); });
    pending.erase(it);
    if (reuse) device.synchronize();
  };
  for (const PipelinePass& p : passes) {
    const int slot = p.microbatch % stage.slots;
    settle(p.forward, slot, p.microbatch >= stage.slots);
    // Every send noted so far goes with the receive (Transport::recv_after_sends): a stage that
    // held one back would wait for a reply its peer cannot compute without it.
    if (p.forward && s > 0) timed([&] { t.recv_after_sends(s - 1, stage.input(p.microbatch)); });
    if (!p.forward && s < k - 1)
      timed([&] { t.recv_after_sends(s + 1, stage.output_grad(p.microbatch)); });
    const TimeMark a = device.mark();
    const Tensor& out = p.forward ? stage.forward(p.microbatch) : stage.backward(p.microbatch);
    marks.passes.push_back({p, a, device.mark()});
    const int peer = p.forward ? s + 1 : s - 1;
    if (peer >= 0 && peer < k) timed([&] { pending[{p.forward, slot}] = t.isend(peer, out); });
  }
  // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
  for (auto& entry : pending) timed([&] { t.wait(entry.second); });
  return marks;
}

PipelineTimes read_pipeline(Device& device, const PipelineMarks& marks, double origin_ms) {
  PipelineTimes times;
  for (const auto& [a, b] : marks.transfers) times.transfer_ms += device.elapsed_ms(a, b);
  for (const PipelineMarks::Pass& m : marks.passes) {
    const double a = origin_ms + device.elapsed_ms(marks.origin, m.start);
    const double b = origin_ms + device.elapsed_ms(marks.origin, m.end);
    times.events.push_back({m.pass, a, b});
    times.busy_ms += b - a;
  }
  return times;
}

PipelineTimes run_pipeline(Transport& t, Device& device, const std::vector<PipelinePass>& passes,
                           const PipelineStage& stage, Clock::time_point t0) {
  // Passes and transfers are timed with marks in the device's queue, read once the pipeline is
  // done: the device never stops between passes (on the CPU a mark is the host clock). The
  // origin is marked with the device idle, so that its host time is the device's time too.
  device.synchronize();
  const PipelineMarks marks = queue_pipeline(t, device, passes, stage);
  device.synchronize();
  return read_pipeline(device, marks, ms_between(t0, marks.origin.host));
}

}  // namespace paralab
