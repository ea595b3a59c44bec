// The CUDA-graph bar of the multi-device strategies, checked without a GPU: a strategy trained
// on RecordingDevices (tests/recording_device.h), which capture and replay their work as a CUDA
// device does, against the same strategy trained eagerly on CPU devices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/recording_device.h"
#include "tests/strategy_harness.h"
#include "tests/test_util.h"

namespace paralab {
namespace {

// k CPU devices, each behind a RecordingDevice (tests/recording_device.h): `group` is what a
// strategy is given.
struct RecordingGroup {
  // The first violation any device recorded (a capture doing what CUDA refuses, memory freed
  // under a living graph), or "".
  std::string violation() const {
    for (std::size_t r = 0; r < recording.size(); ++r)
      if (!recording[r]->violations.empty())
        return "rank " + std::to_string(r) + ": " + recording[r]->violations.front();
    return "";
  }
  explicit RecordingGroup(int k, int memory_domain = -1) : cpu(make_devices("cpu", k, {})) {
    for (auto& d : cpu) {
      recording.push_back(std::make_unique<testing::RecordingDevice>(*d));
      recording.back()->domain = memory_domain;
      group.push_back(recording.back().get());
    }
  }
  std::vector<std::unique_ptr<Device>> cpu;
  std::vector<std::unique_ptr<testing::RecordingDevice>> recording;
  std::vector<Device*> group;
};

// `strategy` with `options` (cuda_graphs on) on k RecordingDevices: its step must be one graph
// over the group, and the replays must compute exactly the eager steps: the same losses and
// correct counts at every step and the same parameters at the end, to the bit, with a learning
// rate that changes every step, across an evaluation (after which the same graph is launched
// again: one capture per run). A replayed
// step must queue nothing on the host but its inputs (its SGD step, and the example indices or
// labels of this step, where the rank reads any), and
// still time its phases and its receives from the marks the capture took. The group replay runs
// every rank's recorded work ordered only by the recorded events, the last rank first, so a
// hand-off that misses its event computes wrong numbers.
// memory_domain >= 0: the devices share one memory, as virtual devices of one GPU do.
inline ::testing::AssertionResult graph_replays_match_eager(const std::string& strategy, int k,
                                                            json options, int64_t batch = 24,
                                                            int memory_domain = -1) {
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  RecordingGroup devs(k, memory_domain);
  auto& recording = devs.recording;
  auto& group = devs.group;
  Session eager(strategy, k, options, test_initial_parameters(), batch, "cpu");
  options["cuda_graphs"] = true;
  Session graphed(strategy, group, options, test_initial_parameters(), batch);
  if (graphed->report().value("cuda_graphs", "") != "used")
    return ::testing::AssertionFailure() << "graphs not used: " << graphed->report().dump();
  int step = 0, launches = 0;
  // 6 steps (eager, then a capture and 5 launches), an evaluation, 4 more launches; 3 and 3
  // under PARALAB_TEST_MAX_STEPS <= 3 (the sanitizer runs: every replay runs the same hand-offs).
  const int before = std::max(3, capped_steps(6)), after = std::max(3, capped_steps(4));
  for (const auto& [steps, evaluate_after] : {std::pair{before, true}, std::pair{after, false}}) {
    for (int i = 0; i < steps; ++i, ++step) {
      for (auto& d : recording) d->direct_ops = 0;
      const StepResult g = graphed.step(step, lr(step));
      const StepResult e = eager.step(step, lr(step));
      const std::string at = " at step " + std::to_string(step);
      if (g.loss_sum != e.loss_sum || g.correct != e.correct)
        return ::testing::AssertionFailure()
               << "loss " << g.loss_sum << " vs eager " << e.loss_sum << ", correct " << g.correct
               << " vs " << e.correct << at;
      if (g.detail.value("cuda_graph_replay", 0) != 1) continue;
      ++launches;
      for (std::size_t r = 0; r < recording.size(); ++r) {
        if (recording[r]->direct_ops > 2 || recording[r]->direct_ops < 1)
          return ::testing::AssertionFailure()
                 << "rank " << r << " queued " << recording[r]->direct_ops
                 << " ops beside the launch (its SGD step, and its examples or labels if it "
                    "reads any)"
                 << at;
        if (!(g.ranks[r].compute_ms > 0) || g.ranks[r].bytes_sent <= 0)
          return ::testing::AssertionFailure()
                 << "rank " << r << ": compute " << g.ranks[r].compute_ms << " ms, "
                 << g.ranks[r].bytes_sent << " bytes sent" << at;
      }
      if (auto split = communication_is_split(g); !split) return split << at;
    }
    if (evaluate_after) {
      const EvalResult ge = graphed->evaluate(), ee = eager->evaluate();
      if (ge.loss_sum != ee.loss_sum || ge.correct != ee.correct)
        return ::testing::AssertionFailure() << "evaluation differs after step " << step;
    }
  }
  if (graphed->parameters() != eager->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  const json report = graphed->report();
  const int replays = before - 1 + after;
  if (report.value("cuda_graph_captures", -1) != 1 ||
      report.value("cuda_graph_replays", -1) != replays || launches != replays ||
      report.value("cuda_graph_scope", "") !=
          "one graph over the group's " + std::to_string(k) + " devices")
    return ::testing::AssertionFailure() << launches << " launches, report " << report.dump();
  for (std::size_t r = 0; r < recording.size(); ++r)
    if (!recording[r]->violations.empty())
      return ::testing::AssertionFailure()
             << "rank " << r
             << " did in a capture what CUDA refuses: " << recording[r]->violations.front();
  return ::testing::AssertionSuccess();
}

// `strategy` on k RecordingDevices, one capture serving the run: three rounds
// (epochs) of 4 steps of `batch`, a step of half of it (an epoch's shorter last batch) and an
// evaluation, against the same eager on CPU devices: every step's loss and correct count, every
// evaluation and the final parameters to the bit; one capture in all, every step of `batch`
// after the first a launch (the second captures), the shorter ones eager; and after the first
// round no step allocates on any device: neither the launches nor the shorter steps beside them
// make anew a buffer that the graph holds (it replays fixed pointers: on a GPU a freed buffer may
// be handed out again while the graph still uses it). Evaluations may size their own buffers.
// cuda: the same on CUDA virtual devices (GPU tests; they skip without a GPU), against the same
// strategy eager ("cuda_graphs": false) there, without the allocation count.
inline ::testing::AssertionResult graph_outlives_evaluations(const std::string& strategy, int k,
                                                             json options, bool cuda = false) {
  const int64_t batch = 24;
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  RecordingGroup devs(k);
  options["cuda_graphs"] = false;
  Session eager(strategy, k, options, test_initial_parameters(), batch, cuda ? "cuda" : "cpu");
  options["cuda_graphs"] = true;
  std::unique_ptr<Session> made =
      cuda ? std::make_unique<Session>(strategy, k, options, test_initial_parameters(), batch,
                                       "cuda")
           : std::make_unique<Session>(strategy, devs.group, options, test_initial_parameters(),
                                       batch);
  Session& graphed = *made;
  const auto allocations = [&] {
    int n = 0;
    for (const auto& d : devs.recording) n += d->allocations;
    return n;
  };
  int step = 0;
  for (int round = 0; round < 3; ++round) {
    const std::string in = " in round " + std::to_string(round);
    int allocated = 0;
    for (int i = 0; i < 5; ++i) {
      const int before = allocations();
      const bool shorter = i == 4;
      const StepResult g =
          shorter ? graphed->train_step(0, batch / 2, lr(step)) : graphed.step(step, lr(step));
      const StepResult e =
          shorter ? eager->train_step(0, batch / 2, lr(step)) : eager.step(step, lr(step));
      allocated += allocations() - before;
      const std::string at = " at step " + std::to_string(step) + in;
      if (g.loss_sum != e.loss_sum || g.correct != e.correct)
        return ::testing::AssertionFailure()
               << "loss " << g.loss_sum << " vs eager " << e.loss_sum << ", correct " << g.correct
               << " vs " << e.correct << at;
      const int launched = g.detail.value("cuda_graph_replay", 0);
      if (launched != (!shorter && step >= 1 ? 1 : 0))
        return ::testing::AssertionFailure() << (shorter ? "the shorter step" : "a step")
                                             << " reports cuda_graph_replay " << launched << at;
      ++step;
    }
    if (round > 0 && allocated != 0)
      return ::testing::AssertionFailure()
             << "the steps allocated " << allocated << " buffers" << in;
    // Checked before the next launch, which would write memory freed under the graph.
    if (const std::string v = devs.violation(); !v.empty())
      return ::testing::AssertionFailure() << "before the evaluation" << in << ", " << v;
    const EvalResult ge = graphed->evaluate(), ee = eager->evaluate();
    if (const std::string v = devs.violation(); !v.empty())
      return ::testing::AssertionFailure() << "in the evaluation" << in << ", " << v;
    if (ge.loss_sum != ee.loss_sum || ge.correct != ee.correct)
      return ::testing::AssertionFailure() << "the evaluation differs" << in;
  }
  if (graphed->parameters() != eager->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  const json report = graphed->report();
  if (report.value("cuda_graph_captures", -1) != 1 || report.value("cuda_graph_replays", -1) != 11)
    return ::testing::AssertionFailure() << "report " << report.dump();
  for (std::size_t r = 0; r < devs.recording.size(); ++r)
    if (!devs.recording[r]->violations.empty())
      return ::testing::AssertionFailure()
             << "rank " << r
             << " did in a capture what CUDA refuses: " << devs.recording[r]->violations.front();
  return ::testing::AssertionSuccess();
}

// How a group's capture fails in failed_group_capture_runs_eagerly.
struct GroupCaptureFault {
  // End: every rank's end() fails, as on a GPU or driver that cannot hold the graph
  // (CaptureFailed, seen by every rank alike). Operation: rank `rank` fails at one operation it
  // queues into the capture, as at a library call that a CUDA capture does not allow: that rank
  // stops part-way (CaptureBroken), and its peers stop where they wait for it.
  enum Kind { End, Operation } kind = End;
  int rank = 0;
  // Operation: which of the rank's operations in the capture (both its queues, counted by a
  // capture that succeeds): the first, the one a third or halfway in, or the last. Where the
  // fabric moves whole steps without a group mover, the last rank to reach each step queues
  // its moves, so a rank's count varies from capture to capture (11 to 27 for a ring with
  // overlap on 2 devices); a third of any count is still within the rank's own work.
  enum Where { First, Third, Middle, Last } at = First;
};

// The faults a test runs through: an operation at each of `at` on each of `ranks`; under
// PARALAB_TEST_MAX_STEPS (the sanitizer runs) the middle one of `at` on the last rank alone, since
// what those look for, a race or a bad access as the ranks stop and the transport reopens, is
// in every one of them (each costs seconds there).
inline std::vector<GroupCaptureFault> operation_faults(std::vector<int> ranks,
                                                       std::vector<GroupCaptureFault::Where> at) {
  if (capped_steps(7) < 7) {
    ranks = {ranks.back()};
    at = {at[at.size() / 2]};
  }
  std::vector<GroupCaptureFault> all;
  for (int r : ranks)
    for (auto where : at) all.push_back({GroupCaptureFault::Operation, r, where});
  return all;
}

inline std::string describe(const GroupCaptureFault& f) {
  if (f.kind == GroupCaptureFault::End) return "every rank's end() failing";
  const char* at[] = {"first", "third", "middle", "last"};
  return std::string("rank ") + std::to_string(f.rank) + "'s " + at[f.at] +
         " operation in the capture failing";
}

// The number of operations rank `rank` queues into the capture of `strategy`'s step on k
// RecordingDevices (its second step; both its queues), or -1 if no capture was made.
inline int ops_in_group_capture(const std::string& strategy, int k, json options, int rank,
                                int memory_domain = -1) {
  RecordingGroup devs(k, memory_domain);
  options["cuda_graphs"] = true;
  Session graphed(strategy, devs.group, options, test_initial_parameters(), 24);
  graphed.step(0, 0.05f);
  graphed.step(1, 0.05f);
  if (graphed->report().value("cuda_graphs", "") != "used") return -1;
  return devs.recording[static_cast<std::size_t>(rank)]->ops_in_capture();
}

// A group whose graph cannot be made (`fault`): the step that tried runs eagerly, and so does
// every later one, to the bit as a strategy that never tried; no capture is tried again, even
// after an evaluation; the report says why the graphs are not used. Where one rank stopped
// part-way, its peers stopped too and the transport was closed under them: it is reopened, and
// nothing of the stopped step runs (each step's figures and the final parameters are the eager
// ones), whichever operation failed and wherever the others were. memory_domain >= 0: the
// devices share one memory, as virtual devices of one GPU do.
inline ::testing::AssertionResult failed_group_capture_runs_eagerly(const std::string& strategy,
                                                                    int k, json options,
                                                                    GroupCaptureFault fault = {},
                                                                    int memory_domain = -1) {
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  const std::string why = fault.kind == GroupCaptureFault::End
                              ? "cudaGraphInstantiate: out of memory (simulated)"
                              : "cuda: cudaErrorStreamCaptureUnsupported (simulated)";
  int at = 0;
  if (fault.kind == GroupCaptureFault::Operation) {
    const int n = ops_in_group_capture(strategy, k, options, fault.rank, memory_domain);
    if (n < 3) return ::testing::AssertionFailure() << n << " operations in the capture";
    at = fault.at == GroupCaptureFault::First    ? 1
         : fault.at == GroupCaptureFault::Third  ? n / 3
         : fault.at == GroupCaptureFault::Middle ? n / 2
                                                 : n;
  }
  RecordingGroup devs(k, memory_domain);
  auto& recording = devs.recording;
  auto& group = devs.group;
  testing::RecordingDevice& failing = *recording[static_cast<std::size_t>(fault.rank)];
  if (fault.kind == GroupCaptureFault::End) {
    recording.front()->fail_group_end = why;
  } else {
    failing.fail_in_capture = why;
    failing.fail_in_capture_at = at;
  }
  Session eager(strategy, k, options, test_initial_parameters(), 24, "cpu");
  options["cuda_graphs"] = true;
  Session graphed(strategy, group, options, test_initial_parameters(), 24);
  std::vector<int64_t> receives;  // each rank's in the first step, eager before any capture
  int failed_before = 0;
  // 7 steps, 5 under PARALAB_TEST_MAX_STEPS (the sanitizer runs): the capture's, and after it
  // eager steps on either side of an evaluation.
  const int steps = std::max(5, capped_steps(7));
  for (int step = 0; step < steps; ++step) {
    if (step == 4) {
      const EvalResult ge = graphed->evaluate(), ee = eager->evaluate();
      if (ge.loss_sum != ee.loss_sum || ge.correct != ee.correct)
        return ::testing::AssertionFailure() << "evaluation differs before step " << step;
    }
    const StepResult g = graphed.step(step, lr(step)), e = eager.step(step, lr(step));
    if (step == 0) {
      for (const RankTimes& rt : g.ranks) receives.push_back(rt.receives);
      // A device's own captures before the group's (layer_split's profile, which falls back
      // to the host clock) may fail at the same operation: only the group's is counted here.
      failed_before = failing.failed_in_capture;
    }
    if (g.loss_sum != e.loss_sum || g.correct != e.correct)
      return ::testing::AssertionFailure()
             << "loss " << g.loss_sum << " vs eager " << e.loss_sum << ", correct " << g.correct
             << " vs " << e.correct << " at step " << step;
    // Step 0 is eager before any capture, step 1's capture fails: neither is a launch, and
    // from then on the steps are plain eager ones.
    if (g.detail.value("cuda_graph_replay", 0) != 0 ||
        (step >= 1 && g.detail.contains("cuda_graph_replay")))
      return ::testing::AssertionFailure()
             << "step " << step << " reports graphs: " << g.detail.dump();
    if (g.ranks.size() != e.ranks.size())
      return ::testing::AssertionFailure() << g.ranks.size() << " ranks at step " << step;
    for (std::size_t r = 0; r < g.ranks.size(); ++r) {
      if (step >= 1 && !(g.ranks[r].compute_ms > 0))
        return ::testing::AssertionFailure()
               << "rank " << r << ": compute " << g.ranks[r].compute_ms << " ms at step " << step;
      // What a transport left half-way (a message, a count) would show here. (The number of
      // receives depends on the pieces, which depend on the devices: the first step's.)
      if (g.ranks[r].bytes_sent != e.ranks[r].bytes_sent || g.ranks[r].receives != receives[r])
        return ::testing::AssertionFailure()
               << "rank " << r << ": " << g.ranks[r].bytes_sent << " bytes sent and "
               << g.ranks[r].receives << " receives vs " << e.ranks[r].bytes_sent << " (eager) and "
               << receives[r] << " (the first step) at step " << step;
    }
  }
  if (graphed->parameters() != eager->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  for (std::size_t r = 0; r < recording.size(); ++r) {
    const int ends = fault.kind == GroupCaptureFault::End ? 1 : 0;
    if (recording[r]->failed_group_ends != ends)
      return ::testing::AssertionFailure()
             << "rank " << r << " failed " << recording[r]->failed_group_ends << " captures' ends";
    if (!recording[r]->violations.empty())
      return ::testing::AssertionFailure() << "rank " << r << ": " << recording[r]->violations[0];
  }
  if (fault.kind == GroupCaptureFault::Operation && failing.failed_in_capture != failed_before + 1)
    return ::testing::AssertionFailure() << failing.failed_in_capture - failed_before
                                         << " group captures failed at operation " << at;
  // The error that stopped the capture is the failing rank's own, not a peer's failed call on
  // the capture it invalidated (CaptureInvalidated), whichever rank's thread threw first.
  const json report = graphed->report();
  if (report.value("cuda_graphs", "") != "not used: capture failed: " + why ||
      report.contains("cuda_graph_replays"))
    return ::testing::AssertionFailure() << "report " << report.dump();
  return ::testing::AssertionSuccess();
}

// As failed_group_capture_runs_eagerly with an operation failing in the last rank's capture,
// but the error is the step's own: it comes again in the eager step that replaces the capture
// (every operation that rank queues after it fails too). That step throws the rank's own error,
// not CaptureBroken nor a peer's "a peer failed", and no rank waits for ever; bench_runner then
// records the run as failed with that reason and goes on.
inline ::testing::AssertionResult group_step_error_ends_the_run(const std::string& strategy, int k,
                                                                json options) {
  RecordingGroup devs(k);
  const std::string why = "cuda: an illegal memory access was encountered (simulated)";
  devs.recording.back()->fail_in_capture = why;
  devs.recording.back()->fail_in_capture_at = 3;
  devs.recording.back()->fail_eagerly_after = true;
  options["cuda_graphs"] = true;
  Session graphed(strategy, devs.group, options, test_initial_parameters(), 24);
  graphed.step(0, 0.05f);  // eager: nothing captured yet
  try {
    graphed.step(1, 0.05f);
  } catch (const CaptureBroken& e) {
    return ::testing::AssertionFailure() << "the step threw CaptureBroken: " << e.what();
  } catch (const Error& e) {
    if (std::string(e.what()) != why)
      return ::testing::AssertionFailure() << "the step threw '" << e.what() << "'";
    if (devs.recording.back()->failed_in_capture != 1)
      return ::testing::AssertionFailure()
             << devs.recording.back()->failed_in_capture << " operations failed in captures";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the step did not throw";
}

// read_back "epoch" on k RecordingDevices: after the first (eager) step, read at once, every
// graph launch is queued (a pending result) with no host wait or read on any device, and
// collect() returns the queued steps' figures: the very losses and correct counts of the eager
// steps, each step's time (the slowest rank's), its samples and the figures of its detail that
// eager steps record (but a pipeline's bubble); the last queued step, the graph's last launch,
// also every device's phases. Each step is read once. Launches queued before a shorter batch
// (run eagerly, read at once) keep their figures but not their phases. The parameters end as
// the eager ones. On CPU devices nothing is launched, and every step is read at once.
inline ::testing::AssertionResult read_once_matches_eager(const std::string& strategy, int k,
                                                          json options, int64_t batch = 24) {
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  RecordingGroup devs(k);
  Session eager(strategy, k, options, test_initial_parameters(), batch, "cpu");
  options["cuda_graphs"] = true;
  options["read_back"] = "epoch";
  Session graphed(strategy, devs.group, options, test_initial_parameters(), batch);
  if (graphed->options().value("read_back", "") != "epoch")
    return ::testing::AssertionFailure() << "options " << graphed->options().dump();
  std::vector<StepResult> want;
  for (int step = 0; step < 7; ++step) {
    const int syncs = devs.recording[0]->synchronizations, reads = devs.recording[0]->host_reads;
    const StepResult g = graphed.queue(step, lr(step));
    want.push_back(eager.step(step, lr(step)));
    const std::string at = " at step " + std::to_string(step);
    if (g.pending != (step >= 1))
      return ::testing::AssertionFailure() << "pending " << g.pending << at;
    if (g.samples != batch) return ::testing::AssertionFailure() << g.samples << " samples" << at;
    if (!g.pending) {  // the eager step: read at once, with every device's phases
      if (g.loss_sum != want.back().loss_sum || g.correct != want.back().correct ||
          g.ranks.size() != static_cast<std::size_t>(k))
        return ::testing::AssertionFailure() << "the eager step read at once differs" << at;
    } else if (devs.recording[0]->synchronizations != syncs ||
               devs.recording[0]->host_reads != reads) {
      return ::testing::AssertionFailure() << "the host waited for or read the device" << at;
    }
  }
  const std::vector<StepResult> got = graphed->collect();
  if (got.size() != 6u) return ::testing::AssertionFailure() << got.size() << " steps collected";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const StepResult &g = got[i], &w = want[i + 1];
    const std::string at = " at step " + std::to_string(i + 1);
    if (g.pending || g.loss_sum != w.loss_sum || g.correct != w.correct || g.samples != batch)
      return ::testing::AssertionFailure()
             << "loss " << g.loss_sum << " vs eager " << w.loss_sum << ", correct " << g.correct
             << " vs " << w.correct << ", " << g.samples << " samples" << at;
    if (!(g.times.total_ms >= 0.0))
      return ::testing::AssertionFailure() << "time " << g.times.total_ms << at;
    if (g.detail.value("cuda_graph_replay", 0) != 1)
      return ::testing::AssertionFailure() << "detail " << g.detail.dump() << at;
    for (const auto& [key, value] : w.detail.items())
      if (key != "bubble_fraction" && g.detail.value(key, json()) != value)
        return ::testing::AssertionFailure()
               << "detail " << g.detail.dump() << " vs eager " << w.detail.dump() << at;
    if (i + 1 < got.size()) {
      if (!g.ranks.empty())
        return ::testing::AssertionFailure() << "per-device phases of a step read once" << at;
      continue;
    }
    if (g.ranks.size() != static_cast<std::size_t>(k))  // the graph's last launch: its marks
      return ::testing::AssertionFailure() << g.ranks.size() << " devices' phases" << at;
    for (const RankTimes& t : g.ranks)
      if (!(t.compute_ms > 0) || (k > 1 && t.bytes_sent <= 0) || t.samples <= 0 ||
          t.total_ms > g.times.total_ms)
        return ::testing::AssertionFailure()
               << "a device computed " << t.compute_ms << " ms, sent " << t.bytes_sent
               << " bytes, took " << t.samples << " samples in " << t.total_ms << " of "
               << g.times.total_ms << " ms" << at;
    if (w.detail.contains("bubble_fraction") != g.detail.contains("bubble_fraction"))
      return ::testing::AssertionFailure() << "detail " << g.detail.dump() << at;
  }
  if (!graphed->collect().empty())
    return ::testing::AssertionFailure() << "a queued step was collected twice";
  // Two more launches, then a shorter batch (an epoch's last), eager and read at once: the
  // launches keep their figures, not their phases (the eager step's own marks and counts took
  // the place of the launch's; the runner collects before such a step).
  for (int step = 7; step < 9; ++step) {
    const StepResult g = graphed.queue(step, lr(step));
    want.push_back(eager.step(step, lr(step)));
    if (!g.pending) return ::testing::AssertionFailure() << "step " << step << " read at once";
  }
  const StepResult tail = graphed->train_step(0, batch / 2, lr(9));
  const StepResult tail_eager = eager->train_step(0, batch / 2, lr(9));
  if (tail.pending || tail.loss_sum != tail_eager.loss_sum || tail.correct != tail_eager.correct)
    return ::testing::AssertionFailure() << "the shorter batch after queued launches differs";
  const std::vector<StepResult> later = graphed->collect();
  if (later.size() != 2u || later[0].loss_sum != want[7].loss_sum ||
      later[1].loss_sum != want[8].loss_sum || later[1].correct != want[8].correct ||
      !later[1].ranks.empty())
    return ::testing::AssertionFailure()
           << "the launches before the shorter batch: " << later.size() << " collected";
  if (graphed->parameters() != eager->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  for (std::size_t r = 0; r < devs.recording.size(); ++r)
    if (!devs.recording[r]->violations.empty())
      return ::testing::AssertionFailure()
             << "rank " << r
             << " did in a capture what CUDA refuses: " << devs.recording[r]->violations.front();
  Session cpu(strategy, k, options, test_initial_parameters(), batch, "cpu");
  if (cpu.queue(0, 0.05f).pending || cpu.queue(1, 0.05f).pending)
    return ::testing::AssertionFailure() << "a step on CPU devices was queued";
  return ::testing::AssertionSuccess();
}

// read_back "epoch" on k RecordingDevices, a run that diverges while its launches are queued (a
// NaN learning rate at step 1: every later loss is NaN): collect() returns the queued steps, the
// last one's loss NaN, for the runner to record as diverged; the last launch's figures read
// back must not count as differing from what its ranks saved because NaN != NaN.
inline ::testing::AssertionResult read_once_collects_a_diverged_run(const std::string& strategy,
                                                                    int k, json options,
                                                                    int64_t batch = 24) {
  RecordingGroup devs(k);
  options["cuda_graphs"] = true;
  options["read_back"] = "epoch";
  Session graphed(strategy, devs.group, options, test_initial_parameters(), batch);
  for (int step = 0; step < 5; ++step)
    graphed.queue(step, step == 1 ? std::numeric_limits<float>::quiet_NaN() : 0.02f);
  std::vector<StepResult> got;
  try {
    got = graphed->collect();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "collect() threw: " << e.what();
  }
  if (got.size() != 4u) return ::testing::AssertionFailure() << got.size() << " steps collected";
  if (!std::isfinite(got[0].loss_sum) || !std::isnan(got.back().loss_sum))
    return ::testing::AssertionFailure()
           << "losses " << got[0].loss_sum << " (step 1) and " << got.back().loss_sum << " (last)";
  return ::testing::AssertionSuccess();
}

// On CUDA virtual devices (GPU tests; they skip without a GPU): `strategy` with read_back "epoch"
// against the same read after every step: 7 of 8 steps queued (the first of the batch is
// eager), and collect() gives their losses and correct counts to the bit, a time for each, and
// every device's phases for the last; the same parameters at the end.
inline ::testing::AssertionResult cuda_read_once_matches_read_per_step(const std::string& strategy,
                                                                       int k, json options) {
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  Session each(strategy, k, options, test_initial_parameters(), 32, "cuda");
  options["read_back"] = "epoch";
  Session once(strategy, k, options, test_initial_parameters(), 32, "cuda");
  std::vector<StepResult> want;
  int queued = 0;
  for (int step = 0; step < 8; ++step) {
    want.push_back(each.step(step, lr(step)));
    queued += once.queue(step, lr(step)).pending ? 1 : 0;
  }
  if (queued != 7) return ::testing::AssertionFailure() << queued << " of 8 steps queued";
  const std::vector<StepResult> got = once->collect();
  if (got.size() != 7u) return ::testing::AssertionFailure() << got.size() << " collected";
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].loss_sum != want[i + 1].loss_sum || got[i].correct != want[i + 1].correct ||
        !(got[i].times.total_ms > 0.0))
      return ::testing::AssertionFailure()
             << "step " << i + 1 << ": loss " << got[i].loss_sum << " vs " << want[i + 1].loss_sum
             << ", correct " << got[i].correct << " vs " << want[i + 1].correct << ", "
             << got[i].times.total_ms << " ms";
  if (got.back().ranks.size() != static_cast<std::size_t>(k))
    return ::testing::AssertionFailure()
           << "the last launch's phases: " << got.back().ranks.size() << " devices";
  for (const RankTimes& t : got.back().ranks)
    if (!(t.compute_ms > 0.0))
      return ::testing::AssertionFailure() << "a device computed " << t.compute_ms << " ms";
  if (once->parameters() != each->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  return ::testing::AssertionSuccess();
}

// `steps` steps of both sessions, the learning rate changing every step: the same loss and
// correct count at every step and the same parameters at the end, to the bit.
inline ::testing::AssertionResult same_steps(Session& graphed, Session& eager, int steps) {
  const auto lr = [](int step) { return 0.02f * static_cast<float>(1 + step % 4); };
  for (int step = 0; step < steps; ++step) {
    const StepResult g = graphed.step(step, lr(step)), e = eager.step(step, lr(step));
    if (g.loss_sum != e.loss_sum || g.correct != e.correct)
      return ::testing::AssertionFailure()
             << "loss " << g.loss_sum << " vs eager " << e.loss_sum << " at step " << step;
  }
  if (graphed->parameters() != eager->parameters())
    return ::testing::AssertionFailure() << "the final parameters differ";
  return ::testing::AssertionSuccess();
}

// On CUDA virtual devices (GPU tests; they skip without a GPU): `strategy` trained with its
// step as one graph over the group against the same strategy eager ("cuda_graphs": false), the
// learning rate changing every step: the same losses at every step and the same parameters at
// the end, to the bit, and the report says the graph was used.
inline ::testing::AssertionResult cuda_graphs_match_eager(const std::string& strategy, int k,
                                                          json options, int steps = 12) {
  options["cuda_graphs"] = false;
  Session eager(strategy, k, options, test_initial_parameters(), 24, "cuda");
  options["cuda_graphs"] = true;
  Session graphed(strategy, k, options, test_initial_parameters(), 24, "cuda");
  if (auto same = same_steps(graphed, eager, steps); !same) return same;
  const json report = graphed->report();
  if (report.value("cuda_graphs", "") != "used" ||
      report.value("cuda_graph_replays", 0) != steps - 1)
    return ::testing::AssertionFailure() << "report " << report.dump();
  // The graph's census (core/graph_census.h) read back: at least a kernel per device.
  const json census = report.value("cuda_graph", json::object()).value("census", json());
  if (!census.is_object() || census.contains("unknown") || census.value("kernels", 0) < k ||
      census.value("longest_chain", json::object()).value("work_nodes", 0) < 1)
    return ::testing::AssertionFailure() << "census " << census.dump();
  return ::testing::AssertionSuccess() << report.value("cuda_graph", json()).dump();
}

// On CUDA virtual devices (GPU tests; they skip without a GPU): every device (device >= 0: the
// device of that rank alone) synchronises its stream before the at-th fault point (an event, a
// mark, a minibatch gather or an SGD update) of its capture-th capture
// (PARALAB_TEST_CAPTURE_FAULT, core/cuda/cuda_device.h), which a CUDA capture does not allow, as a
// library release that makes such a call would. The step's capture then breaks part-way; over the
// group, the ranks stop (one device alone: the others where they wait for it, or at the capture it
// invalidated for all), the origin ends the capture once every rank has, the transport is reopened
// and the step runs eagerly. Every step must equal the same strategy eager ("cuda_graphs": false),
// to the bit, and the report say why no graph is used. What the CPU stand-in cannot show: that a
// CUDA capture aborted part-way (the origin's ended, the others' dropped) leaves every device's
// streams ready for eager work.
inline ::testing::AssertionResult cuda_broken_capture_runs_eagerly(const std::string& strategy,
                                                                   int k, json options, int capture,
                                                                   int at, int steps = 6,
                                                                   int device = -1) {
  options["cuda_graphs"] = false;
  Session eager(strategy, k, options, test_initial_parameters(), 24, "cuda");
  options["cuda_graphs"] = true;
  testing::EnvGuard fault("PARALAB_TEST_CAPTURE_FAULT");
  fault.set(std::to_string(capture) + ":" + std::to_string(at) +
            (device >= 0 ? ":" + std::to_string(device) : ""));
  Session graphed(strategy, k, options, test_initial_parameters(), 24, "cuda");
  if (auto same = same_steps(graphed, eager, steps); !same) return same;
  const std::string why = graphed->report().value("cuda_graphs", "");
  // With one device failing, the error that ends the capture may be a peer's: a call on the
  // capture that device invalidated.
  if (why.rfind("not used: capture failed: ", 0) != 0 ||
      (device < 0 && why.find("cudaStreamSynchronize") == std::string::npos))
    return ::testing::AssertionFailure() << "cuda_graphs: " << why;
  return ::testing::AssertionSuccess() << why;
}

}  // namespace
}  // namespace paralab
