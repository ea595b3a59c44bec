// bench_runner: runs an experiment descriptor and writes one results JSON.
//
//   bench_runner DESCRIPTOR.json [--out PATH] [--set key.path=value ...] [--data-dir DIR]
//                [--quiet] [--plot] [--resume EARLIER_RESULTS.json] [--no-pin]
//
// Exit status: 0 when the runs ended ok, diverged or skipped (not all skipped); 1 on bad input
// (one line on stderr, no results file); 3 when a run failed (its reason is in the results
// file); 4 when nothing could run (every run skipped); 5 when --plot could not draw the plots;
// 128 + the signal (130, 143) when SIGINT or SIGTERM stopped it. The results file exists from
// before the first run and holds every finished run at every moment (ResultsFile).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fashion_mnist.h"
#include "core/lenet.h"
#include "experiments/descriptor.h"
#include "experiments/progress.h"
#include "experiments/results.h"
#include "experiments/subprocess.h"
#include "experiments/trainer.h"
#include "strategies/collectives/mpi_transport.h"

namespace {

using nlohmann::json;

// The first SIGINT/SIGTERM's number: the run in progress stops after its iteration, the results
// file is written with it marked interrupted, and bench_runner exits 128 + the number. A second
// signal exits at once, removing the temporary file of a write in progress: the results file
// then holds the runs written before.
std::atomic<int> g_stop{0};
// Whether a signal stops the runs (above) or, before the results file exists and after its last
// version is written, takes its default action (the process ends by that signal).
std::atomic<bool> g_signals_stop_runs{false};
// This process's rank under mpirun (0 otherwise): rank 0 alone speaks for the group.
std::atomic<int> g_rank{0};

// An error every rank of the group met, agreed (agreed() below): each rank ends with it, and
// rank 0 alone prints it.
struct AgreedError : paralab::Error {
  using paralab::Error::Error;
};

// Runs `step`; under mpirun every rank then learns whether any rank's step failed, and all
// throw the first failing rank's error ("rank R: ..." unless R is 0). A rank that failed alone
// (a data directory its node lacks, an --out that exists where rank 0 writes) used to end while
// its peers waited for it in their first collective, forever.
void agreed(bool mpi, const std::function<void()>& step) {
  std::string why;
  try {
    step();
  } catch (const paralab::Error& e) {
    if (!mpi) throw;
    why = e.what();
  }
#if PARALAB_HAVE_MPI
  if (mpi) {
    why = paralab::MpiWorld::get().first_reason(why);
    if (why.rfind("rank 0: ", 0) == 0) why.erase(0, 8);
    if (!why.empty()) throw AgreedError(why);
  }
#endif
}

// SIGINT and SIGTERM are never handled on a thread that computes: every thread blocks them (the
// mask is set in main() before any thread starts, and each thread inherits it), and one thread
// of their own takes them with sigwait(). A handler would run on whatever stack the interrupted
// thread's stack pointer names, and oneDNN's JIT f32 GEMM kernels (behind its gemm-based
// primitives; reported on 3.11.1 and older, fixed by uxlfoundation/oneDNN#4855; Debian 12 ships
// 2.6.3) point it into a heap workspace while they run (uxlfoundation/oneDNN#4845): the signal
// frame was written over heap memory. Seen under AddressSanitizer as a heap-buffer-overflow in
// the handler, its interrupted frame in JIT code, in 2 of about 290 runs of fault_test.py's
// two-signal case on a 2-core AMD EPYC VM.
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// The thread's name, "stop-signals", is what tests/fault_test.py looks for: while it waits in
// sigwait() the kernel shows it as the one thread not blocking the two signals.
[[noreturn]] void take_stop_signals() {
  pthread_setname_np(pthread_self(), "stop-signals");
  const sigset_t set = stop_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (!g_signals_stop_runs.load()) {
      // As if bench_runner had no use for the signal: its default action ends the process.
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      ::signal(sig, SIG_DFL);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::raise(sig);
      _exit(128 + sig);
    }
    if (g_stop.exchange(sig) != 0) {
      paralab::remove_temporary_results_file();  // and no update() renames one after it
      _exit(128 + sig);
    }
    static const char msg[] =
        "\nbench_runner: stopping after the current iteration to write the results (signal again "
        "to stop at once)\n";
    if (g_rank.load() == 0) {  // under mpirun every rank gets the signal: rank 0 says it
      const ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
    }
  }
}

