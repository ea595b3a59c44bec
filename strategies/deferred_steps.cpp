#include "strategies/deferred_steps.h"

#include <algorithm>

#include "core/error.h"

namespace paralab {

void DeferredSteps::save_stats(const Tensor& stats) {
  PARALAB_REQUIRE(device_ != nullptr, "deferred steps: no device");
  PARALAB_REQUIRE(
      stats.numel() >= 2 && stats.numel() % 2 == 0 && stats.dtype() == DType::F32,
      "deferred steps: stats must be pairs of floats, got " + shape_string(stats.shape()));
  // One copy per chunk the slots fall in (usually one).
  for (int64_t from = 0, n = stats.numel() / 2; from < n;) {
    const int64_t chunk = saved_ / kSlotsPerChunk, slot = saved_ % kSlotsPerChunk;
    if (chunk == static_cast<int64_t>(chunks_.size()))
      chunks_.push_back(Tensor::zeros(*device_, {kSlotsPerChunk * 2}));
    const int64_t take = std::min(n - from, kSlotsPerChunk - slot);
    device_->copy_on_device(chunks_[static_cast<std::size_t>(chunk)].f32() + slot * 2,
                            stats.f32() + from * 2,
                            static_cast<std::size_t>(take) * 2 * sizeof(float));
    saved_ += take;
    from += take;
  }
}

void DeferredSteps::add(QueuedStep step) {
  PARALAB_REQUIRE(
      step.steps >= 1 && step.stats % step.steps == 0 && (step.steps == 1 || !step.phases),
      "deferred steps: " + std::to_string(step.stats) + " stats slots for " +
          std::to_string(step.steps) + " steps" +
          (step.phases ? " with phases (only a single step's are timed)" : ""));
  PARALAB_REQUIRE(step.stats >= 0 && noted_ + step.stats == saved_,
                  "deferred steps: a step noted with " + std::to_string(step.stats) +
                      " stats slots, " + std::to_string(saved_ - noted_) + " saved for it");
  noted_ = saved_;
  steps_.push_back(std::move(step));
}

std::vector<StepResult> DeferredSteps::collect() {
  std::vector<StepResult> results;
  if (steps_.empty()) return results;
  device_->synchronize();
  std::vector<float> stats;
  stats.reserve(static_cast<std::size_t>(saved_) * 2);
  for (int64_t c = 0; c * kSlotsPerChunk < saved_; ++c) {
    const std::vector<float> all = chunks_[static_cast<std::size_t>(c)].to_host_f32();
    const int64_t used = std::min(kSlotsPerChunk, saved_ - c * kSlotsPerChunk);
    stats.insert(stats.end(), all.begin(), all.begin() + used * 2);
  }
  results.reserve(steps_.size());
  std::size_t slot = 0;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const QueuedStep& q = steps_[i];
    const TimeMark& from = i > 0 && q.from_previous ? steps_[i - 1].end : q.start;
    const double total_ms = device_->elapsed_ms(from, q.end) + q.host_ms;
    const int per_step = q.stats / q.steps;
    for (int k = 0; k < q.steps; ++k) {
      StepResult r;
      for (int s = 0; s < per_step; ++s, ++slot) {
        r.loss_sum += stats[2 * slot];
        r.correct += static_cast<int64_t>(stats[2 * slot + 1]);
      }
      r.samples = q.samples;
      r.times.total_ms = total_ms / q.steps;
      if (q.phases) {
        r.times.forward_ms = device_->elapsed_ms(q.start, q.forward_end);
        r.times.backward_ms = device_->elapsed_ms(q.forward_end, q.backward_end);
        r.times.optimizer_ms = device_->elapsed_ms(q.backward_end, q.optimizer_end);
      }
      r.detail = q.detail;
      results.push_back(std::move(r));
    }
  }
  steps_.clear();
  saved_ = 0;
  noted_ = 0;
  return results;
}

std::vector<StepResult> merge_rank_steps(const std::vector<std::vector<StepResult>>& per_rank,
                                         const std::string& who) {
  std::vector<StepResult> out;
  if (per_rank.empty()) return out;
  for (const auto& rank : per_rank)
    PARALAB_REQUIRE(rank.size() == per_rank[0].size(),
                    who + ": the ranks queued different numbers of steps");
  for (std::size_t i = 0; i < per_rank[0].size(); ++i) {
    StepResult s;
    for (const auto& rank : per_rank) {
      s.loss_sum += rank[i].loss_sum;
      s.correct += rank[i].correct;
      s.samples += rank[i].samples;
      s.times.total_ms = std::max(s.times.total_ms, rank[i].times.total_ms);
    }
    s.detail = per_rank[0][i].detail;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace paralab
