// Results files: the path they go to, and the atomic, never-overwriting write.
// The format is documented in results/README.md with a JSON Schema beside it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace paralab {

constexpr int kResultsSchemaVersion = 2;

// The current UTC time in a strftime format; utc_timestamp() is "20261130T015310Z".
std::string utc_now(const char* format);
inline std::string utc_timestamp() { return utc_now("%Y%m%dT%H%M%SZ"); }

// --out when given, else results/<name>-<timestamp>.json (-2, -3, ... appended if taken),
// checked before any work: --out must not exist (not even as a dangling symbolic link: results
// are never overwritten) and its directory must exist and be writable. Errors name the path.
std::string choose_results_path(const std::optional<std::string>& out, const std::string& name,
                                const std::string& timestamp);

// A results file that holds every finished run at every moment. create() makes it exclusively
// before the first run, so a second invocation with the same path, an unwritable place or a
// full disk stops there; update() rewrites it whole into a temporary file beside it and renames
// that over it, so a kill at any point leaves the last complete version.
class ResultsFile {
 public:
  // Creates `path` (with may_rename, a default name: the next free -2, -3, ... if taken) holding
  // `doc`. expected_bytes: the estimated final size; the file system must have room for it
  // twice (the file and its next version), else an Error naming the path and the space.
  static ResultsFile create(const std::string& path, bool may_rename, const nlohmann::json& doc,
                            uint64_t expected_bytes);
  void update(const nlohmann::json& doc);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Removes the temporary file an update() is writing, if any, for a caller that exits next and
// must leave only the last complete results file (bench_runner's second signal): no update()
// renames or creates a temporary file after it.
void remove_temporary_results_file() noexcept;

struct Descriptor;

// The ok runs of an earlier results file (its text, read from `path`; messages start
// "--resume PATH") made from the same descriptor `d`, for --resume. The descriptor must be the
// same after --set and defaults, so it expands to the same runs; the runs are matched to d's by
// their expanded configuration (run_spec), not their position, so a file with the runs in any
// order, or only some of them, resumes. The file's runs must have read the data in `data_dir`
// (this invocation's, resolved) and run on this machine (`environment`'s cpu_model and
// cpu_cores), and each ok run must hold what bench_runner reads of it. An Error naming the file
// (and the key) otherwise. Each run returned records in kept_from the file it was measured for
// and that file's environment (its own kept_from if it was kept before).
std::vector<nlohmann::json> resumable_runs(const std::string& text, const std::string& path,
                                           const Descriptor& d, const std::string& data_dir,
                                           const nlohmann::json& environment);

// Environment block: CPU, cores, compiler, library versions, oneDNN's instruction set, the
// commit the binary was built from and the source tree's, argv, the setting variables, UTC time.
// gpu_model is null here: note_runs(environment, runs) sets it once the runs have run.
nlohmann::json describe_environment(int argc, char** argv, const std::string& utc_time);
// The environment variables of `env` (NAME=value strings, null-terminated, as environ) that
// change what ParaLab or its libraries do: PARALAB_*, ONEDNN_*, DNNL_*, CUDA_*, CUBLAS*, CUDNN_*,
// NCCL_*, OMP_* and GLIBC_TUNABLES, as a name -> value object sorted by name (values cut at 256
// characters). A results file then says which switches its runs took (PARALAB_STEP_MOVES,
// PARALAB_CUDNN_RULE, ONEDNN_MAX_CPU_ISA, CUDA_DEVICE_MAX_CONNECTIONS, ...).
nlohmann::json setting_variables(char** env);
// The distinct GPU models in the runs' device lists, in order of first use; null if none.
nlohmann::json used_gpu_models(const nlohmann::json& runs);
// After runs: gpu_model = used_gpu_models(runs), and the library versions again (cuBLAS's is
// the loaded library's once a run used a CUDA device: it is loaded on first use).
void note_runs(nlohmann::json& environment, const nlohmann::json& runs);

// A run's final parameters in one string: "fnv1a64:" and 16 hex digits of the FNV-1a hash of
// their float32 bytes (little-endian, flat, book order). Equal strings: the same bits (to the
// hash's confidence); any changed bit changes it.
std::string parameters_digest(const std::vector<float>& params);

// Percentile p (0..100) of `values` by linear interpolation between closest ranks.
double percentile(std::vector<double> values, double p);

}  // namespace paralab
