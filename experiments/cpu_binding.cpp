#include "experiments/cpu_binding.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "strategies/collectives/mpi_transport.h"

namespace paralab {

std::vector<int> pinning_order(const std::vector<CpuInfo>& allowed) {
  std::vector<CpuInfo> sorted = allowed;
  std::sort(sorted.begin(), sorted.end(), [](const CpuInfo& a, const CpuInfo& b) {
    return std::tie(a.package, a.core, a.cpu) < std::tie(b.package, b.core, b.cpu);
  });
  std::vector<int> first, siblings;
  std::set<std::pair<int, int>> seen;
  for (const CpuInfo& c : sorted)
    (seen.insert({c.package, c.core}).second ? first : siblings).push_back(c.cpu);
  first.insert(first.end(), siblings.begin(), siblings.end());
  return first;
}

std::vector<int> cpus_for_rank(const std::vector<CpuInfo>& allowed, int index, int ranks,
                               int per_rank) {
  PARALAB_REQUIRE(ranks >= 1 && index >= 0 && index < ranks && per_rank >= 1,
                  "cpu binding: rank " + std::to_string(index) + " of " + std::to_string(ranks) +
                      ", " + std::to_string(per_rank) + " cores each");
  std::set<std::pair<int, int>> cores;
  for (const CpuInfo& c : allowed) cores.insert({c.package, c.core});
  if (static_cast<int64_t>(per_rank) * ranks > static_cast<int64_t>(cores.size())) return {};
  const std::vector<int> order = pinning_order(allowed);
  return {order.begin() + index * per_rank, order.begin() + (index + 1) * per_rank};
}

namespace {

int read_int(const std::string& path, int fallback) {
  std::ifstream in(path);
  int v = fallback;
  return in >> v ? v : fallback;
}

std::vector<CpuInfo> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    throw Error(std::string("cpu binding: sched_getaffinity: ") + std::strerror(errno));
  std::vector<CpuInfo> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
      // Without topology (some containers), every CPU counts as a core of its own.
      cpus.push_back({c, read_int(topo + "physical_package_id", 0), read_int(topo + "core_id", c)});
    }
  return cpus;
}

// Every thread of this process, and those it starts later (they inherit it), on `cpus`.
[[maybe_unused]] std::string pin_process(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    if (sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH)
      return std::string("sched_setaffinity: ") + std::strerror(errno);
  }
  if (ec) return "/proc/self/task: " + ec.message();
  return {};
}

[[maybe_unused]] std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

CpuBinding bind_rank_to_cores(int per_rank, bool enabled) {
  // The set the process started with: a run after a pinned one chooses from it again.
  static const std::vector<CpuInfo> allowed = allowed_cpus();
  std::vector<int> mine;
  for (const CpuInfo& c : allowed) mine.push_back(c.cpu);
  CpuBinding b{mine, {}};
#if PARALAB_HAVE_MPI
  static bool pinned = false;  // by an earlier run of this process
  // Which ranks share this rank's CPU set on this host, and where this rank comes among them.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string key = std::string(host) + "|" + join(mine);
  MpiWorld& world = MpiWorld::get();
  std::vector<int> counts;
  const std::vector<char> all = world.allgatherv(key.data(), key.size(), counts);
  int sharing = 0, index = 0;
  std::size_t at = 0;
  for (int r = 0; r < world.size(); ++r) {
    const std::string other(all.data() + at, static_cast<std::size_t>(counts[r]));
    at += static_cast<std::size_t>(counts[r]);
    if (other != key) continue;
    if (r < world.rank()) ++index;
    ++sharing;
  }
  if (!enabled) {
    b.how = "not pinned (--no-pin)";
  } else if (sharing == 1 && static_cast<int>(allowed.size()) <= per_rank) {
    b.how = "bound by the launcher";
  } else if (std::vector<int> cpus = cpus_for_rank(allowed, index, sharing, per_rank);
             cpus.empty()) {
    b.how = "not pinned: " + std::to_string(sharing) + " ranks of " + std::to_string(per_rank) +
            " core" + (per_rank == 1 ? "" : "s") + " share " + std::to_string(allowed.size()) +
            " CPUs";
  } else if (const std::string err = pin_process(cpus); !err.empty()) {
    b.how = "not pinned: " + err;
  } else {
    b.cpus = cpus;
    b.how = "pinned by ParaLab";
    pinned = true;
  }
  if (pinned && b.how != "pinned by ParaLab") {  // an earlier run's pinning undone
    pinned = false;
    if (const std::string err = pin_process(mine); !err.empty())
      throw Error("cpu binding: restoring the process's CPUs: " + err);
  }
#else
  (void)per_rank;
  (void)enabled;
  b.how = "not pinned (no MPI)";
#endif
  return b;
}

}  // namespace paralab