// In main(), before any other thread exists.
void start_signal_thread() {
  const sigset_t set = stop_signals();
  if (const int err = pthread_sigmask(SIG_BLOCK, &set, nullptr); err != 0)
    throw paralab::Error(std::string("cannot block SIGINT and SIGTERM: ") + std::strerror(err));
  std::thread(take_stop_signals).detach();
}

// About how large the results file grows: measured on the reference files, ~260 bytes per
// iteration on one device and ~300 more per device beyond it, plus a few KiB per run.
uint64_t expected_results_bytes(const paralab::Descriptor& d, const paralab::FashionMnist& data) {
  uint64_t bytes = 64 << 10;
  for (const auto& run : d.runs) {
    const auto iterations =
        static_cast<uint64_t>(paralab::iterations_per_epoch(run, data.train.count)) *
        static_cast<uint64_t>(run.training.epochs);
    bytes += 8192 + iterations * (260 + 300 * static_cast<uint64_t>(run.devices - 1));
  }
  return bytes;
}

std::string cell(const json& v, const char* fmt) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v.get<double>());
  return buf;
}

// kept: the runs (indices into runs) taken from --resume's file, not run here.
void print_summary(const json& runs, const std::set<std::size_t>& kept, const std::string& from) {
  int width = 3;
  for (const auto& r : runs)
    width = std::max(width, static_cast<int>(r["label"].get<std::string>().size()));
  std::printf("\n%-*s %-9s %6s %9s %9s %11s %10s %8s\n", width, "run", "status", "epochs",
              "test_acc", "best_acc", "median_ms", "images/s", "speedup");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const json& r = runs[i];
    const json& eps = r["epochs"];
    json last = eps.empty() ? json(nullptr) : eps.back()["test_acc"];
    double best = -1;
    for (const auto& e : eps) best = std::max(best, e["test_acc"].get<double>());
    std::printf(
        "%-*s %-9s %6zu %9s %9s %11s %10s %8s\n", width, r["label"].get<std::string>().c_str(),
        r["status"].get<std::string>().c_str(), eps.size(), cell(last, "%.4f").c_str(),
        cell(best >= 0 ? json(best) : json(nullptr), "%.4f").c_str(),
        cell(r["timing"]["median_iteration_ms"], "%.2f").c_str(),
        cell(r["timing"]["samples_per_s"], "%.0f").c_str(),
        cell(r.contains("scaling") ? r["scaling"]["speedup"] : json(nullptr), "%.2f").c_str());
    if (kept.contains(i)) std::printf("    kept from %s (not run again)\n", from.c_str());
    if (!r["reason"].is_null()) std::printf("    %s\n", r["reason"].get<std::string>().c_str());
    if (r["status"] == "ok" && r["timing"]["timed_iterations"] == 0)
      std::printf(
          "    no step time: all %s iterations were warm-up (training.warmup_iterations %s)\n",
          r["timing"]["warmup_iterations"].dump().c_str(),
          r["config"]["warmup_iterations"].dump().c_str());
  }
}

// A run whose every iteration is warm-up records accuracy but no step time (nor speedup): say
// so before it runs, where the descriptor can still be changed.
void note_untimed_runs(const paralab::Descriptor& d, const paralab::FashionMnist& data,
                       paralab::Progress& progress) {
  for (std::size_t i = 0; i < d.runs.size(); ++i) {
    const auto& run = d.runs[i];
    const int64_t steps =
        paralab::iterations_per_epoch(run, data.train.count) * run.training.epochs;
    if (steps > run.training.warmup_iterations) continue;
    progress.line("note: run " + std::to_string(i + 1) + " (" + run.label + "): all " +
                  std::to_string(steps) + " iterations are warm-up (training.warmup_iterations " +
                  std::to_string(run.training.warmup_iterations) +
                  "): it will record accuracy but no step time");
  }
}

