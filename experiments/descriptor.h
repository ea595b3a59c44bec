// Experiment descriptors: loading, --set overrides, defaults and validation.
// The format is documented in experiments/README.md, with a JSON Schema beside it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace paralab {

struct TrainingConfig {
  int64_t epochs = 1;
  int64_t batch_size = 256;
  double lr = 0.2;
  uint64_t seed = 0;
  std::optional<int64_t> max_iterations_per_epoch;
  int64_t warmup_iterations = 5;
  int threads_per_device = 1;
  int64_t eval_batch_size = 1000;
};

struct RunSpec {
  std::string strategy;
  int devices = 1;
  std::string label;        // "single x1" unless the descriptor names it
  TrainingConfig training;  // the descriptor's training block with the run's overrides
  nlohmann::json options;   // strategy-specific keys
  std::string path;         // "runs[0]" for messages
};

struct Descriptor {
  std::string name;
  std::string backend = "auto";
  std::optional<std::string> data_dir;
  std::optional<int64_t> train_limit, test_limit;
  std::vector<RunSpec> runs;
  nlohmann::json resolved;  // the whole descriptor after --set, with defaults filled in
};

// Applies one "key.path=value" override (value parsed as JSON, else taken as a string).
void apply_override(nlohmann::json& doc, const std::string& assignment);

// Reads, overrides, fills defaults and validates. Every error is one line naming the file and
// the JSON path.
Descriptor load_descriptor(const std::string& file, const std::vector<std::string>& overrides,
                           const std::optional<std::string>& data_dir);
// The same from an already parsed document (`file` is used in messages).
Descriptor parse_descriptor(nlohmann::json doc, const std::string& file);

}  // namespace paralab
