"""Shared code for the ParaLab plotting scripts: loading a results file, grouping its runs into
series, per-iteration time breakdowns, and writing figures atomically.

The results format is described in results/README.md and results/results.schema.json. Fields
added by the data-parallel work (run `scaling`, `timing.per_device`, `config.batch_scaling`,
`config.oversubscribed`, ...) are optional here: a missing field means "not available", never
an error. Only a file that cannot be a ParaLab results file raises ResultsError.

Not a script; the plot_*.py scripts beside it import it.
"""

import json
import math
import os
import re
import sys
import tempfile

# Every plot script imports this module first: an interpreter without matplotlib ends here with
# one line that says how to get it, not with a traceback from the first plot module.
try:
    import matplotlib  # noqa: F401
except ImportError:
    print(f"{os.path.basename(sys.argv[0]) or 'plotting'}: matplotlib is missing for "
          f"{sys.executable}: install python3-matplotlib (Debian/Ubuntu) or "
          f"'{sys.executable} -m pip install matplotlib'", file=sys.stderr)
    sys.exit(1)

KNOWN_SCHEMA_VERSIONS = (1, 2)  # 2: environment.gpu_model a list, git build and source_tree

# Strategy option defaults (struct Options in strategies/<strategy>.cpp). A series name spells
# out these options only when they differ from the default, so the common case stays short.
DEFAULT_GROUPING = "bucketed"  # data_parallel
DEFAULT_OVERLAP = False  # data_parallel
DEFAULT_SCHEDULE = "gpipe"  # layer_split
DEFAULT_SPLIT = "auto"  # layer_split
DEFAULT_PAIRING = "none"  # channel_split
DEFAULT_CHANNEL_ALLREDUCE = "ring"  # channel_split

# Batch-scaling key for runs whose config does not say (files written before the field existed).
UNSPECIFIED_SCALING = "unspecified"


class ResultsError(Exception):
    """A results file that cannot be read; str(e) is one line naming the file and the problem."""