// speedup = throughput / the throughput of the baseline: the nearest 1-device ok run of the same
// work (model, backend, batch scaling, and the same global batch under strong scaling or the
// same per-device batch under weak scaling), preferring the last one before this run (on a machine
// whose speed drifts, the run measured closest in time is the fair reference; descriptors
// interleave 1-device and k-device runs to use this), else the first one after it. efficiency =
// speedup / devices. Throughput (images/s) makes strong and weak scaling comparable: strong keeps
// the work per iteration fixed, weak grows it with the devices.
void add_scaling(json& runs) {
  // The baseline is single-device training (strategy single): a model-parallel strategy on one
  // device (layer_split with micro-batches: gradient accumulation) is not what speedup means.
  // Files without a single run fall back to any 1-device run.
  bool have_single = false;
  for (const json& r : runs) have_single = have_single || r["config"]["strategy"] == "single";
  auto is_baseline_for = [&](const json& b, const json& r) {
    const json& c = b["config"];
    return b["status"] == "ok" && c["devices"] == 1 && b["timing"]["samples_per_s"].is_number() &&
           (!have_single || c["strategy"] == "single") &&
           c["batch_scaling"] == r["config"]["batch_scaling"] &&
           c["backend"] == r["config"]["backend"] && c["model"] == r["config"]["model"] &&
           (c["batch_scaling"] == "weak" ? c["per_device_batch"] == r["config"]["per_device_batch"]
                                         : c["global_batch"] == r["config"]["global_batch"]);
  };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    json& r = runs[i];
    const json* base = nullptr;
    for (std::size_t j = i + 1; j-- > 0 && !base;)
      if (is_baseline_for(runs[j], r)) base = &runs[j];
    for (std::size_t j = i + 1; j < runs.size() && !base; ++j)
      if (is_baseline_for(runs[j], r)) base = &runs[j];
    json scaling = {{"baseline", nullptr}, {"speedup", nullptr}, {"efficiency", nullptr}};
    if (base && r["status"] == "ok" && r["timing"]["samples_per_s"].is_number()) {
      const double speedup = r["timing"]["samples_per_s"].get<double>() /
                             (*base)["timing"]["samples_per_s"].get<double>();
      scaling = {{"baseline", (*base)["label"]},
                 {"speedup", speedup},
                 {"efficiency", speedup / r["config"]["devices"].get<double>()}};
    }
    r["scaling"] = std::move(scaling);
  }
}

// A word for sh: single-quoted, with embedded quotes spliced in.
std::string shell_quote(const std::string& word) {
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The Python 3 that draws the plots: $PARALAB_PYTHON when set (the user's choice, no other),
// else the first of /usr/bin/python3 (Debian's, where python3-matplotlib installs) and python3
// on the PATH (on a GPU host often another one, with PyTorch but without matplotlib) that
// imports matplotlib. Empty when none does; `tried` lists what was tried.
std::string plotting_python(std::string& tried) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("PARALAB_PYTHON"); env && *env) {
    candidates.push_back(env);
  } else {
    candidates.push_back("/usr/bin/python3");
    candidates.push_back("python3");
  }
  for (const std::string& python : candidates) {
    tried += (tried.empty() ? "" : ", ") + python;
    const std::string probe = shell_quote(python) + " -c 'import matplotlib' > /dev/null 2>&1";
    if (paralab::run_shell(probe) == 0) return python;
  }
  return "";
}

// Runs plotting/plot_all.py on the results file with the first interpreter that has matplotlib.
// The results are already written; a plotting failure is reported on its own line and gives
// exit status 5.
bool draw_plots(const std::string& results, bool quiet) {
  const std::string script = PARALAB_SOURCE_DIR "/plotting/plot_all.py";
  if (!std::filesystem::exists(script)) {
    std::fprintf(stderr, "bench_runner: --plot: %s not found\n", script.c_str());
    return false;
  }
  std::string tried;
  const std::string python = plotting_python(tried);
  if (python.empty()) {
    std::fprintf(stderr,
                 "bench_runner: --plot: no Python 3 with matplotlib (tried %s): install "
                 "python3-matplotlib (Debian/Ubuntu) or set PARALAB_PYTHON to an interpreter that "
                 "has it; results are in %s\n",
                 tried.c_str(), results.c_str());
    return false;
  }
  const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " +
                          shell_quote(results) + (quiet ? " > /dev/null" : "");
  const int rc = paralab::run_shell(cmd);
  if (rc != 0) {
    std::fprintf(stderr, "bench_runner: --plot: plot_all.py failed (%s); results are in %s\n",
                 paralab::describe_status(rc).c_str(), results.c_str());
    return false;
  }
  return true;
}

