"""Fit the model's parameters from measurements, and predict measured runs held out of the fit.

Device kinds:
  cpu   one core of this project's 2-core Xeon VM. Compute: report/data/profile-cpu.json
        (experiments/model-profile.json: single steps at batch 32..512, per-layer profiles).
        Collectives: allreduce_bench's sweep on 2 devices (results/reference/cpu-2core-xeon/
        allreduce-sweep.json); its memcpy rows are the point-to-point hand-off.
  <gpu> virtual devices on one GPU of that model (h200, h100, ...: gpu_kind of the name CUDA
        reports), from the newest results/reference/<gpu>-<date>/ that holds a gpu-check.json and
        an allreduce_bench file (gpu_ref; for the H200 the first run, h200-2026-11-30, is
        H200_FIRST). Compute: the eager single step at batch 256 on the whole GPU for the level,
        the layer_split runs' profiling passes (per-layer forward+backward at batch 32 and 256 on
        SM shares of a half and a quarter) for the shape, in "effective batch" x = batch * SMs /
        the share's SMs (the counts the runs recorded). Collectives: allreduce-cuda-sweep.json
        (gpu-check.sh sweep) or allreduce-cuda.json (gpu-check.sh collectives). Rows timed as CUDA
        graphs (the collectives enqueued on the device, one graph per collective) are fitted as
        start + alpha * messages + beta * bytes + gamma * reduced per algorithm and k (start: a
        fixed cost per collective), at the piece size they were timed with; a file without them (the first H200 run: eager, every message a host
        hand-off) by the host-bound model.

Hold-out: a strategy run's own timing is never used. CPU runs are measured on a VM whose speed
drifts by +-20 % from one session to the next, so each results file's level comes from its own
`single` run nearest before it (the baseline results/README.md defines); single runs are
predicted from the profile alone.
"""
import dataclasses
import glob
import json
import os
import re
import statistics

import numpy as np

from . import nets, perf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "results", "reference")
CPU_REF = os.path.join(REFERENCE, "cpu-2core-xeon")
# The first H200 run (eager collectives over host hand-offs); tests that check what it measured
# read it by this name, whatever runs are committed after it.
H200_FIRST = os.path.join(REFERENCE, "h200-2026-11-30")
# allreduce_bench's files in a GPU run's directory, the one preferred first: gpu-check.sh's sweep part
# (every algorithm and size on 2, 4 and 8 devices) before its collectives part.
GPU_BENCH_FILES = ("allreduce-cuda-sweep.json", "allreduce-cuda.json")
# A GPU run's directory: <kind>-<date>[-more], kind from gpu_kind.
GPU_DIR = re.compile(r"^([a-z][a-z0-9]*)-(\d{4}-\d{2}-\d{2})")
# The SM count of a GPU whose runs recorded none (device_list[].sm_count): an H200's (every
# committed run records it).
H200_SMS = 132
GRAPH_CALIBRATION = "single gpu epoch"  # gpu-check.json's graphed single run: the graph factor
# ... and its graphed data_parallel run on one device: what running as a group adds to a step
GROUP_CALIBRATION = "data_parallel/nccl x1 (NCCL on one GPU)"
# ... the same with its launches queued and read once per epoch (read_back "epoch"): what a group
# step adds without the host's synchronisation and read-back per step, for the runs read so
GROUP_CALIBRATION_READ_ONCE = "data_parallel/nccl x1 read once per epoch (NCCL on one GPU)"
# ... and its channel_split runs at other batches than the predicted ones (labels starting so):
# per-device compute at 1/k of the channels on a 1/k SM share, channel_split's width efficiency.
WIDTH_CALIBRATION = "profile channel_split"
# Per-message host cost of a hand-off's CUDA call sequence with 1, 2, 4, 8 host threads, emulated
# standalone on the H200 of the first run (results/reference/h200-2026-11-30/FINDINGS.md); the
# host-bound model prices other GPUs' eager rows with it too.
H200_CONTENTION_US = (6.0, 36.0, 74.0, 156.0)


def load(path):
    with open(path) as f:
        return json.load(f)


# The errors a fit meets on a results file of the wrong kind or shape (a file of another
# descriptor, a truncated run): the command-line entry points say them in one line.
INPUT_ERRORS = (OSError, ValueError, KeyError, IndexError, TypeError)


def results_file_problem(path, kind="bench_runner"):
    """None when `path` is a readable JSON results file of that kind ('bench_runner': a "runs"
    list; 'allreduce_bench': a "benchmarks" list), else what is wrong, in a few words."""
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "a directory, not a results file"
    try:
        doc = load(path)
    except OSError as e:
        return "cannot read it (%s)" % e.strerror
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return "not JSON (%s)" % str(e).splitlines()[0][:80]
    if not isinstance(doc, dict):
        return "not a results file (its top level is not an object)"
    if kind == "bench_runner" and not isinstance(doc.get("runs"), list):
        return ("an allreduce_bench file, not bench_runner's results" if "benchmarks" in doc
                else "not a bench_runner results file (no runs)")
    if kind == "allreduce_bench" and not isinstance(doc.get("benchmarks"), list):
        return ("bench_runner's results, not an allreduce_bench file" if "runs" in doc
                else "not an allreduce_bench file (no benchmarks)")
    return None


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def run_kernels(config):
    """The CUDA kernel set a run's devices used (device_list[].ops.kernels): "cudnn", "fused",
    "mixed"; "cudnn" for runs recorded before there was a choice; None off CUDA."""
    if config.get("backend") != "cuda":
        return None
    devices = config.get("device_list") or [{}]
    return (devices[0].get("ops") or {}).get("kernels") or "cudnn"


