#include "strategies/deferred_steps.h"

#include "core/error.h"

namespace paralab {

void DeferredSteps::save_stats(const Tensor& stats) {
  PARALAB_REQUIRE(device_ != nullptr, "deferred steps: no device");
  PARALAB_REQUIRE(stats.numel() == 2 && stats.dtype() == DType::F32,
                  "deferred steps: stats must be two floats, got " + shape_string(stats.shape()));
  const int64_t chunk = saved_ / kSlotsPerChunk, slot = saved_ % kSlotsPerChunk;
  if (chunk == static_cast<int64_t>(chunks_.size()))
    chunks_.push_back(Tensor::zeros(*device_, {kSlotsPerChunk * 2}));
  device_->copy_on_device(chunks_[static_cast<std::size_t>(chunk)].f32() + slot * 2, stats.raw(),
                          2 * sizeof(float));
  ++saved_;
}

void DeferredSteps::add(QueuedStep step) {
  PARALAB_REQUIRE(static_cast<int64_t>(steps_.size()) + 1 == saved_,
                  "deferred steps: a step noted without its stats saved");
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
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const QueuedStep& q = steps_[i];
    StepResult r;
    r.loss_sum = stats[2 * i];
    r.correct = static_cast<int64_t>(stats[2 * i + 1]);
    r.samples = q.samples;
    const TimeMark& from = i > 0 && q.from_previous ? steps_[i - 1].end : q.start;
    r.times.total_ms = device_->elapsed_ms(from, q.end) + q.host_ms;
    if (q.phases) {
      r.times.forward_ms = device_->elapsed_ms(q.start, q.forward_end);
      r.times.backward_ms = device_->elapsed_ms(q.forward_end, q.backward_end);
      r.times.optimizer_ms = device_->elapsed_ms(q.backward_end, q.optimizer_end);
    }
    r.detail = q.detail;
    results.push_back(std::move(r));
  }
  steps_.clear();
  saved_ = 0;
  return results;
}

}  // namespace paralab
