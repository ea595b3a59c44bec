// What a CUDA device's ops chose for each shape they met (cuDNN algorithms, own kernels and their
// tiles), reported in the results' device list so that a run says which arithmetic it used.
#pragma once

#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"

namespace paralab::cuda {

class KernelLog {
 public:
  // Records `choice` under `key` (the first note of a key wins: a shape's choice never changes).
  void note(const std::string& key, nlohmann::json choice) {
    std::lock_guard lock(mutex_);
    if (!entries_.contains(key)) entries_[key] = std::move(choice);
  }
  // Replaces the choice under `key`: an op whose first choice failed at its first use and that
  // took another path instead.
  void revise(const std::string& key, nlohmann::json choice) {
    std::lock_guard lock(mutex_);
    entries_[key] = std::move(choice);
  }
  // Puts back what entries() returned earlier: the choices noted since are forgotten.
  void restore(nlohmann::json entries) {
    std::lock_guard lock(mutex_);
    entries_ = entries.is_object() ? std::move(entries) : nlohmann::json::object();
  }
  // {key: choice, ...}; empty before the first op ran.
  nlohmann::json entries() const {
    std::lock_guard lock(mutex_);
    return entries_;
  }

 private:
  mutable std::mutex mutex_;
  nlohmann::json entries_ = nlohmann::json::object();
};

// "conv x (N,C,H,W) w (K,C,R,S)": the key of a convolution stage's shape.
inline std::string conv_key(const Tensor& x, const Tensor& w) {
  return "conv x " + shape_string(x.shape()) + " w " + shape_string(w.shape());
}

}  // namespace paralab::cuda
