#include "experiments/results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "core/error.h"
#include "experiments/descriptor.h"

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

namespace {

// The temporary file being written, for bench_runner's signal thread: a second signal exits at
// once and removes it, so that only the last complete results file remains. Set when the file is
// created and cleared after it is renamed or removed, both under g_temporary_mu, which the
// removal keeps until the process exits (no rename can follow it).
std::mutex g_temporary_mu;
std::string g_temporary;

// Writes all of `text` to fd, then syncs it; false (errno set) on any failure.
bool write_all(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    written += static_cast<std::size_t>(n);
  }
  return ::fsync(fd) == 0;
}

// The text of a results file. Strings that are not UTF-8 are written with U+FFFD in place of
// the bad bytes instead of failing (every input string is checked up front; this is the last
// line of defence), and nesting is bounded by the descriptor's depth limit.
std::string results_text(const nlohmann::json& doc) {
  return doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// mkostemp's template for a hidden temporary file beside `path`: DIR/.NAME.XXXXXX.
std::string temporary_beside(const std::string& path) {
  return (fs::path(directory_of(path)) / ("." + fs::path(path).filename().string() + ".XXXXXX"))
      .string();
}

// mkstemp creates 0600; results are meant to be shared like any file the user creates.
bool share_like_a_new_file(int fd) {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return ::fchmod(fd, 0666 & ~mask) == 0;
}

// A rename or link into path's directory is durable once the directory is synced.
void sync_directory_of(const std::string& path) {
  const int dir = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace

void remove_temporary_results_file() noexcept {
  g_temporary_mu.lock();  // never unlocked: the caller exits next
  if (!g_temporary.empty()) ::unlink(g_temporary.c_str());
}

std::string choose_results_path(const std::optional<std::string>& out, const std::string& name,
                                const std::string& timestamp) {
  // The default name is only a first choice: ResultsFile::create() moves on to -2, -3, ... if
  // another invocation takes it meanwhile.
  std::string path;
  if (out) {
    path = *out;
    struct stat st {};
    // lstat: a dangling symbolic link exists too, and is never written through.
    if (::lstat(path.c_str(), &st) == 0)
      throw Error("--out " + path + ": " +
                  (S_ISLNK(st.st_mode) ? "is a symbolic link" : "file exists") +
                  " (results are never overwritten)");
    if (path.ends_with("/")) throw Error("--out " + path + ": names a directory, not a file");
  } else {
    // results/ is made when the file is created (ResultsFile::create), not before: bad input
    // found in between leaves nothing behind. Until then the directory that will hold it must
    // be writable.
    std::error_code ec;
    if (!fs::exists("results", ec)) {
      if (::access(".", W_OK | X_OK) != 0)
        throw Error("results/: cannot be created here: " + std::string(std::strerror(errno)) +
                    " (use --out)");
      return "results/" + name + "-" + timestamp + ".json";
    }
    // Taken already (two runs in one second): create() moves on to -2, -3, ... itself (a name
    // chosen here as -2 became -2-2 there when a third invocation took it meanwhile).
    path = "results/" + name + "-" + timestamp + ".json";
  }
  const std::string dir = directory_of(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error((out ? "--out " : "") + path + ": directory " + dir + " does not exist");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error((out ? "--out " : "") + path + ": directory " + dir +
                " is not writable: " + std::strerror(errno));
  return path;
}

ResultsFile ResultsFile::create(const std::string& path, bool may_rename, const nlohmann::json& doc,
                                uint64_t expected_bytes) {
  const std::string text = results_text(doc);
  const std::string stem =
      path.size() > 5 && path.ends_with(".json") ? path.substr(0, path.size() - 5) : path;
  std::string final_path = path;
  if (may_rename) {  // a default name: its directory (results/) is made now, when needed
    std::error_code ec;
    fs::create_directories(directory_of(path), ec);
    if (ec) throw Error(directory_of(path) + "/: cannot create directory: " + ec.message());
  }
  // The first version as every later one (update): written and flushed in a hidden temporary
  // file beside it, then hard-linked to its name. link() fails rather than replace a file (nor
  // does it follow a symbolic link there): a second invocation with the same --out stops here,
  // before it trains, and a reader never sees a half-written first version.
  std::string tmpl = temporary_beside(path);
  const int fd = mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot create results file: " + std::strerror(errno));
  struct statvfs vfs {};
  const bool have_space = ::fstatvfs(fd, &vfs) != 0 ||
                          uint64_t{vfs.f_bavail} * vfs.f_frsize >= 2 * expected_bytes + text.size();
  if (!have_space || !share_like_a_new_file(fd) || !write_all(fd, text)) {
    const int err = have_space ? errno : ENOSPC;
    ::close(fd);
    ::unlink(tmpl.c_str());
    const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
    throw Error(path + ": cannot write results file: " + std::strerror(err) +
                (have_space ? ""
                            : " (" + std::to_string(free_bytes >> 20) +
                                  " MiB free, the results need about " +
                                  std::to_string((2 * expected_bytes) >> 20) + " MiB)"));
  }
  ::close(fd);
  for (int i = 2;; ++i) {
    if (::link(tmpl.c_str(), final_path.c_str()) == 0) break;
    int err = errno;
    if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS) {
      // A file system without hard links: the name taken with O_EXCL (never an existing file,
      // never through a symbolic link), then the written file renamed over it.
      const int placeholder =
          ::open(final_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (placeholder >= 0) {
        ::close(placeholder);
        if (::rename(tmpl.c_str(), final_path.c_str()) == 0) break;
        err = errno;
        ::unlink(final_path.c_str());
      } else {
        err = errno;
      }
    }
    if (err != EEXIST || !may_rename || i > 1000) {
      ::unlink(tmpl.c_str());
      throw Error(final_path + ": cannot create results file: " + std::strerror(err) +
                  (err == EEXIST ? " (results are never overwritten)" : ""));
    }
    final_path = stem + "-" + std::to_string(i) + ".json";
  }
  ::unlink(tmpl.c_str());  // the name is a link to it now (or, renamed, it is gone already)
  sync_directory_of(final_path);
  ResultsFile f;
  f.path_ = final_path;
  return f;
}

void ResultsFile::update(const nlohmann::json& doc) {
  const std::string text = results_text(doc);
  std::string tmpl = temporary_beside(path_);
  int fd = -1, create_err = 0;
  {
    std::lock_guard lock(g_temporary_mu);
    fd = mkostemp(tmpl.data(), O_CLOEXEC);  // the X's are replaced in place
    if (fd >= 0)
      g_temporary = tmpl;
    else
      create_err = errno;
  }
  if (fd < 0) {
    const int err = create_err;
    throw Error(path_ + ": cannot create a temporary file beside it: " + std::strerror(err) +
                " (the file holds the runs written before)");
  }
  int err = 0;
  if (!share_like_a_new_file(fd) || !write_all(fd, text)) err = errno;
  ::close(fd);
  bool ok;
  {
    std::lock_guard lock(g_temporary_mu);
    // rename() replaces the previous version in one step: the path always holds a complete file.
    if (err == 0 && ::rename(tmpl.c_str(), path_.c_str()) != 0) err = errno;
    ok = err == 0;
    if (!ok) ::unlink(tmpl.c_str());
    g_temporary.clear();
  }
  if (!ok)
    throw Error(path_ + ": cannot update results file: " + std::strerror(err) +
                " (the file holds the runs written before)");
  sync_directory_of(path_);
}

namespace {
std::vector<nlohmann::json> resumable_runs_unbounded(const std::string& text,
                                                     const std::string& path, const Descriptor& d,
                                                     const std::string& data_dir,
                                                     const nlohmann::json& environment);
}  // namespace

std::vector<nlohmann::json> resumable_runs(const std::string& text, const std::string& path,
                                           const Descriptor& d, const std::string& data_dir,
                                           const nlohmann::json& environment) {
  try {
    return resumable_runs_unbounded(text, path, d, data_dir, environment);
  } catch (const Error& e) {
    throw Error(one_line(e.what()));
  }
}

namespace {
// What bench_runner reads of a kept run (the summary table, the speedups, the plots' inputs),
// each with its type: a run edited by hand, or cut short, is refused here, before anything is
// written, instead of failing after the new results file exists. `where` is "runs[i]".
void check_kept_run(const nlohmann::json& r, const std::string& what, const std::string& where) {
  using nlohmann::json;
  const auto bad = [&](const std::string& key, const char* must) {
    throw Error(
        what + ": " + where + "." + key + ": " + must +
        " (every ok run bench_runner writes has it; remove that run from the file to rerun it)");
  };
  const auto member = [&](const json& parent, const std::string& key,
                          const std::string& name) -> const json& {
    const auto it = parent.find(key);
    if (it == parent.end()) bad(name, "missing");
    return *it;
  };
  const auto need = [&](const json& parent, const std::string& key, const std::string& name,
                        bool (json::*is)() const noexcept, const char* must) -> const json& {
    const json& v = member(parent, key, name);
    if (!(v.*is)()) bad(name, must);
    return v;
  };
  const auto count = [&](const json& parent, const std::string& key, const std::string& name,
                         int64_t least) {
    const json& v = member(parent, key, name);
    if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<int64_t>() < least)
      bad(name, least ? "must be an integer >= 1" : "must be an integer >= 0");
  };
  const auto number_or_null = [&](const json& parent, const std::string& key,
                                  const std::string& name) {
    const json& v = member(parent, key, name);
    if (!v.is_number() && !v.is_null()) bad(name, "must be a number or null");
  };
  need(r, "label", "label", &json::is_string, "must be a string");
  const json& reason = member(r, "reason", "reason");
  if (!reason.is_null()) bad("reason", "must be null in an ok run");
  const json& c = need(r, "config", "config", &json::is_object, "must be an object");
  for (const char* key : {"strategy", "backend", "batch_scaling"})
    need(c, key, std::string("config.") + key, &json::is_string, "must be a string");
  count(c, "devices", "config.devices", 1);
  count(c, "global_batch", "config.global_batch", 1);
  count(c, "per_device_batch", "config.per_device_batch", 1);
  count(c, "warmup_iterations", "config.warmup_iterations", 0);
  member(c, "model", "config.model");
  const json& t = need(r, "timing", "timing", &json::is_object, "must be an object");
  number_or_null(t, "median_iteration_ms", "timing.median_iteration_ms");
  number_or_null(t, "samples_per_s", "timing.samples_per_s");
  count(t, "timed_iterations", "timing.timed_iterations", 0);
  count(t, "warmup_iterations", "timing.warmup_iterations", 0);
  for (const char* key : {"iterations", "warmup"})
    need(r, key, key, &json::is_array, "must be an array");
  const json& epochs = need(r, "epochs", "epochs", &json::is_array, "must be an array");
  for (std::size_t e = 0; e < epochs.size(); ++e) {
    const std::string name = "epochs[" + std::to_string(e) + "]";
    if (!epochs[e].is_object()) bad(name, "must be an object");
    need(epochs[e], "test_acc", name + ".test_acc", &json::is_number, "must be a number");
  }
}

// The machine a run was measured on, as its results file's environment names it: a run kept
// from another machine would be compared (speedups, the summary) with runs measured on this one.
constexpr const char* kSameMachine[] = {"cpu_model", "cpu_cores"};

std::vector<nlohmann::json> resumable_runs_unbounded(const std::string& text,
                                                     const std::string& path, const Descriptor& d,
                                                     const std::string& data_dir,
                                                     const nlohmann::json& environment) {
  using nlohmann::json;
  const std::string what = "--resume " + path;
  // Depth-limited like a descriptor: comparing and diffing below recurse once per level.
  json old = parse_json_limited(text, what);
  if (!old.is_object() || !old.contains("runs") || !old["runs"].is_array() ||
      !old.contains("descriptor"))
    throw Error(what + ": not a ParaLab results file");
  const json version = old.value("schema_version", json(nullptr));
  if (version != kResultsSchemaVersion)
    throw Error(what + ": schema_version " + version.dump().substr(0, 40) +
                ", this bench_runner writes " + std::to_string(kResultsSchemaVersion) +
                " (rerun it whole)");
  // Where the data lies is not part of the experiment: the descriptors are compared without
  // dataset.dir (null when found, or a path), and the directories the two invocations read
  // from, resolved, must be one (other files there could hold other data).
  json old_descriptor = old["descriptor"], descriptor = d.resolved;
  for (json* j : {&old_descriptor, &descriptor})
    if (j->is_object() && j->contains("dataset") && (*j)["dataset"].is_object())
      (*j)["dataset"].erase("dir");
  if (old_descriptor != descriptor) {
    const json diff = json::diff(old_descriptor, descriptor);
    std::string where = diff.empty() ? "" : diff[0].value("path", std::string());
    if (where.size() > 80) where = where.substr(0, 80) + "...";
    throw Error(what + ": made from another descriptor (they differ at " +
                (where.empty() ? std::string("the top level") : where) + ")");
  }
  // The directory its runs read, recorded whether the descriptor named it or it was found: a
  // directory found by the search (FASHION_MNIST_DIR, the installed package) can differ between
  // two invocations of one descriptor.
  const json recorded = old.contains("dataset") && old["dataset"].is_object()
                            ? old["dataset"].value("dir", json(nullptr))
                            : json(nullptr);
  const std::string was = recorded.is_string() ? recorded.get<std::string>() : "";
  std::error_code ec1, ec2;
  if (was.empty() ||
      std::filesystem::weakly_canonical(was, ec1) !=
          std::filesystem::weakly_canonical(data_dir, ec2) ||
      ec1 || ec2)
    throw Error(what + ": its runs read the data in " + (was.empty() ? "(not recorded)" : was) +
                ", this invocation's is in " + data_dir + " (give --data-dir " +
                (was.empty() ? "DIR" : was) + " to resume it)");
  const json& old_environment = old.contains("environment") && old["environment"].is_object()
                                    ? old["environment"]
                                    : json(nullptr);
  for (const char* key : kSameMachine) {
    const json was_key =
        old_environment.is_object() ? old_environment.value(key, json(nullptr)) : json(nullptr);
    const json now_key = environment.value(key, json(nullptr));
    if (was_key != now_key)
      throw Error(what + ": its runs ran on another machine (environment." + key + " " +
                  (was_key.is_null() ? std::string("not recorded") : was_key.dump().substr(0, 80)) +
                  ", here " + now_key.dump().substr(0, 80) +
                  "): their times do not compare with this machine's (rerun it whole here)");
  }
  std::vector<json> ok;
  json& runs = old["runs"];
  for (std::size_t i = 0; i < runs.size(); ++i) {
    json& r = runs[i];
    if (!r.is_object() || r.value("status", json()) != "ok" || !r.contains("run_spec")) continue;
    check_kept_run(r, what, "runs[" + std::to_string(i) + "]");
    // Where and in which environment it ran (library versions, setting variables, the build),
    // which this file's own environment block does not describe; kept from the first file
    // when it was kept before.
    if (!r.contains("kept_from"))
      r["kept_from"] = {{"path", path}, {"environment", old_environment}};
    ok.push_back(std::move(r));
  }
  return ok;
}
}  // namespace

std::string parameters_digest(const std::vector<float>& params) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64, offset basis and prime
  const auto* bytes = reinterpret_cast<const unsigned char*>(params.data());
  for (std::size_t i = 0; i < params.size() * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + text;
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