# ---------------------------------------------------------------------------------------------
# allreduce_bench rows


def bench_rows(path, include_timeshared=False, graphs=False):
    """[(op, bytes, devices, ms)] for allreduce_bench's timed rows (medians when repeated)."""
    return [(op, n, k, median(v)) for (op, n, k), v in
            sorted(bench_samples(path, include_timeshared, graphs).items())]


def _bench_entries(d):
    """allreduce_bench's rows of a loaded file that stand for timings: the repetitions, or where
    it holds none (--benchmark_report_aggregates_only) the median aggregates."""
    has_iterations = any(b.get("run_type") != "aggregate" and not b.get("error_occurred") for b in d["benchmarks"]
                         if "bytes" in b)
    for b in d["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b.get("run_type") == "aggregate" and (has_iterations or b.get("aggregate_name") != "median"):
            continue
        yield b


def _explicit_chunk(b):
    """Whether a row was timed at a piece size named on the command line (allreduce_bench
    --chunk-bytes with several values names its rows .../chunk:N, N = -1 for the automatic one):
    another configuration than the default that strategies use, left out of every fit."""
    m = re.search(r"/chunk:(-?\d+)", b["name"])
    return bool(m) and int(m.group(1)) != -1


def bench_chunk(path, graphs=True, families=("allreduce/ring", "allreduce/tree")):
    """The piece size (bytes; 0: whole messages) that a file's rows of `families` (default: the
    ring and tree allreduces), of the kind `graphs` selects, were timed with: the one value of
    their chunk_bytes counter, or None where there are no such rows or they differ (a
    --chunk-bytes list)."""
    values = {int(b["chunk_bytes"]) for b in _bench_entries(load(path))
              if (b.get("graph") == 1) == graphs and "chunk_bytes" in b and not _explicit_chunk(b) and
              b["name"].split("/devices")[0] in families}
    return values.pop() if len(values) == 1 else None


def bench_op_chunks(path, chunk, graphs=True):
    """{op: piece size} for all-gather and reduce-scatter where their rows in the file were timed
    with another piece size than the allreduces' `chunk` (before they took the automatic size,
    they were cut into 256 KiB pieces between virtual devices of one GPU too)."""
    out = {}
    for op, family in (("allgather", "allgather/ring"), ("reduce_scatter", "reduce_scatter/ring")):
        c = bench_chunk(path, graphs, (family,))
        if c is not None and c != chunk:
            out[op] = c
    return out


BENCH_OPS = {"allreduce/naive": "naive", "allreduce/ring": "ring", "allreduce/tree": "tree",
             "allgather/ring": "allgather", "reduce_scatter/ring": "reduce_scatter", "memcpy": "p2p"}


def bench_whole_steps(path, graphs=True, counter="whole_steps"):
    """The algorithms whose rows of the kind `graphs` selects were timed in whole steps (their
    whole_steps counter 1: every rank's moves of a collective step one kernel, LocalFabric over
    virtual devices of one GPU); with counter="whole_collectives", those whose steps moreover ran
    as one kernel per collective (each step a phase of it). Files from before a counter have
    none. An algorithm timed both ways in the rows one fit takes cannot be priced as one:
    ValueError naming it."""
    seen = {}
    for b in _bench_entries(load(path)):
        op = BENCH_OPS.get(b["name"].split("/devices")[0])
        if op is None or op == "p2p" or (b.get("graph") == 1) != graphs or _explicit_chunk(b):
            continue
        seen.setdefault(op, set()).add(int(b.get(counter, 0)))
    mixed = sorted(op for op, v in seen.items() if len(v) > 1)
    if mixed:
        raise ValueError("%s: %s timed both with %s 0 and 1; time one way per file" %
                         (os.path.relpath(path, ROOT), ", ".join(mixed), counter))
    return frozenset(op for op, v in seen.items() if v == {1})


def bench_samples(path, include_timeshared=False, graphs=False):
    """{(op, bytes, devices): [ms per repetition]}. A file written with --benchmark_report_aggregates_only
    holds no repetitions, only aggregates: its median row stands for them (one sample). Rows timed
    as CUDA graphs (allreduce_bench --graphs, counter graph = 1) and eager rows are two kinds that
    no fit mixes: graphs selects the first (the device's own time per collective), else the
    second (each message's host work included)."""
    groups = {}
    for b in _bench_entries(load(path)):
        label = b.get("label", "")
        if "time-shared" in label and not include_timeshared:
            continue
        if (b.get("graph") == 1) != graphs:
            continue
        if _explicit_chunk(b):
            continue
        op = BENCH_OPS.get(b["name"].split("/devices")[0])
        if op is None:
            continue
        unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        key = (op, int(b["bytes"]), int(b["devices"]))
        groups.setdefault(key, []).append(b["real_time"] * unit)
    return groups


def memcpy_threshold(paths):
    """The C library's non-temporal memcpy threshold (bytes) that allreduce_bench recorded in the
    files' context (memcpy_non_temporal_threshold_bytes), where every file records the same one;
    else None (files measured before it was recorded, or on different settings)."""
    values = {load(p)["context"].get("memcpy_non_temporal_threshold_bytes") for p in paths}
    if len(values) != 1 or None in values:
        return None
    return int(values.pop())


def timed(r):
    """An ok run with a step time (a run whose iterations were all warm-up records null)."""
    return r["status"] == "ok" and ((r.get("timing") or {}).get("median_iteration_ms") or 0) > 0


# ---------------------------------------------------------------------------------------------
# compute


def _single_steps(path):
    """{per-device batch: median step ms} of a results file's ok single runs."""
    out = {}
    for r in load(path)["runs"]:
        if timed(r) and r["config"]["strategy"] == "single":
            out.setdefault(r["config"]["per_device_batch"], []).append(r["timing"]["median_iteration_ms"])
    return {b: median(v) for b, v in out.items()}


def concurrent_factor(profile_paths, concurrent_paths):
    """The per-device slowdown of two devices computing at once: each concurrent file
    (experiments/model-profile-concurrent.json, timed beside a second process computing the same
    step) against the solo single steps of the profile measured in the same round (the files
    paired in order when there are as many of each, else against all profiles' medians), the
    median of those ratios over rounds and batches. (factor, {batch: [ratio per round]})."""
    solo_each = [_single_steps(p) for p in profile_paths]
    pooled = {}
    for s in solo_each:
        for b, ms in s.items():
            pooled.setdefault(b, []).append(ms)
    pooled = {b: median(v) for b, v in pooled.items()}
    paired = len(solo_each) == len(concurrent_paths)
    ratios = {}
    for i, path in enumerate(concurrent_paths):
        solo = solo_each[i] if paired else pooled
        for b, ms in sorted(_single_steps(path).items()):
            if b in solo:
                ratios.setdefault(b, []).append(ms / solo[b])
    if not ratios:
        raise ValueError("no concurrent single step at a batch the profiles measure (%s)" %
                         ", ".join(os.path.relpath(p, ROOT) for p in concurrent_paths))
    return median([x for v in ratios.values() for x in v]), ratios


def cpu_compute(profile_paths, concurrent_paths=()):
    """Fit on one profile file or several (repeats of experiments/model-profile.json: every
    single step and layer profile is a point; channel_split's width efficiency is their median).
    concurrent_paths: experiments/model-profile-concurrent.json results measured beside a second
    process (model-session.sh), for the per-device slowdown of two devices computing at once;
    without them that factor is 1."""
    if isinstance(profile_paths, str):
        profile_paths = [profile_paths]
    runs = [r for p in profile_paths for r in load(p)["runs"]]
    steps, layers, fracs = [], [], []
    for r in runs:
        if not timed(r):
            continue
        b = r["config"]["per_device_batch"]
        if r["config"]["strategy"] == "single":
            its = r["iterations"]
            steps.append((b, r["timing"]["median_iteration_ms"]))
            fracs.append(median([i["backward_ms"] / (i["forward_ms"] + i["backward_ms"]) for i in its]))
        rep = r.get("strategy_report") or {}
        if "profiled_layer_ms" in rep:
            layers.append((r["config"]["global_batch"], rep["profiled_layer_ms"]))
    model = next((r["config"].get("model") for r in runs if isinstance(r["config"].get("model"), dict)), None)
    names = [l["name"] for l in model["layers"]] if model and model.get("layers") else None
    comp = perf.Compute.fit(steps, layers, median(fracs),
                            note="fitted on " + ", ".join(os.path.relpath(p, ROOT) for p in profile_paths),
                            names=names if names and len(names) == len(layers[0][1]) else None)
    # channel_split's per-device compute in the same profile: how much slower than the layer
    # model's per-example share its narrower kernels run.
    eff = {}
    for r in runs:
        c = r["config"]
        if timed(r) and c["strategy"] == "channel_split":
            per_dev = median([p["compute_ms"] + p["optimizer_ms"] for p in r["timing"]["per_device"]])
            model = sum(comp.layer_ms(c["global_batch"], 1.0 / c["devices"]))
            eff.setdefault(c["devices"], []).append(per_dev / model)
    comp.width_efficiency = {k: median(v) for k, v in eff.items()}
    if concurrent_paths:
        factor, ratios = concurrent_factor(profile_paths, list(concurrent_paths))
        comp.concurrency = {2: factor}
        comp.note += "; two devices at once x%.3f (%s: %s)" % (
            factor, ", ".join(os.path.relpath(p, ROOT) for p in concurrent_paths),
            ", ".join("b%d %s" % (b, "/".join("%.3f" % x for x in v)) for b, v in sorted(ratios.items())))
    return comp


def gpu_kind(gpu_model):
    """The model's short name of a GPU from the name CUDA reports: the first word after NVIDIA in
    lower case ("NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3" -> "h100"); None otherwise."""
    m = re.match(r"\s*NVIDIA\s+([A-Za-z0-9]+)", gpu_model or "")
    return m.group(1).lower() if m else None


def gpu_sms(config):
    """The SM count of the GPU a run's first device is on (device_list[0].sm_count)."""
    return (config.get("device_list") or [{}])[0].get("sm_count") or H200_SMS


def gpu_effective(config):
    """A virtual device's batch scale on its SM share: the whole GPU's SMs over the share's."""
    total = gpu_sms(config)
    share = (config.get("device_list") or [{}])[0].get("sm_share") or total
    return total / share


def width_points(runs):
    """[(devices, global batch, effective batch, per-device compute ms)] of the ok channel_split
    profile runs (labels starting with WIDTH_CALIBRATION) among `runs`."""
    out = []
    for r in runs:
        c = r["config"]
        if timed(r) and c["strategy"] == "channel_split" and r["label"].startswith(WIDTH_CALIBRATION):
            per_dev = median([p["compute_ms"] + p["optimizer_ms"] for p in r["timing"]["per_device"]])
            out.append((c["devices"], c["global_batch"], c["global_batch"] * gpu_effective(c), per_dev))
    return out


def gpu_models(runs):
    """The GPU names (device_list[].gpu_model) of the ok CUDA runs among `runs`, sorted."""
    return sorted({dev.get("gpu_model") for r in runs if r["status"] == "ok" and
                   r["config"].get("backend") == "cuda"
                   for dev in r["config"].get("device_list") or [] if dev.get("gpu_model")})


def dir_kind(path):
    """The GPU kind the directory of a file (path) is named for (GPU_DIR), or None."""
    m = GPU_DIR.match(os.path.basename(os.path.dirname(os.path.abspath(path))))
    return m.group(1) if m else None


def gpu_of(path, models, what="runs"):
    """The one GPU a results file (path) ran on, by `models` (the names its `what` recorded:
    gpu_models, or an allreduce_bench file's context), else the one its directory is named for
    ("NVIDIA H200" for h200-<date>/), else "NVIDIA GPU". A file in a GPU run's directory must hold
    `what` of that kind only: ValueError naming the file and what they ran on otherwise, or
    when they ran on several GPU models."""
    name, kind = os.path.relpath(path, ROOT), dir_kind(path)
    if len(models) > 1:
        raise ValueError("%s: %s on %s; one GPU model per file" % (name, what, ", ".join(models)))
    if models and kind and gpu_kind(models[0]) != kind:
        raise ValueError("%s: its %s ran on an %s (%s), not in the directory of its kind (%s-<date>)"
                         % (name, what, models[0], gpu_kind(models[0]), gpu_kind(models[0])))
    return models[0] if models else "NVIDIA " + (kind.upper() if kind else "GPU")


def gpu_compute(path):
    """The compute of a GPU's virtual devices, fitted on gpu-check.json (path) of one GPU run."""
    d = load(path)
    gpu = gpu_of(path, gpu_models(d["runs"]))
    short = gpu.replace("NVIDIA ", "", 1)
    layers, step, graphed, group, kernels, widths = [], None, None, None, None, []
    group_read_once = None
    shares, sms = set(), set()
    for r in d["runs"]:
        if not timed(r):
            continue
        c = r["config"]
        rep = r.get("strategy_report") or {}
        widths += width_points([r])
        if "profiled_layer_ms" in rep:
            mb = c["global_batch"] / rep["microbatches"]
            layers.append((mb * gpu_effective(c), rep["profiled_layer_ms"],
                           rep.get("profiled_layer_timing", "host clock"),
                           (c.get("device_list") or [{}])[0].get("sm_share"), gpu_sms(c)))
        if c["strategy"] == "single" and not (c.get("options") or {}).get("cuda_graphs", True):
            kernels = run_kernels(c)
            its = r["iterations"]
            step = (c["global_batch"], r["timing"]["median_iteration_ms"],
                    median([i["backward_ms"] / (i["forward_ms"] + i["backward_ms"]) for i in its]))
        if r["label"] == GRAPH_CALIBRATION:
            graphed = r["timing"]["median_iteration_ms"]
        if r["label"] == GROUP_CALIBRATION:
            group = r["timing"]["median_iteration_ms"]
        if r["label"] == GROUP_CALIBRATION_READ_ONCE:
            group_read_once = r["timing"]["median_iteration_ms"]
    lacks = [what for what, got in (("ok layer_split runs with profiled_layer_ms", layers),
                                    ("an ok eager single run (cuda_graphs false)", step),
                                    ("an ok run '%s'" % GRAPH_CALIBRATION, graphed),
                                    ("an ok run '%s'" % GROUP_CALIBRATION, group)) if not got]
    if lacks:
        raise ValueError("%s: lacks %s to fit the %s's compute on" % (os.path.relpath(path, ROOT), ", ".join(lacks),
                                                                     short))
    # The shape from the profiles timed as the level is (eager passes by the host clock, launches
    # included), where they span two batches at least; else from every profile (graph replays:
    # the layers' times inside a graph, without launches).
    eager = [p for p in layers if p[2] == "host clock"]
    replays = len(layers) - len(eager)
    if not replays:
        profiled = ""
    elif len({p[0] for p in eager}) >= 2:
        layers, profiled = eager, " timed by the host clock (those timed as graph replays left out)"
    else:
        profiled = (" (%d of them timed as graph replays: fewer than two batches were timed by the "
                    "host clock)" % replays)
    shares = {p[3] for p in layers}
    sms = {p[4] for p in layers}
    layers = [(x, ms) for x, ms, *_ in layers]
    shape = perf.Compute.fit([(x, sum(l)) for x, l in layers], layers, step[2])
    level = step[1] / shape.step(step[0])
    line = (shape.line[0] * level, shape.line[1] * level)
    # Host-bound virtual devices: the eager single step taken as all launches at one thread, and
    # the cost of a plain kernel launch with 1 and 8 host threads measured standalone on the H200
    # (FINDINGS.md: "plain launches alone: 4.3 -> 9.5 us"), linear in between; other GPUs' hosts
    # are priced alike (no other measurement of it).
    launch = [4.3, 4.3 + (9.5 - 4.3) * 1 / 7, 4.3 + (9.5 - 4.3) * 3 / 7, 9.5]
    shares = sorted((x for x in shares if x), reverse=True)
    comp = perf.Compute(line, shape.layers, step[2],
                        note="level: the eager single step at batch %d on the whole %s; shape: "
                             "the layer_split profiling passes%s on %s-SM shares, in effective "
                             "batch x = batch * %s / SMs; host term: that step's time as launches, "
                             "each 4.3 us with one host thread, 9.5 us with 8 (FINDINGS.md%s)" % (
                                 step[0], short, profiled, "- and ".join(str(x) for x in shares) or "no",
                                 "/".join(str(x) for x in sorted(sms)),
                                 "" if gpu_kind(gpu) == "h200" else ", measured on the H200"),
                        host=(step[1], launch), graph_factor=graphed / step[1],
                        group_overhead=group - graphed, kernels=kernels,
                        group_overhead_read_once=None if group_read_once is None else group_read_once - graphed)
    # Profile runs that failed with whole steps were run again per rank (scripts/gpu-check.sh's
    # retry, <name>-per-rank.json beside it): their per-device compute, which excludes the
    # collectives, is the same measurement.
    widths_from = path
    retry = path[:-len(".json")] + "-per-rank.json" if path.endswith(".json") else None
    if not widths and retry and os.path.isfile(retry):
        widths = width_points(load(retry)["runs"])
        widths_from = retry
    # channel_split's narrower kernels on their SM shares: the profile runs' per-device compute
    # over the layer model's at 1/k of the channels (as cpu_compute), the median per k.
    eff = {}
    for k, _, x, ms in widths:
        eff.setdefault(k, []).append(ms / sum(comp.layer_ms(x, 1.0 / k)))
    comp.width_efficiency = {k: median(v) for k, v in sorted(eff.items())}
    if widths:
        comp.note += ("; channel_split's width efficiency: the runs '%s ...' at batch %s%s" %
                      (WIDTH_CALIBRATION, ", ".join(str(b) for b in sorted({w[1] for w in widths})),
                       "" if widths_from == path else " (from %s)" % os.path.relpath(widths_from, ROOT)))
    elif any(r["label"].startswith(WIDTH_CALIBRATION) for r in d["runs"]):
        comp.note += ("; channel_split's width efficiency: none (the runs '%s ...' did not end ok)" %
                      WIDTH_CALIBRATION)
    return comp


# The CPU's collectives: naive, ring and tree share a size-dependent per-byte cost (perf's module
# doc); all-gather and reduce-scatter are priced by each other (perf.PAIR); memcpy keeps alpha +
# beta*bytes + gamma*reduced.
cpu_link_fit = perf.Link.fit_size_dependent


def cpu_link(path=None):
    rows = bench_rows(path or os.path.join(CPU_REF, "allreduce-sweep.json"))
    return cpu_link_fit(rows, note="fitted on allreduce-sweep.json (2 devices, a core each)"), rows


def bench_gpu(path):
    """The GPU an allreduce_bench file of CUDA devices ran on, short ("H200"): its context's
    paralab_gpu_model (recorded since 2026-12-05; it must be of the kind its directory is
    named for), else the directory's kind in capitals."""
    recorded = load(path)["context"].get("paralab_gpu_model")
    return gpu_of(path, [recorded] if recorded else [], "rows").replace("NVIDIA ", "", 1)


def in_model_domain(op, n, k):
    """Whether the model can price an allreduce_bench row: the ring family (ring, all-gather,
    reduce-scatter) on fewer floats than ranks exchanges empty messages, which the model counts
    as full ones. A GPU's link is fitted on the rows in the domain only (on the H200's 2026-12-04
    sweep the ring on 4 and 16 B x8 took 0.064 and 0.094 ms against 0.14-0.17 from 64 B to
    1 MiB, and pulled the fixed cost of every ring x8 row down with them). The CPU's rows are on
    2 devices, where only 4 B is outside and its rows still price a message's cost: left out of
    the CPU's fits too, they took its committed rows from 11.1 to 11.9 % median error, so they
    stay in there."""
    return not (op in ("ring", "allgather", "reduce_scatter") and n < 4 * k)


def gpu_link(path):
    """(link, rows, fit) of a GPU's allreduce_bench file (gpu_bench_path): rows timed as CUDA
    graphs where the file has them, fitted per algorithm and k as start + alpha * messages + beta
    * bytes + gamma * reduced at their piece size; else its eager rows, host-bound. fit(rows) refits the
    same kind of link on other rows (the hold-out)."""
    name = os.path.relpath(path, ROOT)
    gpu = bench_gpu(path)
    rows = bench_rows(path, graphs=True)
    if rows:
        chunk = bench_chunk(path)
        if chunk is None:
            raise ValueError("%s: the graphed ring and tree rows have no single chunk_bytes "
                             "(time one piece size to fit the model)" % name)
        op_chunk = bench_op_chunks(path, chunk)
        whole = bench_whole_steps(path)
        collectives = bench_whole_steps(path, counter="whole_collectives") & whole
        steps = whole - collectives
        note = ("device-side collectives fitted on %s (%s virtual devices on one %s, each "
                "collective one CUDA graph, %s%s%s%s): a fixed cost per collective, alpha per message, "
                "beta per byte, gamma per byte added, per algorithm and k, on the rows in the model's "
                "domain (not the ring family's on fewer floats than ranks); other k extrapolated "
                "geometrically in k" %
                (name, ", ".join(str(k) for k in sorted({r[2] for r in rows})), gpu,
                 "whole messages" if chunk == 0 else "%d-byte pieces" % chunk,
                 "".join("; %s in %d-byte pieces" % (op, c) for op, c in sorted(op_chunk.items())),
                 "; %s in whole steps (a message is a step of every rank, one kernel)" %
                 ", ".join(sorted(steps)) if steps else "",
                 "; %s in whole collectives (a message is a step of every rank, a phase of one "
                 "kernel per collective)" % ", ".join(sorted(collectives)) if collectives else ""))

        def fit(r):
            return perf.Link.fit([x for x in r if in_model_domain(*x[:3])], per_k=True, note=note,
                                 chunk=chunk, op_chunk=op_chunk, whole_steps=whole, start=True)
    else:
        rows = bench_rows(path)
        # The host-bound fit prices every message as its receiver's own operation, in 256 KiB
        # pieces (the 2026-11-30 run's transport); eager rows moved in whole steps, or in other
        # pieces, are something else.
        if bench_whole_steps(path, graphs=False):
            raise ValueError("%s: its rows are eager and moved in whole steps, which the host-bound "
                             "model does not price (their graphs were not captured)" % name)
        if rows and bench_chunk(path, graphs=False) not in (None, perf.CHUNK_BYTES):
            raise ValueError("%s: its rows are eager in %s-byte pieces; the host-bound model prices "
                             "%d-byte ones" % (name, bench_chunk(path, graphs=False), perf.CHUNK_BYTES))
        note = ("host-bound model fitted on %s (%s virtual devices on one %s, eager): copy per "
                "byte from its memcpy rows, alpha and adds per algorithm and k; other k "
                "extrapolated geometrically in k" % (name, " and ".join(str(k) for k in sorted({r[2] for r in rows})),
                                                     gpu))

        def fit(r):
            return perf.Link.fit_host_bound(r, contention=H200_CONTENTION_US, note=note)
    if not rows:
        raise ValueError("%s: no allreduce_bench rows to fit" % name)
    return fit(rows), rows, fit


# What the model prices on a GPU and so needs measured: the three allreduces and the copy.
GPU_ALGORITHMS = ("naive", "ring", "tree", "p2p")


@dataclasses.dataclass(frozen=True)
class GpuRun:
    """A GPU run the model fits: results/reference/<kind>-<date>/ (gpu_ref)."""
    kind: str       # "h200"
    directory: str  # absolute
    gpu: str        # "H200": the name CUDA reports, without "NVIDIA "
    sms: int        # the whole GPU's SM count, as the runs recorded it

    @property
    def gpu_check(self):
        return os.path.join(self.directory, "gpu-check.json")

    @property
    def bench(self):
        return gpu_bench_path(self.directory)


def gpu_run(directory):
    """The GpuRun of a run directory, after fitting what the model needs from it: its
    gpu-check.json's compute (gpu_compute) and an allreduce_bench file (GPU_BENCH_FILES, the first
    present) that measures every algorithm of GPU_ALGORITHMS at one piece size, on a GPU of the
    kind the directory is named for. ValueError (or OSError) saying what it lacks otherwise."""
    m = GPU_DIR.match(os.path.basename(os.path.normpath(directory)))
    if not m:
        raise ValueError("%s: not a GPU run's directory name (<gpu>-<YYYY-MM-DD>...)" % directory)
    kind = m.group(1)
    gpu_compute(os.path.join(directory, "gpu-check.json"))
    _, rows, _ = gpu_link(gpu_bench_path(directory))
    lacks = sorted(set(GPU_ALGORITHMS) - {r[0] for r in rows})
    if lacks:
        raise ValueError("%s: no %s rows" % (os.path.relpath(gpu_bench_path(directory), ROOT), ", ".join(lacks)))
    runs = load(os.path.join(directory, "gpu-check.json"))["runs"]
    gpu = gpu_of(os.path.join(directory, "gpu-check.json"), gpu_models(runs))
    sms = {gpu_sms(r["config"]) for r in runs if r["status"] == "ok" and r["config"].get("backend") == "cuda"}
    return GpuRun(kind, directory, gpu.replace("NVIDIA ", "", 1), max(sms) if sms else H200_SMS)


def gpu_ref(kind, reference=REFERENCE, skipped=None):
    """The newest run of a GPU kind committed under `reference` that the model can fit (gpu_run):
    the last, in name order (<kind>-<date>...), of the <kind>-* directories; when none does,
    H200_FIRST's for the H200, else None. `skipped`, a list, receives one line per newer
    directory passed over and why."""
    for d in sorted(glob.glob(os.path.join(reference, kind + "-*")), reverse=True):
        m = GPU_DIR.match(os.path.basename(d))
        if not m or m.group(1) != kind or not os.path.isdir(d):
            continue
        try:
            return gpu_run(d)
        except (OSError, ValueError, KeyError, TypeError) as e:  # a file it cannot read: passed over
            if skipped is not None and d != H200_FIRST:
                skipped.append("%s not fitted: %s" % (os.path.relpath(d, ROOT), e))
    return GpuRun("h200", H200_FIRST, "H200", H200_SMS) if kind == "h200" else None


def gpu_kinds(reference=REFERENCE):
    """The GPU kinds with a run directory (GPU_DIR) under `reference`, h200 first (always: see
    gpu_ref), then by name."""
    kinds = {"h200"} | {m.group(1) for m in (GPU_DIR.match(os.path.basename(d))
                                  for d in glob.glob(os.path.join(reference, "*")) if os.path.isdir(d))
                        if m and m.group(1) != "cpu"}
    return sorted(kinds, key=lambda k: (k != "h200", k))


def gpu_runs(reference=REFERENCE, skipped=None):
    """{kind: GpuRun} of every GPU kind with a run the model can fit (gpu_ref), h200 first."""
    out = {}
    for kind in gpu_kinds(reference):
        run = gpu_ref(kind, reference, skipped)
        if run:
            out[kind] = run
        elif skipped is not None:
            skipped.append("%s: no run under %s that the model can fit" % (kind, os.path.relpath(reference, ROOT)))
    return out


def gpu_bench_path(ref):
    """The allreduce_bench file of a GPU run's directory (GPU_BENCH_FILES, the first present)."""
    for f in GPU_BENCH_FILES:
        if os.path.isfile(os.path.join(ref, f)):
            return os.path.join(ref, f)
    raise FileNotFoundError("%s: none of %s" % (os.path.relpath(ref, ROOT), ", ".join(GPU_BENCH_FILES)))


# The GPU runs the model fits, and the newer ones it passed over (report.py prints them). H200_REF:
# the H200's, which the hand-written passages of report.py describe.
GPU_SKIPPED = []
GPU_RUNS = gpu_runs(skipped=GPU_SKIPPED)
H200_REF = GPU_RUNS["h200"].directory


# ---------------------------------------------------------------------------------------------
# validation


def is_gpu(kind):
    """Whether a point's kind is a GPU's (h200, h100, ...) rather than the CPU's (cpu, cpu-...)."""
    return not kind.startswith("cpu")


def _point(kind, source, label, config, measured, predicted, breakdown, held_out=True, note=""):
    keyed = {x: config.get(x) for x in ("backend", "strategy", "devices", "global_batch",
                                        "per_device_batch", "options")}
    # single's steps_per_launch (recorded since 2026-12-06) at its default is the same
    # configuration as a run recorded before it.
    if isinstance(keyed["options"], dict) and keyed["options"].get("steps_per_launch") == 1:
        keyed["options"] = {k: v for k, v in keyed["options"].items() if k != "steps_per_launch"}
    key = json.dumps(keyed, sort_keys=True)
    if config.get("backend") == "cuda":
        key += " sm_shares=%s" % [d.get("sm_share") for d in config.get("device_list") or []]
    strategy = config.get("strategy") or ""
    return {"kind": kind, "source": source, "label": label, "strategy": strategy, "config_key": key,
            "group": "allreduce_bench" if strategy.startswith("allreduce_bench") else "training",
            "devices": config.get("devices"), "per_device_batch": config.get("per_device_batch"),
            "measured_ms": measured, "predicted_ms": predicted,
            "relative_error": predicted / measured - 1, "held_out": held_out,
            "breakdown_ms": {k: v for k, v in breakdown.items() if isinstance(v, (int, float))},
            "note": note}


def step_moves_mismatch(config, report, link):
    """Why a run's collective steps moved otherwise than the fitted link prices them ("" when
    alike): data_parallel's and channel_split's reports name their step_moves where steps moved
    whole (one kernel per step for all ranks); the link prices whole steps where its rows were
    timed so. A run retried per rank (gpu-check.sh) beside a sweep in whole steps is one. GPUs
    only: the CPU model prices a step's moves alike either way (one host memory, copied by
    threads)."""
    if (config.get("backend") != "cuda" or config.get("strategy") not in ("data_parallel", "channel_split")
            or config.get("devices", 1) < 2):
        return ""
    whole = "step_moves" in (report or {})
    priced = bool(getattr(link, "whole_steps", ()))
    if whole == priced:
        return ""
    return ("its collective steps moved %s; the link fitted prices them %s" %
            ("whole" if whole else "per rank", "whole" if priced else "per rank"))


def validate_runs(kind, path, comp, link, effective=None, own_level=True, kernels=None,
                  not_predicted=None):
    """Predict every ok run of a results file; `effective` maps a config to the batch scale.
    own_level (CPU): each single run sets the speed level of the runs after it; without it the
    profile's level holds for the whole file (a session measured with its profile).
    kernels: the kernel set the compute profile was measured with (CUDA); a run on another set
    is not predicted (its compute was never profiled) and is listed in not_predicted instead."""
    d = load(path)
    src = os.path.relpath(path, ROOT)
    points = []
    level = 1.0
    runs = [r for r in d["runs"] if timed(r)]
    if not_predicted is not None:
        # Runs that did not end ok (skipped ones said why they could not run at all) are named,
        # not dropped without a word; so is a file its process did not finish.
        for r in d["runs"]:
            if r["status"] not in ("ok", "skipped"):
                not_predicted.append("%s: %s (%s: %s)" % (src, r["label"], r["status"],
                                                          " ".join(str(r.get("reason") or "no reason given").split())[:200]))
        if d.get("state", "complete") != "complete":
            not_predicted.append("%s: the file is %s, not complete: runs after its last are missing" %
                                 (src, d.get("state")))
    for r in runs:
        c = dict(r["config"])
        if kernels is not None and run_kernels(c) not in (None, kernels):
            if not_predicted is not None:
                not_predicted.append("%s: %s (kernels %s; the compute profile is %s's)" % (
                    src, r["label"], run_kernels(c), kernels))
            continue
        moved = step_moves_mismatch(c, r.get("strategy_report"), link)
        if moved:
            if not_predicted is not None:
                not_predicted.append("%s: %s (%s)" % (src, r["label"], moved))
            continue
        net = nets.for_config(c, r.get("strategy_report"))
        measured = r["timing"]["median_iteration_ms"]
        c["batch_scale"] = effective(c) if effective else 1.0
        if c.get("oversubscribed"):
            continue
        if c["strategy"] == "single":
            pred, bd = perf.predict(comp, link, c, net)
            held = not (is_gpu(kind) and (r["label"] == GRAPH_CALIBRATION or
                                          not (c.get("options") or {}).get("cuda_graphs", True)))
            points.append(_point(kind, src, r["label"], r["config"], measured, pred, bd, held,
                                 "" if held else "calibration point (the fit's level)"))
            if kind.startswith("cpu") and own_level:
                level = measured / pred  # this file's speed, for the runs after it
            continue
        if r["label"] in (GROUP_CALIBRATION, GROUP_CALIBRATION_READ_ONCE) and is_gpu(kind):
            pred, bd = perf.predict(comp, link, c)
            points.append(_point(kind, src, r["label"], r["config"], measured, pred, bd, False,
                                 "calibration point (the group step overhead)"))
            continue
        if r["label"].startswith(WIDTH_CALIBRATION) and is_gpu(kind):
            pred, bd = perf.predict(comp, link, c, net)
            points.append(_point(kind, src, r["label"], r["config"], measured, pred, bd, False,
                                 "calibration point (channel_split's width efficiency)"))
            continue
        lvl_comp = comp.scaled(level) if kind.startswith("cpu") else comp
        note = ("level x%.3f from this file's single run" % level) if kind.startswith("cpu") and own_level else ""
        prof = (r.get("strategy_report") or {}).get("profiled_layer_ms")
        if prof:  # layer_split's own profiling pass in setup (not its timed iterations)
            c["profiled_layer_ms"] = prof
            # runs recorded before the key were all timed by the host clock
            c["profiled_layer_timing"] = r["strategy_report"].get("profiled_layer_timing", "host clock")
            note = "stage times from this run's profiling pass (setup%s)" % (
                ", graph replays" if c["profiled_layer_timing"] == "graph replays" else "")
        pred, bd = perf.predict(lvl_comp, link, c, net)
        points.append(_point(kind, src, r["label"], r["config"], measured, pred, bd, note=note))
    return points


def validate_bench(kind, rows, fit_rows, source, fit=perf.Link.fit, not_predicted=None):
    """Each allreduce_bench row predicted by fit(rows) on fit_rows without any row of the same
    algorithm, size and k (leave-one-out within the fitted sweep; for another file's rows, the
    sweep's own measurement of that size is left out too). Rows of other algorithms at the same
    size stay in (on the H200 the memcpy rows set the copy's per-byte cost). A row that no fit
    without it can price (its algorithm measured at that size and k alone) is not predicted:
    listed in not_predicted (raised without one)."""
    points = []
    for op, n, k, ms in rows:
        rest = [r for r in fit_rows if r[:3] != (op, n, k)]
        try:
            pred = fit(rest).time(op, n, k)
        except (KeyError, ValueError, IndexError, ZeroDivisionError) as e:
            if not_predicted is None:
                raise
            not_predicted.append("%s: %s %d B x%d (the rows left without it cannot be fitted for it: %s: %s)" % (
                source, op, n, k, type(e).__name__, e))
            continue
        cfg = {"strategy": "allreduce_bench/" + op, "devices": k, "per_device_batch": None}
        p = _point(kind, source, "%s %d B x%d" % (op, n, k), cfg, ms, pred, {"bytes": n},
                   note="fit left out this algorithm, size and k")
        p["config_key"] = p["label"]
        # The ring family on fewer floats than ranks exchanges empty messages, which the model
        # counts as full ones: outside its domain (counted in every summary; also shown without).
        p["in_model_domain"] = in_model_domain(op, n, k)
        points.append(p)
    return points


def mark_calibration_repeats(points):
    """A held-out point of the same device kind and configuration as a calibration point is a
    repeat of it: the fit that reproduces the calibration's time predicts the repeat by
    construction (on the H200, the graph factor makes single's graphed step at batch 256 equal
    gpu-check.json's "single gpu epoch", so the 10-epoch runs of that configuration come out
    within its noise). Such points are calibration too, not counted as held out."""
    keys = {(p["kind"], p["config_key"]) for p in points if not p["held_out"]}
    for p in points:
        if p["held_out"] and p["group"] == "training" and (p["kind"], p["config_key"]) in keys:
            p["held_out"] = False
            p["note"] = ("calibration repeat: the configuration of a calibration point, which the "
                         "fit reproduces by construction")
    return points


def summarize(points, domain_only=False):
    """Per kind and group over the held-out points; domain_only: without the allreduce_bench rows
    outside the model's domain (in_model_domain false)."""
    out = {}
    for kind in sorted({p["kind"] for p in points}):
        for group in ("training", "allreduce_bench", "all"):
            sel = [p for p in points if p["kind"] == kind and p["held_out"] and
                   (not domain_only or p.get("in_model_domain", True)) and
                   (group == "all" or (group == "allreduce_bench") == p["strategy"].startswith("allreduce_bench"))]
            if not sel or (group == "all" and not any(p["group"] == "allreduce_bench" for p in sel)):
                continue  # "all" only where it differs from "training"
            e = np.abs([p["relative_error"] for p in sel])
            out["%s/%s" % (kind, group)] = {"points": len(sel), "median_abs_error": float(np.median(e)),
                                           "max_abs_error": float(e.max()),
                                           "within_15_percent": int((e <= 0.15).sum()),
                                           "meets_goal": bool(np.median(e) <= 0.08 and e.max() <= 0.15)}
    return out