def load_results(path):
    """Returns the parsed results file; raises ResultsError if it is not a ParaLab results file."""

    def fail(what):
        raise ResultsError(f"{path}: {what}")

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        fail("no such file")
    except IsADirectoryError:
        fail("is a directory, not a results file")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"cannot read: {getattr(e, 'strerror', None) or e}")
    try:
        results = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})")
    if not isinstance(results, dict):
        fail(f"not a ParaLab results file (top level is a JSON {type(results).__name__}, "
             "not an object)")
    missing = [k for k in ("schema_version", "runs") if k not in results]
    if missing:
        fail("not a ParaLab results file (no " + " or ".join(f"'{k}'" for k in missing) + ")")
    version = results["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        fail(f"schema_version is {json.dumps(version)}, expected a positive integer")
    runs = results["runs"]
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        fail("'runs' is not a list of objects")
    if not runs:
        fail("'runs' is empty")
    state = results.get("state")
    if state in ("running", "interrupted"):
        # bench_runner rewrites the file after each run: a partial one is valid, and says so.
        print(f"warning: {path}: state is {state}: plotting the {len(runs)} run(s) it holds, "
              "not the whole descriptor", file=sys.stderr)
    if version not in KNOWN_SCHEMA_VERSIONS:
        # A newer writer may have changed a field's meaning; say so, but still plot what we know.
        print(f"warning: {path}: schema_version {version} is newer than this reader knows "
              f"({', '.join(map(str, KNOWN_SCHEMA_VERSIONS))}); plotting the fields it knows",
              file=sys.stderr)
    return results


# ---- run accessors (each tolerates missing fields) ----

def _dict(x):
    return x if isinstance(x, dict) else {}


def number(x):
    """x as a float if it is a finite number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def config(run):
    return _dict(run.get("config"))


def status(run):
    return run.get("status")


def is_ok(run):
    return run.get("status") == "ok"


def devices(run):
    d = config(run).get("devices")
    return d if isinstance(d, int) and not isinstance(d, bool) and d >= 1 else None


def label(run):
    lab = run.get("label")
    if isinstance(lab, str) and lab:
        return lab
    c = config(run)
    return f"{c.get('strategy', '?')} x{c.get('devices', '?')}"


def batch_scaling(run):
    """'strong', 'weak', or UNSPECIFIED_SCALING when the run does not say."""
    s = config(run).get("batch_scaling")
    return s if isinstance(s, str) and s else UNSPECIFIED_SCALING


def oversubscribed(run):
    return config(run).get("oversubscribed") is True


def virtual_placement(run):
    """How a CUDA run's virtual devices sit on its GPUs ("4 virtual devices on 1 GPU"), or None
    when each device had a GPU of its own (config.placement, written by bench_runner)."""
    p = config(run).get("placement")
    return p if isinstance(p, str) and p else None


def series_name(run):
    """The strategy and the options its runs are compared by, joined by '/':
      single                                   'single'
      data_parallel: allreduce, then grouping and overlap when non-default
                                               'data_parallel/ring',
                                               'data_parallel/tree/per_tensor+overlap'
      layer_split: m=<micro-batches>, then schedule and split when non-default
                                               'layer_split/m=8', 'layer_split/m=8/1f1b',
                                               'layer_split/m=4/split=1,3'
      channel_split: pairing and allreduce when non-default
                                               'channel_split', 'channel_split/megatron',
                                               'channel_split/megatron/tree'
    Any other strategy is named like data_parallel. A run without CUDA graphs (option
    cuda_graphs false: the eager GPU path) gets ' eager' after its name: its steps pay the host's
    launches, which a graphed run of the same options does not."""
    c = config(run)
    options = _dict(c.get("options"))
    name = _strategy_name(str(c.get("strategy") or "unknown"), options)
    return name + " eager" if options.get("cuda_graphs") is False else name


def _strategy_name(strategy, options):
    parts = [strategy]

    def non_default(key, default):
        value = options.get(key)
        if value not in (None, "") and value != default:
            parts.append(str(value))

    if strategy == "layer_split":
        m = options.get("microbatches")
        if isinstance(m, int) and not isinstance(m, bool):
            parts.append(f"m={m}")
        non_default("schedule", DEFAULT_SCHEDULE)
        split = options.get("split")
        if isinstance(split, list):
            parts.append("split=" + ",".join(map(str, split)))
        elif split is not None and split != DEFAULT_SPLIT:
            parts.append(f"split={split}")
        return "/".join(parts)
    if strategy == "channel_split":
        non_default("pairing", DEFAULT_PAIRING)
        non_default("allreduce", DEFAULT_CHANNEL_ALLREDUCE)
        return "/".join(parts)
    if options.get("allreduce"):
        parts.append(str(options["allreduce"]))
    non_default("grouping", DEFAULT_GROUPING)
    name = "/".join(parts)
    overlap = options.get("overlap")
    if overlap is not None and overlap != DEFAULT_OVERLAP:
        name += "+overlap" if overlap is True else f"+overlap={overlap}"
    return name


def series_order(name):
    """Sort key for series names: 'single' first, then by name with numbers compared as numbers
    ('layer_split/m=2' before 'layer_split/m=16'); 'single b32' and 'single eager' first too."""
    return name.split(" ")[0] != "single", [(0, int(t), "") if t.isdigit() else (1, 0, t)
                              for t in re.split(r"(\d+)", name) if t]


def series_key(run):
    """(batch_scaling, series_name): the runs that one line of a plot connects, where a file
    compares them at one batch (series_keys tells batches apart)."""
    return batch_scaling(run), series_name(run)


def compared_batch(run):
    """The batch a run's series compares device counts at: the global batch under strong
    scaling, the per-device batch under weak scaling; None when not recorded."""
    key = "per_device_batch" if batch_scaling(run) == "weak" else "global_batch"
    value = config(run).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def series_keys(runs):
    """{id(run): (batch_scaling, series name)} for the runs one figure draws: series_key, and
    where the runs of one batch scaling come at more than one batch (AlexNet's comparison at 32
    and 128, a session's single step at 256 and 512), the batch after the name
    ('layer_split/m=4 b32'; weak scaling: 'b256/device'): runs of different batches are never
    one line, nor one group of bars."""
    batches = {}
    for run in runs:
        batches.setdefault(batch_scaling(run), set()).add(compared_batch(run))
    out = {}
    for run in runs:
        scaling, name = series_key(run)
        batch = compared_batch(run)
        if len(batches[scaling]) > 1 and batch is not None:
            name += f" b{batch}" + ("/device" if scaling == "weak" else "")
        out[id(run)] = (scaling, name)
    return out


def samples_per_s(run):
    return number(_dict(run.get("timing")).get("samples_per_s"))


def speedup(run):
    """The run's speedup over its 1-device baseline (run.scaling.speedup, which bench_runner
    computes: add_scaling in experiments/bench_runner.cpp), or None when the file has none."""
    scaling = run.get("scaling")
    return number(scaling.get("speedup")) if isinstance(scaling, dict) else None


# ---- per-iteration time breakdown ----

PHASES = ("compute_ms", "exposed_communication_ms", "optimizer_ms", "idle_ms")


def _mean(values):
    return sum(values) / len(values) if values else None


def _device_phases(entry):
    """One device's phases from a timing.per_device entry; None if it lacks compute or total."""
    e = _dict(entry)
    total = number(e.get("total_ms"))
    compute = number(e.get("compute_ms"))
    if total is None or compute is None:
        return None
    exposed = number(e.get("exposed_communication_ms"))
    if exposed is None:
        exposed = number(e.get("communication_ms")) or 0.0
    optimizer = number(e.get("optimizer_ms")) or 0.0
    idle = number(e.get("idle_ms"))
    if idle is None:
        idle = max(0.0, total - compute - exposed - optimizer)
    return {"compute_ms": compute, "exposed_communication_ms": exposed,
            "optimizer_ms": optimizer, "idle_ms": idle, "total_ms": total}


def breakdown(run):
    """Mean milliseconds per iteration by phase, or None when the run has no timing to split.

    Returns {compute_ms, exposed_communication_ms, optimizer_ms, idle_ms: averages over devices,
    total_ms: their mean total, max_total_ms: the slowest device's total (None for one device),
    devices_measured: how many devices the numbers come from}.

    From timing.per_device when present. Otherwise from the iterations list (rank 0's view):
    compute = forward + backward, all communication counted as exposed, idle = total - the rest
    (timer overhead on one device). An iteration replayed as one CUDA graph
    (detail.cuda_graph_replay) has no phases (its forward_ms and backward_ms read 0): it is not
    split, rather than shown as a step of idle time."""
    per_device = _dict(run.get("timing")).get("per_device")
    if isinstance(per_device, list) and per_device:
        phases = [_device_phases(e) for e in per_device]
        if all(p is not None for p in phases):
            out = {k: _mean([p[k] for p in phases]) for k in PHASES + ("total_ms",)}
            out["max_total_ms"] = max(p["total_ms"] for p in phases) if len(phases) > 1 else None
            out["devices_measured"] = len(phases)
            return out
    iterations = [i for i in run.get("iterations") or [] if isinstance(i, dict)]
    rows = []
    for it in iterations:
        if _dict(it.get("detail")).get("cuda_graph_replay"):
            continue
        f, b, t = (number(it.get(k)) for k in ("forward_ms", "backward_ms", "total_ms"))
        if f is None or b is None or t is None:
            continue
        c = number(it.get("communication_ms")) or 0.0
        o = number(it.get("optimizer_ms")) or 0.0
        rows.append((f + b, c, o, max(0.0, t - f - b - c - o), t))
    if not rows:
        return None
    means = [_mean([r[i] for r in rows]) for i in range(5)]
    out = dict(zip(PHASES + ("total_ms",), means))
    out["max_total_ms"] = None
    out["devices_measured"] = 1
    return out


# ---- figure helpers ----

def machine_description(results):
    """e.g. 'Intel(R) Xeon(R) Processor, 2 cores' (plus the GPU when there is one)."""
    env = _dict(results.get("environment"))
    parts = []
    cpu = env.get("cpu_model")
    if cpu and cpu != "unknown":
        cores = env.get("cpu_cores")
        parts.append(f"{cpu}, {cores} cores" if isinstance(cores, int) and cores > 0 else str(cpu))
    gpus = env.get("gpu_model")  # schema 2: a list of models; schema 1: a string
    if isinstance(gpus, list):
        parts.extend(str(g) for g in gpus)
    elif gpus:
        parts.append(str(gpus))
    return "; ".join(parts) or "unknown machine"


def batch_description(runs):
    """e.g. 'strong: global batch 256; weak: 64 per device', from the runs given."""
    parts = []
    for scaling in ordered_scalings(runs):
        group = [r for r in runs if batch_scaling(r) == scaling]
        if scaling == "weak":
            sizes = sorted({config(r).get("per_device_batch") for r in group} - {None})
            text = "/".join(map(str, sizes)) + " per device" if sizes else ""
        else:
            sizes = sorted({config(r).get("global_batch") for r in group} - {None})
            text = "global batch " + "/".join(map(str, sizes)) if sizes else ""
        if text:
            parts.append(text if scaling == UNSPECIFIED_SCALING else f"{scaling}: {text}")
    return "; ".join(parts)


def ordered_scalings(runs):
    order = {"strong": 0, "weak": 1}
    return sorted({batch_scaling(r) for r in runs}, key=lambda s: (order.get(s, 2), s))


def scaling_title(scaling):
    return {"strong": "strong scaling (fixed global batch)",
            "weak": "weak scaling (fixed per-device batch)"}.get(scaling,
                                                                 "batch scaling not recorded")


def series_colors(names):
    """A fixed colour per series name, so every plot of one file colours a series the same; 20
    distinct ones (matplotlib's tab20 order: the ten strong ones, then their light tints), since
    a full sweep draws 11 series in one panel, and colour is what tells its lines apart."""
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
               "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"]
    ordered = sorted(set(names), key=series_order)
    return {n: palette[i % len(palette)] for i, n in enumerate(ordered)}


