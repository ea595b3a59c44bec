// Results files: the path they go to, and the atomic, never-overwriting write.
// The format is documented in results/README.md with a JSON Schema beside it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace paralab {

constexpr int kResultsSchemaVersion = 2;

// The current UTC time in a strftime format; utc_timestamp() is "20261130T015310Z".
std::string utc_now(const char* format);
inline std::string utc_timestamp() { return utc_now("%Y%m%dT%H%M%SZ"); }

// --out when given (an Error if it exists: results are never overwritten), else
// results/<name>-<timestamp>.json, with -2, -3, ... appended if that name is taken.
std::string choose_results_path(const std::optional<std::string>& out, const std::string& name,
                                const std::string& timestamp);

// Writes `doc` to a temporary file beside `path`, then links it into place, and returns the path
// written. If `path` exists: with may_rename (a default name) the next free "-2", "-3", ...
// name is used; without it, an Error. Nothing is left behind on failure.
std::string write_results_atomically(const nlohmann::json& doc, const std::string& path,
                                     bool may_rename);

// Environment block: CPU, cores, compiler, library versions, oneDNN's instruction set, the
// commit the binary was built from and the source tree's, argv, UTC time. gpu_model is null here:
// set it to used_gpu_models(runs) once the runs have run.
nlohmann::json describe_environment(int argc, char** argv, const std::string& utc_time);
// The distinct GPU models in the runs' device lists, in order of first use; null if none.
nlohmann::json used_gpu_models(const nlohmann::json& runs);

// Percentile p (0..100) of `values` by linear interpolation between closest ranks.
double percentile(std::vector<double> values, double p);

}  // namespace paralab