int run(int argc, char** argv) {
  CLI::App app{"bench_runner: runs a ParaLab experiment descriptor and writes a results JSON"};
  std::string descriptor_file, out, data_dir;
  std::vector<std::string> sets;
  bool quiet = false, plot = false, no_pin = false;
  app.add_option("descriptor", descriptor_file, "experiment descriptor (JSON)")->required();
  app.add_flag("--plot", plot,
               "draw the plots (plotting/plot_all.py) beside the results file: <results>-plots/");
  app.add_option("--out", out, "results file (default results/<name>-<UTC time>.json)");
  app.add_option("--set", sets,
                 "override a descriptor key, e.g. --set training.epochs=2 --set runs.0.devices=2")
      ->allow_extra_args(false);  // one assignment per --set, so the descriptor may follow
  app.add_option("--data-dir", data_dir, "Fashion-MNIST directory (overrides dataset.dir)");
  std::string resume;
  app.add_option("--resume", resume,
                 "a results file of this descriptor: its ok runs are kept, the rest run; all go "
                 "to a new results file");
  app.add_flag("--quiet", quiet, "no progress and no summary table");
  app.add_flag("--no-pin", no_pin,
               "under mpirun: leave CPU ranks where the launcher put them (default: pin each to "
               "cores of its own, experiments/cpu_binding.h)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Bad command lines are bad input like any other: one line, exit status 1 (under mpirun
    // every rank meets it: rank 0 says it).
    if (paralab::launcher_rank() == 0)
      std::fprintf(stderr, "bench_runner: %s (see --help)\n", e.what());
    return 1;
  }
  // An empty value given (a shell variable left unset) is a mistake, not the option left out:
  // `--out ""` wrote to the default place, `--resume ""` resumed nothing.
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"--out", &out},
                                    {"--resume", &resume},
                                    {"--data-dir", &data_dir}})
    if (app.count(name) > 0 && value->empty()) {
      std::fprintf(stderr, "bench_runner: %s: an empty path (see --help)\n", name);
      return 1;
    }

  // Under mpirun every process is one rank of each run; rank 0 alone prints and writes results.
  const bool mpi = paralab::launched_by_mpi();
  int rank = 0, world = 1;
#if PARALAB_HAVE_MPI
  if (mpi) {
    rank = paralab::MpiWorld::get().rank();
    world = paralab::MpiWorld::get().size();
  }
#endif
  g_rank = rank;
  if (rank != 0) {
    quiet = true;
    plot = false;
  }
  const std::string utc = paralab::utc_now("%Y-%m-%dT%H:%M:%SZ");
  // The environment first: gathering the hosts is a collective, which no rank may miss by
  // failing before it.
  json environment = paralab::describe_environment(argc, argv, utc);
  environment["launcher"] = {{"name", mpi ? "mpi" : "threads"}};
#if PARALAB_HAVE_MPI
  if (mpi) {
    auto& w = paralab::MpiWorld::get();
    environment["launcher"]["world_size"] = world;
    environment["launcher"]["library"] = w.library();
    environment["launcher"]["hosts"] = w.gather(environment["hostname"]);
  }