def suptitle(fig, what, results, plotted_runs):
    """'<what> on <machine>' with the batch sizes of the plotted runs on a second line."""
    batches = batch_description(plotted_runs)
    fig.suptitle(f"{what} on {machine_description(results)}" + (f"\n{batches}" if batches else ""),
                 fontsize=11)


def new_figure(ncols, width_per_col=5.5, height=4.5, nrows=1, height_ratios=None):
    """A matplotlib Figure with nrows x ncols axes (no pyplot: no global state); height is per
    row. Returns the figure and its axes as one list, row by row."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "paralab"  # stable ids: same data, same SVG
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width_per_col * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False,
                        gridspec_kw={"height_ratios": height_ratios} if height_ratios else None)
    return fig, list(axes.flat)


def save_figure(fig, out_dir, name):
    """Writes out_dir/name.png and out_dir/name.svg, each through a temporary file in out_dir
    and os.replace, so a reader never sees half a file. Returns the two paths."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for fmt in ("png", "svg"):
        final = os.path.join(out_dir, f"{name}.{fmt}")
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=f".{fmt}", dir=out_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                # Date=None keeps the SVG identical for identical data (diffable).
                fig.savefig(f, format=fmt, dpi=150,
                            metadata={"Date": None} if fmt == "svg" else None)
            os.replace(tmp, final)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        written.append(final)
    return written


