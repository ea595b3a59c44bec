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
  // From a device list such as "cuda:0*4" or "cuda:0*2,cuda:1*2": the GPU of each device
  // (several on one GPU are virtual devices). Empty when `devices` was given as a count.
  std::vector<int> gpus;
  std::string label;        // generated ("data_parallel/ring x4 weak") unless given
  TrainingConfig training;  // the descriptor's training block with the run's overrides
  nlohmann::json options;   // strategy-specific keys
  std::string path;         // "runs.0" (or "runs.0[devices=2]" for a sweep point) for messages
  // Batch scaling over devices: "strong" keeps the global batch at training.batch_size;
  // "weak" keeps the per-device batch there (global = batch_size x devices).
  std::string batch_scaling = "strong";
  // Learning-rate rule for a global batch grown by a factor f = global / training.batch_size:
  // "none" (lr), "linear" (lr x f, Goyal et al. 2017), "sqrt" (lr x sqrt f).
  std::string lr_scaling = "none";
  int64_t lr_warmup_iterations = 0;     // ramp linearly from lr to the scaled lr over these
  bool allow_oversubscription = false;  // more devices x threads than cores: run, and mark it
  nlohmann::json sweep_point;           // the sweep values that produced this run ({} if none)
  // The run as the descriptor expands it: its keys after the sweep, with the whole training
  // block merged in. Identifies the run in a results file (--resume matches on it).
  nlohmann::json expanded;
};

struct Descriptor {
  std::string name;
  std::string backend = "auto";
  bool virtual_devices = true;  // CUDA: more devices than GPUs share them (false: skipped)
  bool tf32 = false;            // CUDA: TF32 math (off: float32, comparable with the CPU)
  bool green_contexts = true;   // CUDA: an equal SM share per virtual device where possible
  // Whether strategies split each device's communication into waiting and moving (three marks
  // in the device's queue per receive); unset ("auto"): where the devices do their work when it
  // is queued (the CPU, where a mark is a clock read), not where they queue it (GPUs, where each
  // mark is an event recorded by the host in every step).
  std::optional<bool> communication_split;
  std::string kernels =
      "cudnn";  // CUDA: the conv stages on "cudnn", "fused" own kernels, or "mixed"
  std::optional<std::string> data_dir;
  std::optional<int64_t> train_limit, test_limit;
  // The model every run trains (core/model.h, make_model): a built-in's name ("lenet",
  // "alexnet"), {"name": ..., options}, or {"layers": [...]}.
  nlohmann::json model = "lenet";
  std::vector<RunSpec> runs;
  nlohmann::json resolved;  // the whole descriptor after --set, with defaults filled in
};

// An Error "<what>: not valid UTF-8 (byte N): '<text with bad bytes as \xNN>'" unless `text` is
// UTF-8: file names and command-line values are checked before any work, since the results
// file (JSON) can only hold UTF-8.
void check_utf8(const std::string& what, const std::string& text);

// The whole of a file the user named (a descriptor, a results file to resume); errors start with
// `what` ("d.json", "--resume r.json") and say why. Check the name with check_utf8 first.
std::string read_text_file(const std::string& file, const std::string& what);

// Applies one "key.path=value" override (value parsed as JSON, else taken as a string).
void apply_override(nlohmann::json& doc, const std::string& assignment);

// Reads, overrides, fills defaults and validates. Every error is one line naming the file and
// the JSON path.
Descriptor load_descriptor(const std::string& file, const std::vector<std::string>& overrides,
                           const std::optional<std::string>& data_dir);
// The same from the descriptor's text (the fuzzer's entry point; `file` is used in messages).
Descriptor parse_descriptor_text(const std::string& text, const std::string& file,
                                 const std::vector<std::string>& overrides,
                                 const std::optional<std::string>& data_dir);
// JSON text parsed no deeper than descriptors may nest (32 levels: the writer, comparisons and
// diffs recurse once per level); an Error naming `what` otherwise.
nlohmann::json parse_json_limited(const std::string& text, const std::string& what);
// The same from an already parsed document (`file` is used in messages).
Descriptor parse_descriptor(nlohmann::json doc, const std::string& file);

}  // namespace paralab
