#include "experiments/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <new>
#include <optional>
#include <set>
#include <thread>

#include "core/device.h"
#include "core/error.h"
#include "core/model.h"
#include "core/ops.h"
#include "core/rng.h"
#include "experiments/cpu_binding.h"
#include "experiments/results.h"
#include "strategies/collectives/mpi_transport.h"
#include "strategies/strategy.h"

namespace paralab {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The shuffle stream is separate from the initialisation stream (Rng(seed)), so changing the
// number of epochs or the batch size never changes the initial weights.
constexpr uint64_t kShuffleStream = 0x53485546464c45ULL;  // "SHUFFLE"

const char* const kRankFields[] = {"compute_ms",   "communication_ms", "exposed_communication_ms",
                                   "optimizer_ms", "idle_ms",          "total_ms",
                                   "bytes_sent",   "samples"};

// Rank fields present only where measured (RankTimes::receives > 0).
const char* const kSplitFields[] = {"communication_wait_ms", "communication_move_ms", "receives"};

json rank_json(const RankTimes& r) {
  // idle: waiting for the slowest peer at the closing barrier, and everything not measured.
  const double idle =
      std::max(0.0, r.total_ms - r.compute_ms - r.exposed_communication_ms - r.optimizer_ms);
  json j = {{"compute_ms", r.compute_ms},
            {"communication_ms", r.communication_ms},
            {"exposed_communication_ms", r.exposed_communication_ms},
            {"optimizer_ms", r.optimizer_ms},
            {"idle_ms", idle},
            {"total_ms", r.total_ms},
            {"bytes_sent", r.bytes_sent},
            {"samples", r.samples}};
  if (r.receives > 0) {
    j["communication_wait_ms"] = r.wait_ms;
    j["communication_move_ms"] = r.move_ms;
    j["receives"] = r.receives;
  }
  return j;
}

json iteration_json(int64_t epoch, int64_t iteration, float lr, const StepResult& s) {
  json it = {{"epoch", epoch},
             {"iteration", iteration},
             {"samples", s.samples},
             {"lr", lr},
             {"forward_ms", s.times.forward_ms},
             {"backward_ms", s.times.backward_ms},
             {"communication_ms", s.times.communication_ms},
             {"optimizer_ms", s.times.optimizer_ms},
             {"total_ms", s.times.total_ms}};
  if (!s.ranks.empty()) {
    json devices = json::array();
    for (const RankTimes& r : s.ranks) devices.push_back(rank_json(r));
    it["devices"] = std::move(devices);
  }
  if (!s.detail.empty()) it["detail"] = s.detail;
  return it;
}

// Per device: the mean of each rank field over the timed iterations that recorded their devices
// (all of them, but for steps read once per epoch, of which only the last of each epoch does);
// where some of those were graph replays (detail.cuda_graph_replay 1), over the replays only, so
// that the eager steps among them (an epoch's first, after evaluation; its shorter last batch),
// which a run read once has as many of as replays, do not set the means of a graphed run; null
// where none recorded devices, or where they list different numbers of devices.
json per_device_means(const json& all) {
  const auto replayed = [](const json& it) {
    const auto d = it.find("detail");
    return d != it.end() && d->is_object() && d->value("cuda_graph_replay", 0) == 1;
  };
  bool any_replay = false;
  for (const auto& it : all) any_replay = any_replay || (it.contains("devices") && replayed(it));
  std::vector<const json*> with;
  for (const auto& it : all)
    if (it.contains("devices") && (!any_replay || replayed(it))) with.push_back(&it["devices"]);
  if (with.empty()) return nullptr;
  const std::size_t k = with[0]->size();
  for (const json* d : with)
    if (d->size() != k) return nullptr;
  json means = json::array();
  for (std::size_t r = 0; r < k; ++r) {
    json m;
    for (const char* f : kRankFields) {
      double sum = 0;
      for (const json* d : with) sum += (*d)[r][f].get<double>();
      m[f] = sum / static_cast<double>(with.size());
    }
    for (const char* f : kSplitFields) {
      double sum = 0;
      bool everywhere = true;
      for (const json* devices : with) {
        const json& d = (*devices)[r];
        if (!d.contains(f)) {
          everywhere = false;
          break;
        }
        sum += d[f].get<double>();
      }
      if (everywhere) m[f] = sum / static_cast<double>(with.size());
    }
    means.push_back(std::move(m));
  }
  return means;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// What this machine cannot give a run: its backend, or under mpirun with CUDA a GPU for each rank
// of this node; "" when it can. Under mpirun the ranks agree (the lowest rank's reason, on every
// rank): a rank that skipped alone would leave its peers waiting in the run's first collective.
std::string unavailable_here(const std::string& backend, const RunContext& ctx) {
  std::string why = backend_unavailable(backend);
  if (!why.empty())
    why = backend + ": " + why;
  else if (ctx.mpi && backend == "cuda")
    why = gpu_per_rank_shortfall(ctx.local_size, usable_gpu_count());
#if PARALAB_HAVE_MPI
  if (ctx.mpi) why = MpiWorld::get().first_reason(why);
#endif
  return why;
}

}  // namespace

json timing_json(const json& iterations, int64_t warmup) {
  std::vector<double> totals;
  double ms = 0, samples = 0;
  for (const auto& it : iterations) {
    totals.push_back(it["total_ms"].get<double>());
    ms += it["total_ms"].get<double>();
    samples += it["samples"].get<double>();
  }
  json t = {{"timed_iterations", totals.size()}, {"warmup_iterations", warmup}};
  if (totals.empty()) {
    for (const char* k : {"median_iteration_ms", "p10_iteration_ms", "p90_iteration_ms",
                          "mean_iteration_ms", "samples_per_s", "per_device"})
      t[k] = nullptr;
    return t;
  }
  t["median_iteration_ms"] = percentile(totals, 50);
  t["p10_iteration_ms"] = percentile(totals, 10);
  t["p90_iteration_ms"] = percentile(totals, 90);
  t["mean_iteration_ms"] = ms / static_cast<double>(totals.size());
  t["samples_per_s"] = samples / (ms / 1000.0);
  t["per_device"] = per_device_means(iterations);
  // Strategy-specific per-iteration figures: their means.
  if (iterations[0].contains("detail")) {
    json means = json::object();
    // The figures every iteration has as numbers.
    for (const auto& item : iterations[0]["detail"].items()) {
      const std::string key = item.key();  // a name the lambda can take (not a binding)
      const bool everywhere =
          std::all_of(iterations.begin(), iterations.end(), [&](const json& it) {
            return it.contains("detail") && it["detail"].contains(key) &&
                   it["detail"][key].is_number();
          });
      if (!everywhere) continue;
      double sum = 0;
      for (const auto& it : iterations) sum += it["detail"][key].get<double>();
      means[key] = sum / static_cast<double>(iterations.size());
    }
    t["detail"] = std::move(means);
  }
  return t;
}

int64_t global_batch(const RunSpec& run) {
  const TrainingConfig& t = run.training;
  return run.batch_scaling == "weak" ? t.batch_size * run.devices : t.batch_size;
}

int64_t iterations_per_epoch(const RunSpec& run, int64_t train_examples) {
  const int64_t global = global_batch(run);
  const int64_t full = (train_examples + global - 1) / global;
  const auto& cap = run.training.max_iterations_per_epoch;
  return cap ? std::min(full, *cap) : full;
}

std::vector<int64_t> minibatch_sizes(const RunSpec& run, int64_t train_examples) {
  const int64_t global = global_batch(run);
  std::vector<int64_t> sizes = {std::min(global, train_examples)};
  const int64_t full = (train_examples + global - 1) / global;
  if (iterations_per_epoch(run, train_examples) == full && train_examples % global != 0 && full > 1)
    sizes.push_back(train_examples % global);
  return sizes;
}

void check_plans(const Descriptor& d, int64_t train_examples) {
  const std::shared_ptr<const Model> model = make_model(d.model, "model");
  for (const RunSpec& run : d.runs) {
    try {
      make_strategy(run.strategy, run.options, run.path)
          ->check_plan(*model, run.devices, minibatch_sizes(run, train_examples));
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.starts_with(run.path + ".")) throw;  // it names the run's key already
      throw Error(run.path + " (" + run.label + "): " + what);
    }
  }
}