def default_out_dir(results_path):
    """<directory of the results file>/<results stem>-plots."""
    stem = os.path.splitext(os.path.basename(results_path))[0]
    return os.path.join(os.path.dirname(os.path.abspath(results_path)), f"{stem}-plots")


def run_cli(prog, plots, argv=None, loader=None, what="a bench_runner results file"):
    """The command line shared by the plot scripts. plots: list of (name, make_figure) where
    make_figure(results) returns (figure, None) or (None, why there is nothing to draw), and
    raises ResultsError (one line, without the path) when a field it needs is malformed.
    loader(path) reads the file (default load_results) and raises ResultsError with one line.
    Every figure is made before any is written, so a malformed file writes nothing.
    Returns the exit status: 0 on success (also when a plot had nothing to draw), 1 when the
    file is unreadable or malformed or a figure cannot be written."""
    loader = loader or load_results
    import argparse
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Plots {', '.join(n for n, _ in plots)} from {what} (PNG and SVG).")
    parser.add_argument("results", metavar="RESULTS.json", help=what)
    parser.add_argument("--out-dir", metavar="DIR",
                        help="where to write (default: <results stem>-plots/ beside the file)")
    args = parser.parse_args(argv)
    try:
        results = loader(args.results)
    except ResultsError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    out_dir = args.out_dir or default_out_dir(args.results)
    try:
        figures = [(name, *make_figure(results)) for name, make_figure in plots]
    except ResultsError as e:
        print(f"{prog}: {args.results}: {e}", file=sys.stderr)
        return 1
    for name, fig, why_not in figures:
        if fig is None:
            print(f"{name}: not written: {why_not}")
            continue
        try:
            for path in save_figure(fig, out_dir, name):
                print(path)
        except OSError as e:
            print(f"{prog}: {out_dir}: cannot write {name}: {e.strerror or e}", file=sys.stderr)
            return 1
    return 0
