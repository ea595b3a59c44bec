#include "experiments/results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace paralab {

namespace fs = std::filesystem;

std::string utc_now(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

std::string choose_results_path(const std::optional<std::string>& out, const std::string& name,
                                const std::string& timestamp) {
  // The default name is only a first choice: write_results_atomically() moves on to -2, -3, ...
  // if another invocation takes it meanwhile.
  if (out) {
    if (fs::exists(*out))
      throw Error("--out " + *out + ": file exists (results are never overwritten)");
    const fs::path parent = fs::path(*out).parent_path();
    if (!parent.empty() && !fs::is_directory(parent))
      throw Error("--out " + *out + ": directory " + parent.string() + " does not exist");
    return *out;
  }
  std::error_code ec;
  fs::create_directories("results", ec);
  if (ec) throw Error("results/: cannot create directory: " + ec.message());
  const std::string stem = "results/" + name + "-" + timestamp;
  std::string path = stem + ".json";
  for (int i = 2; fs::exists(path); ++i) path = stem + "-" + std::to_string(i) + ".json";
  return path;
}

std::string write_results_atomically(const nlohmann::json& doc, const std::string& path,
                                     bool may_rename) {
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string tmpl = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = mkstemp(tmpl.data());
  if (fd < 0) throw Error(path + ": cannot create a temporary file: " + std::strerror(errno));
  const std::string text = doc.dump(1) + "\n";
  std::size_t written = 0;
  bool ok = true;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n <= 0) {
      ok = false;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  const int saved = errno;
  // mkstemp creates 0600; results are meant to be shared like any file the user creates.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ok = ok && ::fchmod(fd, 0666 & ~mask) == 0;
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(tmpl.c_str());
    throw Error(path + ": write failed: " + std::strerror(saved));
  }
  // link() refuses an existing name, unlike rename(): an existing file is never replaced.
  std::string final_path = path;
  const std::string stem =
      path.size() > 5 && path.ends_with(".json") ? path.substr(0, path.size() - 5) : path;
  for (int i = 2; ::link(tmpl.c_str(), final_path.c_str()) != 0; ++i) {
    const int err = errno;
    if (err != EEXIST || !may_rename || i > 1000) {
      ::unlink(tmpl.c_str());
      throw Error(final_path + ": cannot create results file: " + std::strerror(err) +
                  (err == EEXIST ? " (results are never overwritten)" : ""));
    }
    final_path = stem + "-" + std::to_string(i) + ".json";
  }
  ::unlink(tmpl.c_str());
  return final_path;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(rank);
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

}  // namespace paralab