#endif
  std::optional<paralab::Descriptor> loaded;
  std::optional<paralab::FashionMnist> loaded_data;
  std::vector<json> reusable;  // --resume: ok runs, each used once
  std::string path;            // rank 0's results file
  agreed(mpi, [&] {
    if (!out.empty()) paralab::check_utf8("--out", out);
    loaded.emplace(paralab::load_descriptor(
        descriptor_file, sets, data_dir.empty() ? std::nullopt : std::optional(data_dir)));
    const paralab::Descriptor& d = *loaded;
    if (!resume.empty()) {
      paralab::check_utf8("--resume", resume);
      const std::string data_dir_here =
          d.data_dir
              ? *d.data_dir
              : paralab::find_fashion_mnist_dir(paralab::fashion_mnist_search_dirs(std::nullopt));
      reusable = paralab::resumable_runs(paralab::read_text_file(resume, "--resume " + resume),
                                         resume, d, data_dir_here, environment);
    }
    if (rank == 0)
      path = paralab::choose_results_path(out.empty() ? std::nullopt : std::optional(out), d.name,
                                          paralab::utc_timestamp());
    loaded_data.emplace(
        paralab::load_fashion_mnist(d.data_dir, d.train_limit, d.test_limit, paralab::kImageSide));
    // What a strategy's setup would refuse (a batch not divisible by the devices, more stages
    // than layers, more devices than channels) is refused here, before the first run trains.
    try {
      paralab::check_plans(d, loaded_data->train.count);
    } catch (const paralab::Error& e) {
      throw paralab::Error(descriptor_file + ": " + e.what());
    }
  });
  const paralab::Descriptor& d = *loaded;
  const paralab::FashionMnist& data = *loaded_data;
#if PARALAB_HAVE_MPI
  // Every rank trains its part of each run from its own descriptor: ranks given another one (or
  // another --set) trained another experiment under rank 0's record of it.
  if (mpi) {
    json mine = d.resolved;
    if (mine.contains("dataset") && mine["dataset"].is_object()) mine["dataset"].erase("dir");
    mine["examples"] = {data.train.count, data.test.count};
    const std::string root = paralab::MpiWorld::get().broadcast(mine.dump());
    agreed(mpi, [&] {
      if (root != mine.dump())
        throw paralab::Error(
            "its descriptor (after --set and defaults, or its data) differs from rank 0's: "
            "under mpirun every rank runs rank 0's experiment");
    });
  }
#endif

  paralab::Progress progress(paralab::Progress::wanted(quiet));
  progress.line("data: " + data.dir + " (" + std::to_string(data.train.count) + " train, " +
                std::to_string(data.test.count) + " test)");
  note_untimed_runs(d, data, progress);
  json doc;
  doc["schema_version"] = paralab::kResultsSchemaVersion;
  doc["state"] = "running";
  doc["environment"] = std::move(environment);
  doc["descriptor"] = d.resolved;
  doc["dataset"] = {
      {"dir", data.dir}, {"train_examples", data.train.count}, {"test_examples", data.test.count}};
  doc["runs"] = json::array();
  if (!resume.empty()) doc["resumed_from"] = {{"path", resume}, {"runs_kept", 0}};
  // From here on a signal stops the run in progress and the file keeps every finished run.
  g_signals_stop_runs = true;
  std::optional<paralab::ResultsFile> file;
  agreed(mpi, [&] {
    if (rank == 0)
      file = paralab::ResultsFile::create(path, out.empty(), doc, expected_results_bytes(d, data));
  });
  if (file) progress.line("results: " + file->path() + " (rewritten after each run)");
  paralab::RunContext base{&d,    &data,  &progress, 0, static_cast<int>(d.runs.size()),
                           quiet, &g_stop};
  base.mpi = mpi;
  base.pin = !no_pin;
  base.rank = rank;
  base.world = world;
#if PARALAB_HAVE_MPI
  if (mpi) {
    base.local_rank = paralab::MpiWorld::get().local_rank();
    base.local_size = paralab::MpiWorld::get().local_size();
  }