int stop_signal(const RunContext& ctx) {
  const int mine = ctx.stop ? ctx.stop->load() : 0;
#if PARALAB_HAVE_MPI
  if (ctx.mpi) {
    // The largest signal number any rank got (SIGTERM over SIGINT): one collective per check.
    return static_cast<int>(MpiWorld::get().max(static_cast<double>(mine)));
  }
#endif
  return mine;
}

// Under MPI, every rank's devices on rank 0, each with its rank and host (elsewhere, and in one
// process, the list as given).
json gather_devices(const json& local, const RunContext& ctx) {
#if PARALAB_HAVE_MPI
  if (ctx.mpi) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    json mine = local;
    for (json& d : mine) {
      d["rank"] = ctx.rank;
      d["host"] = host;
    }
    json all = json::array();
    for (const std::string& text : MpiWorld::get().gather(mine.dump()))
      for (json& d : json::parse(text)) all.push_back(std::move(d));
    return ctx.rank == 0 ? all : local;
  }
#endif
  (void)ctx;
  return local;
}

std::string virtual_placement(const json& device_list) {
  int count = 0;
  std::set<int64_t> gpus;
  for (const json& d : device_list)
    if (d.is_object() && d.value("virtual", false)) {
      ++count;
      if (d.contains("gpu") && d["gpu"].is_number_integer()) gpus.insert(d["gpu"].get<int64_t>());
    }
  if (count == 0) return "";
  const std::size_t g = gpus.size();
  return std::to_string(count) + " virtual device" + (count == 1 ? "" : "s") + " on " +
         std::to_string(g) + " GPU" + (g == 1 ? "" : "s");
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

json run_training(const RunSpec& run, const RunContext& ctx) {
  const TrainingConfig& tc = run.training;
  const Descriptor& d = *ctx.descriptor;
  const Dataset& train = ctx.data->train;
  const Dataset& test = ctx.data->test;
  // A device list ("cuda:0*4") names CUDA GPUs whatever the descriptor's backend ("auto").
  const std::string backend = run.gpus.empty() ? resolve_backend(d.backend) : "cuda";

  const int64_t global = global_batch(run);
  const double growth = static_cast<double>(global) / static_cast<double>(tc.batch_size);
  const double lr_target = run.lr_scaling == "linear" ? tc.lr * growth
                           : run.lr_scaling == "sqrt" ? tc.lr * std::sqrt(growth)
                                                      : tc.lr;
  // Goyal et al.'s gradual warm-up: from lr to the scaled lr linearly over the first W steps.
  auto lr_at = [&](int64_t step) {
    const int64_t w = run.lr_warmup_iterations;
    if (w == 0 || step >= w) return static_cast<float>(lr_target);
    return static_cast<float>(tc.lr + (lr_target - tc.lr) * static_cast<double>(step + 1) /
                                          static_cast<double>(w));
  };
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t needed = int64_t{run.devices} * tc.threads_per_device;
  const bool oversubscribed = backend == "cpu" && needed > cores;

  json result;
  result["label"] = run.label;
  result["run_spec"] = run.expanded;
  // Built per run (cheap: a description): the descriptor checked it already.
  const std::shared_ptr<const Model> model = make_model(d.model, "model");
  json config = {{"strategy", run.strategy},
                 {"backend", backend},
                 {"devices", run.devices},
                 {"global_batch", global},
                 {"per_device_batch", global / run.devices},
                 {"batch_scaling", run.batch_scaling},
                 {"lr", tc.lr},
                 {"lr_scaling", run.lr_scaling},
                 {"lr_scaled", lr_target},
                 {"lr_warmup_iterations", run.lr_warmup_iterations},
                 {"seed", tc.seed},
                 {"epochs", tc.epochs},
                 {"max_iterations_per_epoch",
                  tc.max_iterations_per_epoch ? json(*tc.max_iterations_per_epoch) : json(nullptr)},
                 {"warmup_iterations", tc.warmup_iterations},
                 {"threads_per_device", tc.threads_per_device},
                 {"eval_batch_size", tc.eval_batch_size},
                 {"oversubscribed", oversubscribed},
                 {"sweep", run.sweep_point},
                 {"train_examples", train.count},
                 {"test_examples", test.count},
                 {"model", model->describe()}};
  json iterations = json::array(), warmup = json::array(), epochs = json::array();
  std::string status = "ok", reason;
  const std::string prefix =
      "[run " + std::to_string(ctx.index + 1) + "/" + std::to_string(ctx.total) + "] " + run.label;

  // Under mpirun a run's group is the world, one rank per process, CPU ranks, and strategies
  // written per rank (Strategy::mpi_unsupported).
  std::string mpi_why_not;
  if (ctx.mpi) {
    config["launcher"] = "mpi";
    if (run.devices != ctx.world)
      mpi_why_not = "under mpirun the group is the world's " + std::to_string(ctx.world) +
                    " processes; this run asks for " + std::to_string(run.devices) + " device" +
                    (run.devices == 1 ? "" : "s");
    else if (backend != "cpu" && backend != "cuda")
      mpi_why_not = backend + " ranks under mpirun: CPU or CUDA only";
    else if (const std::string why =
                 make_strategy(run.strategy, run.options, run.path)->mpi_unsupported();
             !why.empty())
      mpi_why_not = run.strategy + " " + why;
  }
  // Runs the machine cannot provide are skipped with the reason, not failed.
  if (!mpi_why_not.empty()) {
    status = "skipped";
    reason = mpi_why_not;
    ctx.progress->line(prefix + ": skipped: " + reason);
  } else if (const std::string missing = unavailable_here(backend, ctx); !missing.empty()) {
    status = "skipped";
    reason = missing;
    ctx.progress->line(prefix + ": skipped: " + reason);
  } else if (oversubscribed && !run.allow_oversubscription && !ctx.mpi) {
    status = "skipped";
    reason = "needs " + std::to_string(needed) + " cores (" + std::to_string(run.devices) +
             " devices x " + std::to_string(tc.threads_per_device) +
             " threads), this machine has " + std::to_string(cores) +
             " (set allow_oversubscription to run it anyway)";
    ctx.progress->line(prefix + ": skipped: " + reason);
  } else
    try {
      // Tests fail a run here, as an error inside a library would (tests/cli_test.py, FailedRun):
      // every input a run could fail on is checked before the first run (check_plans).
      if (const char* fault = std::getenv("PARALAB_TEST_RUN_FAULT"); fault && run.label == fault)
        throw Error("PARALAB_TEST_RUN_FAULT: a fault injected into run '" + run.label + "'");
      if (oversubscribed && !ctx.quiet)
        std::fprintf(stderr,
                     "bench_runner: warning: %s: %lld device threads on %d cores; its times "
                     "measure time-sharing, not parallelism\n",
                     run.label.c_str(), static_cast<long long>(needed), cores);
      // Devices first: the strategy's tensors live on them and must be released before them.
      DeviceOptions device_options;
      device_options.threads_per_device = tc.threads_per_device;
      device_options.virtual_devices = d.virtual_devices;
      device_options.tf32 = d.tf32;
      device_options.kernels = d.kernels;
      device_options.green_contexts = d.green_contexts;
      device_options.gpus = run.gpus;
      // Under MPI this process makes its own rank's device only; a GPU rank takes the GPU of its
      // node-local rank (as torchrun and llm.c do).
      if (ctx.mpi && backend == "cuda") device_options.gpus = {ctx.local_rank};
      // CPU ranks under MPI: each on cores of its own (threads_per_device of them) where the
      // launcher has not bound them so already; recorded with the rank's device.
      std::optional<CpuBinding> binding;
      if (ctx.mpi && backend == "cpu") binding = bind_rank_to_cores(tc.threads_per_device, ctx.pin);
      auto devices = make_devices(backend, ctx.mpi ? 1 : run.devices, device_options);
      auto strategy = make_strategy(run.strategy, run.options, run.path);
      config["options"] = strategy->options();
      json device_info = json::array();
      std::vector<Device*> group;
      for (auto& dev : devices) {
        group.push_back(dev.get());
        device_info.push_back(dev->describe());
        if (binding) {
          device_info.back()["cpus"] = binding->cpus;
          device_info.back()["binding"] = binding->how;
        }
      }
      config["device_list"] = gather_devices(device_info, ctx);
      // More devices than GPUs: say so wherever the run is named (table, results, plots).
      if (const std::string placement = virtual_placement(device_info); !placement.empty()) {
        config["placement"] = placement;
        result["label"] = run.label + " [virtual]";
      }

      StrategySetup setup;
      setup.devices = group;
      setup.train = &train;
      setup.test = &test;
      setup.model = model;
      setup.initial_parameters = model->initial_parameters(tc.seed);
      setup.seed = tc.seed;
      setup.eval_batch = tc.eval_batch_size;
      setup.train_batch = global;
      setup.mpi = ctx.mpi;
      setup.communication_split = d.communication_split.value_or(
          std::none_of(group.begin(), group.end(), [](Device* dev) { return dev->queues_work(); }));
      strategy->setup(setup);
      config["options"] = strategy->options();  // as setup() resolved them ("auto" chunks)

      Rng shuffle(tc.seed ^ kShuffleStream);
      const int64_t per_epoch = iterations_per_epoch(run, train.count);
      // Every minibatch size this run will use, checked before the first step.
      for (const int64_t count : minibatch_sizes(run, train.count)) strategy->check_batch(count);
      const int64_t total_iters = per_epoch * tc.epochs;
      int64_t done = 0;
      double timed_seconds = 0;  // for the ETA
      const auto run_start = Clock::now();
      int signal = 0;
      const auto stopped = [&] { return (signal = stop_signal(ctx)) != 0; };
      const auto interrupt = [&](int64_t epoch, int64_t iterations_done) {
        status = "interrupted";
        reason = "interrupted by " + signal_name(signal) + " in epoch " + std::to_string(epoch) +
                 " after " + std::to_string(iterations_done) + " iteration" +
                 (iterations_done == 1 ? "" : "s") + "; " + std::to_string(epoch - 1) + " epoch" +
                 (epoch == 2 ? "" : "s") + " completed";
        result["interrupted_at"] = {{"epoch", epoch}, {"iteration", iterations_done}};
        ctx.progress->line(prefix + ": " + reason);
      };

      for (int64_t epoch = 1; epoch <= tc.epochs && status == "ok"; ++epoch) {
        const std::vector<int32_t> order = random_permutation(train.count, shuffle);
        strategy->begin_epoch(order);
        double loss_sum = 0;
        int64_t correct = 0, samples = 0;
        const auto epoch_start = Clock::now();
        const int64_t epoch_first = done;  // steps before this epoch
        // A step's figures, recorded in step order; false once the loss is not finite.
        const auto take = [&](const StepResult& s, int64_t it, float lr) {
          if (!std::isfinite(s.loss_sum)) {
            status = "diverged";
            reason = "loss became " + std::string(std::isnan(s.loss_sum) ? "NaN" : "Inf") +
                     " at epoch " + std::to_string(epoch) + ", iteration " + std::to_string(it + 1);
            result["diverged_at"] = {{"epoch", epoch}, {"iteration", it + 1}};
            return false;
          }
          loss_sum += s.loss_sum;
          correct += s.correct;
          samples += s.samples;
          const int64_t step_number = epoch_first + it + 1;  // 1-based over the run
          const bool is_warmup = step_number <= tc.warmup_iterations;
          (is_warmup ? warmup : iterations).push_back(iteration_json(epoch, it + 1, lr, s));
          timed_seconds += s.times.total_ms / 1000.0;
          return true;
        };
        // Steps the strategy queued without their figures (StepResult::pending), read once.
        std::vector<std::pair<int64_t, float>> queued;  // iteration, lr
        const auto collect = [&] {
          const std::vector<StepResult> results = strategy->collect();
          PARALAB_REQUIRE(results.size() == queued.size(),
                          "strategy returned " + std::to_string(results.size()) +
                              " queued steps' results, expected " + std::to_string(queued.size()));
          for (std::size_t i = 0; i < results.size(); ++i)
            if (!take(results[i], queued[i].first, queued[i].second)) break;
          queued.clear();
        };
        for (int64_t it = 0; it < per_epoch; ++it) {
          if (stopped()) {
            collect();
            if (status == "ok") interrupt(epoch, it);
            break;
          }
          const int64_t offset = it * global;
          const int64_t count = std::min(global, train.count - offset);
          const float lr = lr_at(done);
          // Queued launches are read before a step of another size (an epoch's last): the
          // strategies run it eagerly, and their graph's marks, which hold the last launch's
          // per-device phases, go with it. A queued step that diverged ends the run there.
          if (!queued.empty() && count != global) {
            collect();
            if (status != "ok") break;
          }
          const StepResult s = strategy->train_step(offset, count, lr);
          ++done;
          if (s.pending) {
            queued.emplace_back(it, lr);
            if (ctx.progress->enabled()) {
              // Queued, not measured yet: the ETA from the run's wall clock so far.
              const double per_iter = seconds_since(run_start) / static_cast<double>(done);
              ctx.progress->status(
                  prefix + " | epoch " + std::to_string(epoch) + "/" + std::to_string(tc.epochs) +
                  " | iter " + std::to_string(it + 1) + "/" + std::to_string(per_epoch) +
                  " queued | ETA " +
                  format_duration(per_iter * static_cast<double>(total_iters - done)));
            }
            continue;
          }
          if (!queued.empty()) collect();  // in step order
          if (status != "ok" || !take(s, it, lr)) break;
          if (ctx.progress->enabled()) {
            const double per_iter = timed_seconds / static_cast<double>(done);
            ctx.progress->status(
                prefix + " | epoch " + std::to_string(epoch) + "/" + std::to_string(tc.epochs) +
                " | iter " + std::to_string(it + 1) + "/" + std::to_string(per_epoch) + " | loss " +
                fixed(s.loss_sum / static_cast<double>(s.samples), 4) + " | " +
                fixed(static_cast<double>(s.samples) / (s.times.total_ms / 1000.0), 0) +
                " img/s | ETA " +
                format_duration(per_iter * static_cast<double>(total_iters - done)));
          }
        }
        if (!queued.empty()) collect();
        const double train_seconds = seconds_since(epoch_start);
        if (status == "ok" && stopped()) interrupt(epoch, per_epoch);  // before its evaluation
        if (status != "ok") break;
        const auto eval_start = Clock::now();
        const EvalResult e = strategy->evaluate();
        const double eval_seconds = seconds_since(eval_start);
        const double n = static_cast<double>(samples);
        json ep = {{"epoch", epoch},
                   {"iterations", per_epoch},
                   {"samples", samples},
                   {"train_loss", loss_sum / n},
                   {"train_acc", static_cast<double>(correct) / n},
                   {"test_loss", e.loss_sum / static_cast<double>(e.samples)},
                   {"test_acc", static_cast<double>(e.correct) / static_cast<double>(e.samples)},
                   {"seconds", train_seconds},
                   {"eval_seconds", eval_seconds}};
        ctx.progress->line(
            prefix + " | epoch " + std::to_string(epoch) + "/" + std::to_string(tc.epochs) +
            ": train loss " + fixed(ep["train_loss"].get<double>(), 4) + ", train acc " +
            fixed(ep["train_acc"].get<double>(), 3) + ", test acc " +
            fixed(ep["test_acc"].get<double>(), 3) + ", " + fixed(train_seconds, 1) + " s");
        epochs.push_back(std::move(ep));
        if (!std::isfinite(e.loss_sum)) {
          status = "diverged";
          reason = "test loss became non-finite after epoch " + std::to_string(epoch);
          result["diverged_at"] = {{"epoch", epoch}, {"iteration", per_epoch}};
        }
      }
      result["wall_seconds"] = seconds_since(run_start);
      // The final parameters' bits, to compare runs (launchers, machines, repeats) exactly.
      // Under mpirun a collective: every rank contributes its part of a split model.
      result["parameters_digest"] = parameters_digest(strategy->parameters());
      // The devices as training left them (allocator peaks, events pooled), and what each
      // device's ops chose while training (e.g. cuDNN's algorithm per shape).
      json after = json::array();
      for (std::size_t i = 0; i < devices.size(); ++i) {
        json info = devices[i]->describe();
        if (json ops = devices[i]->ops().describe(); !ops.is_null()) info["ops"] = std::move(ops);
        if (binding) {
          info["cpus"] = binding->cpus;
          info["binding"] = binding->how;
        }
        after.push_back(std::move(info));
      }
      config["device_list"] = gather_devices(after, ctx);
      if (json report = strategy->report(); !report.is_null())
        result["strategy_report"] = std::move(report);
    } catch (const Unavailable& e) {  // found only once the devices exist, e.g. nccl on one GPU
      status = "skipped";
      reason = e.what();
      ctx.progress->line(prefix + ": skipped: " + reason);
    } catch (const std::exception& e) {  // Error, bad_alloc & co: the next run still goes on
      status = "failed";
      reason = dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what();
      ctx.progress->line(prefix + ": failed: " + reason);
#if PARALAB_HAVE_MPI
      // Between processes a rank that fails alone leaves its peers waiting in a collective
      // forever: end them all (rank 0's results file already holds every finished run).
      if (ctx.mpi) {
        std::fprintf(stderr, "bench_runner: rank %d: %s: failed: %s; ending every rank\n", ctx.rank,
                     run.label.c_str(), one_line(reason).c_str());
        MpiWorld::get().abort(3);
      }
#endif
    }

  result["config"] = std::move(config);
  result["status"] = status;
  result["reason"] = reason.empty() ? json(nullptr) : json(reason);
  result["timing"] = timing_json(iterations, static_cast<int64_t>(warmup.size()));
  result["iterations"] = std::move(iterations);
  result["warmup"] = std::move(warmup);
  result["epochs"] = std::move(epochs);
  return result;
}

}  // namespace paralab
