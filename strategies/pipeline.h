// Pipeline execution for model parallelism across layers: each rank of a group is one stage (a
// contiguous run of layers); micro-batches flow forward stage to stage and their gradients flow
// back, over the same Transport the collectives use.
//
// The schedule says in which order a stage runs its micro-batches' forward and backward passes;
// the executor receives each pass's input from the neighbouring stage, runs the stage's compute
// and sends the result on, and records when the stage was computing (its busy intervals), from
// which the bubble (the fraction of the pipeline's time a stage sits idle) is measured.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "strategies/collectives/transport.h"

namespace paralab {

struct PipelinePass {
  bool forward;    // else backward
  int microbatch;  // 0-based
};

// The passes stage `stage` of `stages` runs for m micro-batches, in order:
//   "gpipe": all m forwards, then all m backwards, last micro-batch first (fill, drain);
//   "1f1b":  stages-stage-1 forwards to fill the pipeline, then one forward and one backward in
//            turn, then the remaining backwards (PipeDream-Flush: same bubble as GPipe, at most
//            `stages` micro-batches' activations alive instead of m);
//   "forward": the m forwards only (evaluation).
// An unknown name is an Error listing the known ones.
std::vector<PipelinePass> pipeline_schedule(const std::string& schedule, int stage, int stages,
                                            int m);
std::vector<std::string> known_pipeline_schedules();

// GPipe's bubble for k stages and m micro-batches of equal cost: (k-1)/(m+k-1).
double ideal_bubble_fraction(int stages, int m);

// One busy interval of a stage: a pass's compute, in milliseconds since the iteration's start.
struct PipelineEvent {
  PipelinePass pass;
  double start_ms, end_ms;
};

// The measured bubble: 1 - (summed busy time of all stages) / (stages x the pipeline's span,
// from the first pass's start to the last pass's end over all stages).
double measured_bubble_fraction(const std::vector<std::vector<PipelineEvent>>& events);

// What one stage computes; the executor moves tensors between stages. Micro-batch mb uses
// activation slot mb % slots: before a pass reuses a slot, the send that last read that slot's
// output (or input gradient) is waited for.
struct PipelineStage {
  int slots = 1;
  // Where micro-batch mb's input activation is received (not called for the first stage).
  std::function<Tensor&(int mb)> input;
  // Forward of mb; returns the activation to send to the next stage (ignored for the last).
  std::function<const Tensor&(int mb)> forward;
  // Where the gradient of mb's output is received (not called for the last stage).
  std::function<Tensor&(int mb)> output_grad;
  // Backward of mb; returns the gradient of its input for the previous stage (ignored for the
  // first).
  std::function<const Tensor&(int mb)> backward;
};

struct PipelineTimes {
  std::vector<PipelineEvent> events;
  double busy_ms = 0;  // summed compute
  // In the transport, timed with device marks: receiving (including waiting for the peer) and
  // waiting for sends to be consumed.
  double transfer_ms = 0;
};

// The marks of a stage's queued pipeline: its origin (the stage's start), each pass's compute,
// and each transfer.
struct PipelineMarks {
  struct Pass {
    PipelinePass pass;
    TimeMark start, end;
  };
  TimeMark origin;
  std::vector<Pass> passes;
  std::vector<std::pair<TimeMark, TimeMark>> transfers;
};
// Queues `passes` as stage t.rank() of t.size() without waiting for the device (what a CUDA
// graph captures), as long as no slot takes a second micro-batch (slots >= micro-batches):
// the marks, to read once the device has done the work.
PipelineMarks queue_pipeline(Transport& t, Device& device, const std::vector<PipelinePass>& passes,
                             const PipelineStage& stage);
// The times of a queued pipeline after the device has done it, with its origin `origin_ms`
// after the iteration's start.
PipelineTimes read_pipeline(Device& device, const PipelineMarks& marks, double origin_ms);
// Runs `passes` as stage t.rank() of t.size(). Each pass's compute and each transfer is timed
// with marks in the device's queue (Device::mark), so the device never stops between passes;
// the intervals are read after one synchronisation at the end. Waits for its own sends before
// returning, and on the host before a slot takes another micro-batch (evaluation).
PipelineTimes run_pipeline(Transport& t, Device& device, const std::vector<PipelinePass>& passes,
                           const PipelineStage& stage, std::chrono::steady_clock::time_point t0);

}  // namespace paralab