#endif
  // --resume: run i's ok run in the earlier file, moved into this one; false when it has none.
  std::set<std::size_t> kept_runs;  // their places in doc["runs"]
  const auto keep = [&](std::size_t i) {
    const auto kept = std::find_if(reusable.begin(), reusable.end(), [&](const json& r) {
      return r["run_spec"] == d.runs[i].expanded;
    });
    if (kept == reusable.end()) return false;
    kept_runs.insert(doc["runs"].size());
    progress.line("[run " + std::to_string(i + 1) + "/" + std::to_string(d.runs.size()) + "] " +
                  d.runs[i].label + ": ok in " + resume + ", kept");
    doc["runs"].push_back(std::move(*kept));
    reusable.erase(kept);
    doc["resumed_from"]["runs_kept"] = doc["resumed_from"]["runs_kept"].get<int>() + 1;
    return true;
  };
  std::size_t next = 0;
  for (; next < d.runs.size() && paralab::stop_signal(base) == 0; ++next) {
    paralab::RunContext ctx = base;
    ctx.index = static_cast<int>(next);
    if (!keep(next)) doc["runs"].push_back(paralab::run_training(d.runs[next], ctx));
    add_scaling(doc["runs"]);
    paralab::note_runs(doc["environment"], doc["runs"]);
    if (file && next + 1 < d.runs.size()) file->update(doc);
  }
  const int stop = paralab::stop_signal(base);
  // Stopped by a signal: the later runs that the earlier file holds ok are finished runs too, so
  // the file keeps them, and a resume of this file loses nothing that one of that file would not.
  if (stop) {
    for (; next < d.runs.size(); ++next) keep(next);
    add_scaling(doc["runs"]);
    paralab::note_runs(doc["environment"], doc["runs"]);
  }
  doc["state"] = stop ? "interrupted" : "complete";
  if (!file) return stop ? 128 + stop : 0;  // another rank than 0 under mpirun: rank 0 reports
  file->update(doc);
  // The results are final: a signal now (while the plots are drawn, say) ends bench_runner as
  // its default action does.
  if (!stop) g_signals_stop_runs = false;
  // A signal taken after the last run ended, while this version was written, asked to stop as
  // well: the file is complete, and bench_runner ends here (no summary, no plots) with its
  // status, as it would had the signal come a moment later.
  if (const int late = g_stop.load(); !stop && late != 0) {
    std::fprintf(stderr, "bench_runner: %s after the last run: all %zu runs are in %s\n",
                 paralab::signal_name(late).c_str(), doc["runs"].size(), file->path().c_str());
    return 128 + late;
  }
  if (!quiet) {
    print_summary(doc["runs"], kept_runs, resume);
    std::printf("\nresults: %s\n", file->path().c_str());
    std::fflush(stdout);
  }
  if (stop) {
    std::fprintf(stderr, "bench_runner: interrupted by %s: %zu of %zu runs in %s\n",
                 paralab::signal_name(stop).c_str(), doc["runs"].size(), d.runs.size(),
                 file->path().c_str());
    return 128 + stop;
  }
  bool failed = false, any_ran = false;
  for (const json& r : doc["runs"]) {
    failed = failed || r["status"] == "failed";
    any_ran = any_ran || r["status"] != "skipped";
  }
  if (plot && any_ran && !draw_plots(file->path(), quiet)) return 5;
  if (failed) return 3;
  if (!any_ran) {
    std::fprintf(stderr, "bench_runner: nothing could run: every run was skipped (reasons in %s)\n",
                 file->path().c_str());
    return 4;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    start_signal_thread();
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "bench_runner: out of memory outside a run (reading the descriptor or "
                 "the data, or writing the results)\n");
    return 1;
  } catch (const AgreedError& e) {  // every rank met it: rank 0 says it
    std::fflush(stdout);
    if (g_rank.load() == 0)
      std::fprintf(stderr, "bench_runner: %s\n", paralab::one_line(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (g_rank.load() == 0 || !paralab::launched_by_mpi())
      std::fprintf(stderr, "bench_runner: %s\n", paralab::one_line(e.what()).c_str());
    else
      std::fprintf(stderr, "bench_runner: rank %d: %s\n", g_rank.load(),
                   paralab::one_line(e.what()).c_str());
#if PARALAB_HAVE_MPI
    // Under mpirun an error one rank met alone would leave the others waiting in a collective.
    if (paralab::launched_by_mpi()) paralab::MpiWorld::get().abort(1);
#endif
    return 1;
  }
}
