// The environment block of a results file: what ran where, built how, from which commit.
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/device.h"
#include "experiments/results.h"

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
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return std::nullopt;
  std::string out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  if (pclose(p) != 0) return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

nlohmann::json git_state() {
  const std::string git = "git -C '" PARALAB_SOURCE_DIR "' ";
  const auto commit = command_output(git + "rev-parse HEAD");
  if (!commit) return {{"commit", nullptr}, {"dirty", nullptr}};
  const auto status = command_output(git + "status --porcelain --untracked-files=no");
  return {{"commit", *commit},
          {"dirty", status ? nlohmann::json(!status->empty()) : nlohmann::json(nullptr)}};
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
          {"gpu_model", nullptr},
          {"hostname", host},
          {"compiler", compiler()},
          {"libraries", libs},
          {"git", git_state()},
          {"argv", args},
          {"utc_time", utc_time}};
}

}  // namespace paralab
