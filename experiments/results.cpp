#include "experiments/results.h"

#include <fcntl.h>
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

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string choose_results_path(const std::optional<std::string>& out, const std::string& name,
                                const std::string& timestamp) {
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

void write_results_atomically(const nlohmann::json& doc, const std::string& path) {
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
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(tmpl.c_str());
    throw Error(path + ": write failed: " + std::strerror(saved));
  }
  // link() refuses an existing name, unlike rename(): an existing file is never replaced.
  if (::link(tmpl.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmpl.c_str());
    throw Error(path + ": cannot create results file: " + std::strerror(err) +
                (err == EEXIST ? " (results are never overwritten)" : ""));
  }
  ::unlink(tmpl.c_str());
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
