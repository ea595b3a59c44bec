// The environment block of a results file: what ran where, built how, from which commit.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <thread>

#include "core/device.h"
#include "experiments/results.h"
#include "experiments/subprocess.h"
#include "paralab_build_info.h"  // generated at build time by cmake/build_info.cmake

extern char** environ;

namespace paralab {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// Output of a shell command, trailing newline removed; nullopt if it failed.
std::optional<std::string> command_output(const std::string& cmd) {
  return shell_output(cmd + " 2>/dev/null");
}

// The source directory's git state as the run starts. Only when the directory is the top of its
// own work tree: a copy inside another repository would otherwise report that repository's
// commit.
nlohmann::json source_tree_state() {
  const std::string dir = PARALAB_SOURCE_DIR;
  nlohmann::json out = {{"path", dir}, {"commit", nullptr}, {"dirty", nullptr}};
  const std::string git = "git -C '" + dir + "' ";
  const auto top = command_output(git + "rev-parse --show-toplevel");
  std::error_code ec;
  if (!top || !std::filesystem::equivalent(*top, dir, ec) || ec) return out;
  const auto commit = command_output(git + "rev-parse HEAD");
  if (!commit) return out;
  const auto status = command_output(git + "status --porcelain --untracked-files=no");
  out["commit"] = *commit;
  out["dirty"] = status ? nlohmann::json(!status->empty()) : nlohmann::json(nullptr);
  return out;
}

// What cmake/build_info.cmake recorded when this binary was built.
nlohmann::json build_state() {
  const char* commit = PARALAB_BUILD_COMMIT;
  const int dirty = PARALAB_BUILD_DIRTY;
  return {{"commit", commit ? nlohmann::json(commit) : nlohmann::json(nullptr)},
          {"dirty", dirty < 0 ? nlohmann::json(nullptr) : nlohmann::json(dirty == 1)},
          {"from", PARALAB_BUILD_COMMIT_ORIGIN}};
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace

nlohmann::json setting_variables(char** env) {
  // ParaLab's own switches, and those of the libraries it runs on: oneDNN, CUDA, cuBLAS(Lt),
  // cuDNN, NCCL, OpenMP and glibc's tunables (memcpy's non-temporal threshold).
  static constexpr std::string_view kPrefixes[] = {"PARALAB_", "ONEDNN_", "DNNL_",
                                                   "CUDA_",    "CUBLAS",  "CUDNN_",
                                                   "NCCL_",    "OMP_",    "GLIBC_TUNABLES"};
  constexpr std::size_t kMaxValue = 256;
  std::map<std::string, std::string> found;  // sorted by name
  for (char** e = env; e && *e; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view name = entry.substr(0, eq);
    if (std::none_of(std::begin(kPrefixes), std::end(kPrefixes),
                     [&](std::string_view p) { return name.substr(0, p.size()) == p; }))
      continue;
    found[std::string(name)] = std::string(entry.substr(eq + 1, kMaxValue));
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : found) out[name] = value;
  return out;
}

nlohmann::json describe_environment(int argc, char** argv, const std::string& utc_time) {
  nlohmann::json args = nlohmann::json::array();
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json libs = backend_versions();
  libs["nlohmann_json"] = std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                          std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                          std::to_string(NLOHMANN_JSON_VERSION_PATCH);
  return {{"paralab_version", PARALAB_VERSION},
          {"build_type", PARALAB_BUILD_TYPE},
          {"cpu_model", cpu_model()},
          {"cpu_cores", std::thread::hardware_concurrency()},
          {"gpu_model", nullptr},  // set from the runs' devices once they ran (note_runs)
          {"hostname", host},
          {"compiler", compiler()},
          {"libraries", libs},
          {"onednn_cpu_isa", onednn_cpu_isa()},
          {"git", {{"build", build_state()}, {"source_tree", source_tree_state()}}},
          {"argv", args},
          {"variables", setting_variables(environ)},
          {"utc_time", utc_time}};
}

nlohmann::json used_gpu_models(const nlohmann::json& runs) {
  nlohmann::json models = nlohmann::json::array();
  for (const auto& run : runs) {
    // Each run lists its devices in its config (trainer.cpp); a failed run may list none.
    const auto config = run.find("config");
    if (config == run.end() || !config->is_object()) continue;
    const auto list = config->find("device_list");
    if (list == config->end() || !list->is_array()) continue;
    for (const auto& device : *list) {
      const auto model = device.find("gpu_model");
      if (model == device.end() || !model->is_string()) continue;
      if (std::find(models.begin(), models.end(), *model) == models.end()) models.push_back(*model);
    }
  }
  return models.empty() ? nlohmann::json(nullptr) : models;
}

void note_runs(nlohmann::json& environment, const nlohmann::json& runs) {
  environment["gpu_model"] = used_gpu_models(runs);
  const nlohmann::json versions = backend_versions();
  for (const auto& [name, version] : versions.items()) environment["libraries"][name] = version;
}

}  // namespace paralab
