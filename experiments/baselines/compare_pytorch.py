#!/usr/bin/python3
"""ParaLab's single device against PyTorch baselines, side by side in one invocation.

Every run trains the same LeNet the same way (full Fashion-MNIST, batch 256, lr 0.2, seed 0,
--iterations minibatches after --warmup excluded ones, all in one epoch), through
  * bench_runner (strategy "single"; on cuda its step is a CUDA graph, single's default), and
  * experiments/baselines/pytorch_lenet.py, in these modes:
      cpu:  the book's trainer (--model book), torch.set_num_threads(T), per thread count T;
      cuda: the graphed nn.Module baseline (--model module --cuda-graph: data on the GPU, the
            whole step one CUDA graph, TF32 off) and the book's trainer (--model book).
The programs alternate (ParaLab, [graphed,] book) --repeats times, so that drift in the machine
hits all alike; the figures are the medians of each one's training throughput
(timing.samples_per_s, images/s).

Derived figures, computed the same way for every program:
  ms/epoch  = 60,000 images / median images/s * 1000: a full Fashion-MNIST epoch at the measured
              rate.  The timed steps are full 256-image minibatches, so this is 234.375 times the
              mean step time (the real epoch's last minibatch of 96 is counted pro rata).
  ratio     = ParaLab's median images/s / the baseline's.

What each program's throughput covers (pytorch_lenet.py's docstring has the details):
  ParaLab   each step timed on the host, synchronised at its end, the gather included;
  graphed   the timed steps of the epoch as one region, synchronised only at its ends, the gather
            included (it is inside the graph); this favours PyTorch over ParaLab slightly;
  book      each step synchronised on both sides, the gather excluded (it indexes before starting
            its clock); this too favours PyTorch slightly.

Goals (each a PASS or FAIL line at the end of the output). A run that fails does not stop the
others: each program's throughput is printed as it is measured, a failed run is listed with its
error (failures[] in the JSON), the medians are of the runs that completed, and a goal whose
figure no run measured FAILs, naming the failure. The exit status is 0 when every run completed
and 1 when any failed (or nothing could start):
  cpu:  ParaLab >= --goal (default 2) x the book's trainer at every thread count;
  cuda: ParaLab >= --goal (default 2.5) x the graphed baseline, and ParaLab's ms/epoch
        <= --epoch-goal-ms (default 50).

    /usr/bin/python3 experiments/baselines/compare_pytorch.py --threads 1 2
    (needs python3-torch: scripts/install-deps.sh --with-torch)
    python3 experiments/baselines/compare_pytorch.py --device cuda \\
        --bench-runner build-gpu/bench_runner
    (the interpreter running this script, or --python, must have torch with CUDA; on cuda the
    thread count is irrelevant: one row, threads 1; --iterations defaults to 225 there)

Writes results/compare-pytorch-<UTC time>.json (never overwriting) unless --out is given.
JSON: benchmark, command, environment, config, goal_ratio, rows[] (threads, paralab_* and
pytorch_* (the book's trainer) lists and medians, ratio = ParaLab / book, epoch_ms; on cuda also
graphed_* and ratio_vs_graphed; a median, ratio or epoch_ms is null where no run of its program
completed), goals[] (name, required, measured, met), goal_met (all goals), failures[] (program,
threads, repeat, error).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROG = "compare_pytorch.py"

FULL_EPOCH_IMAGES = 60000  # Fashion-MNIST's training set
BATCH_SIZE, LR, SEED = 256, 0.2, 0

# The PyTorch programs, by the key used in the rows and goals.
BASELINES = {
    "graphed": {"label": "PyTorch nn.Module, CUDA graph",
                "args": ["--model", "module", "--cuda-graph"]},
    "book": {"label": "PyTorch book trainer", "args": ["--model", "book"]},
}


class RunFailed(Exception):
    """A program exited non-zero or wrote an unusable result. The message's first line says
    what happened (the program and its last line on stderr); the rest has the command and its
    whole stderr."""


def program_name(cmd):
    return os.path.basename(cmd[1] if len(cmd) > 1 and cmd[1].endswith(".py") else cmd[0])


def run_json(cmd, out_path):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines()
        raise RunFailed(f"{program_name(cmd)} exited {proc.returncode}: "
                        f"{said[-1] if said else 'nothing on stderr'}\n"
                        f"command: {' '.join(cmd)}\n{proc.stderr.strip()}")
    try:
        with open(out_path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RunFailed(f"{program_name(cmd)}: no readable result in {out_path}: {e}\n"
                        f"command: {' '.join(cmd)}")


def paralab_once(args, threads, tmp):
    out = os.path.join(tmp, f"paralab-{threads}-{time.monotonic_ns()}.json")
    cmd = [args.bench_runner, os.path.join(ROOT, "experiments", "lenet-10epochs.json"),
           "--quiet", "--out", out,
           "--set", "name=compare-pytorch",
           "--set", "training.epochs=1",
           "--set", f"training.max_iterations_per_epoch={args.iterations + args.warmup}",
           "--set", f"training.warmup_iterations={args.warmup}",
           "--set", f"training.threads_per_device={threads}",
           "--set", f"backend={args.device}",
           "--set", f"kernels={args.kernels}"]
    if args.steps_per_launch != 1:
        cmd += ["--set", f"runs.0.steps_per_launch={args.steps_per_launch}"]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    doc = run_json(cmd, out)
    run = doc["runs"][0]
    if run["status"] != "ok":
        raise RunFailed(f"bench_runner run ended {run['status']}: {run['reason']}")
    return run["timing"]["samples_per_s"], doc["environment"]


def pytorch_once(args, key, threads, tmp):
    out = os.path.join(tmp, f"pytorch-{key}-{threads}-{time.monotonic_ns()}.json")
    cmd = [args.python, os.path.join(HERE, "pytorch_lenet.py"), "--quiet", "--device", args.device,
           *BASELINES[key]["args"],
           "--epochs", "1", "--max-iterations-per-epoch", str(args.iterations + args.warmup),
           "--warmup-iterations", str(args.warmup), "--threads", str(threads),
           "--test-limit", "1000", "--json", out]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    doc = run_json(cmd, out)
    sps = doc.get("timing", {}).get("samples_per_s")
    if not isinstance(sps, (int, float)) or sps <= 0:
        raise RunFailed(f"{program_name(cmd)}: no throughput in its result "
                        f"(timing.samples_per_s is {sps!r})\ncommand: {' '.join(cmd)}")
    return sps, doc


def epoch_ms(samples_per_s):
    return None if samples_per_s is None else FULL_EPOCH_IMAGES / samples_per_s * 1000.0


def median(values):
    return statistics.median(values) if values else None


def ratio(a, b):
    return None if a is None or b is None else a / b


def summarise(device, threads, paralab, book, graphed):
    """One row of the results from the per-repeat throughputs (lists of images/s, of the runs
    that completed; a program none of whose runs completed has null figures)."""
    row = {"threads": threads,
           "paralab_samples_per_s": paralab, "pytorch_samples_per_s": book,
           "paralab_median": median(paralab),
           "pytorch_median": median(book)}
    row["ratio"] = ratio(row["paralab_median"], row["pytorch_median"])
    row["epoch_ms"] = {"paralab": epoch_ms(row["paralab_median"]),
                       "book": epoch_ms(row["pytorch_median"])}
    if device == "cuda":
        row["graphed_samples_per_s"] = graphed
        row["graphed_median"] = median(graphed)
        row["ratio_vs_graphed"] = ratio(row["paralab_median"], row["graphed_median"])
        row["epoch_ms"]["graphed"] = epoch_ms(row["graphed_median"])
    return row


def why_missing(failures, programs, threads=None):
    """Why a figure of `programs` is missing: the first failure of each that never completed."""
    said = []
    for f in failures:
        if f["program"] in programs and (threads is None or f["threads"] == threads) \
                and f["program"] not in [s[0] for s in said]:
            said.append((f["program"], f["error"].splitlines()[0] if f["error"] else "no error"))
    return "; ".join(f"{p} failed: {e}" for p, e in said) or "no run completed"


def evaluate_goals(device, rows, goal_ratio, epoch_goal_ms, failures=()):
    """The goals as [{name, required, measured, met, line}]; a goal whose figure is missing
    (no run of a program it needs completed) is not met, and its line says why."""
    goals = []
    if device == "cuda":
        r = rows[0]
        got = r["ratio_vs_graphed"]
        goals.append({"name": "throughput_vs_graphed", "required": goal_ratio, "measured": got,
                      "met": got is not None and got >= goal_ratio,
                      "line": (f"ParaLab {got:.2f}x the graphed PyTorch baseline's throughput"
                               if got is not None else
                               "ParaLab against the graphed PyTorch baseline's throughput: not "
                               "measured (" + why_missing(failures, ("paralab", "graphed")) + ")")
                              + f" (goal >= {goal_ratio:g}x)"})
        ms = r["epoch_ms"]["paralab"]
        goals.append({"name": "paralab_epoch_ms", "required": epoch_goal_ms, "measured": ms,
                      "met": ms is not None and ms <= epoch_goal_ms,
                      "line": (f"ParaLab full epoch {ms:.1f} ms" if ms is not None else
                               "ParaLab full epoch: not measured ("
                               + why_missing(failures, ("paralab",)) + ")")
                              + f" (goal <= {epoch_goal_ms:g} ms)"})
    else:
        got = [r["ratio"] for r in rows]
        worst = None if None in got else min(got)
        goals.append({"name": "throughput_vs_book", "required": goal_ratio,
                      "measured": worst, "met": worst is not None and worst >= goal_ratio,
                      "line": "ParaLab / the book's PyTorch trainer at threads "
                              + ", ".join(f"{r['threads']}: {r['ratio']:.2f}x"
                                          if r["ratio"] is not None else
                                          f"{r['threads']}: not measured ("
                                          + why_missing(failures, ("paralab", "book"),
                                                        r["threads"]) + ")"
                                          for r in rows)
                              + f" (goal >= {goal_ratio:g}x at each)"})
    for g in goals:
        g["line"] = ("PASS: " if g["met"] else "FAIL: ") + g["line"]
    return goals


def table(device, rows):
    """The comparison as text lines."""
    lines = []
    for r in rows:
        entries = [("ParaLab", r["paralab_median"], r["epoch_ms"]["paralab"], None)]
        if device == "cuda":
            entries.append((BASELINES["graphed"]["label"], r["graphed_median"],
                            r["epoch_ms"]["graphed"], r["ratio_vs_graphed"]))
        entries.append((BASELINES["book"]["label"], r["pytorch_median"], r["epoch_ms"]["book"],
                        r["ratio"]))
        lines.append(f"threads {r['threads']} ({device}), medians:")
        lines.append(f"  {'program':<32} {'images/s':>10} {'ms/epoch':>10} {'ParaLab/this':>12}")
        for name, sps, ms, ratio_ in entries:
            if sps is None:
                lines.append(f"  {name:<32} {'failed':>10} {'':>10} {'':>12}")
                continue
            shown = "" if ratio_ is None else f"{ratio_:.2f}x"
            lines.append(f"  {name:<32} {sps:>10.0f} {ms:>10.1f} {shown:>12}")
    lines.append(f"ms/epoch = {FULL_EPOCH_IMAGES} images / median images/s (the timed steps are "
                 f"full {BATCH_SIZE}-image minibatches)")
    return lines


def write_atomically(doc, path):
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    try:
        os.link(tmp, path)  # refuses to replace an existing file
    finally:
        os.unlink(tmp)


def positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value
    return parse


def nonnegative_int(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--bench-runner", default=os.path.join(ROOT, "build", "bench_runner"))
    p.add_argument("--threads", type=positive(int), nargs="+", default=[1, 2])
    p.add_argument("--iterations", type=positive(int), default=None,
                   help="timed minibatches per run (default 60 on cpu, 225 on cuda)")
    p.add_argument("--warmup", type=nonnegative_int, default=5, help="excluded minibatches per run")
    p.add_argument("--repeats", type=positive(int), default=3)
    p.add_argument("--goal", type=positive(float), default=None,
                   help="required ParaLab/PyTorch throughput ratio: against the book's trainer "
                   "on cpu (default 2), against the graphed baseline on cuda (default 2.5)")
    p.add_argument("--epoch-goal-ms", type=positive(float), default=50.0,
                   help="cuda only: ParaLab's full epoch must take at most this (default 50)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--kernels", choices=("cudnn", "fused", "mixed"), default="cudnn",
                   help="ParaLab's conv stages on CUDA: cuDNN, its own kernels, or its own for "
                        "small filters and cuDNN for the rest (descriptor key 'kernels'; ignored "
                        "on the CPU)")
    p.add_argument("--steps-per-launch", type=positive(int), default=1,
                   help="cuda only: ParaLab's training steps per CUDA graph launch (single's "
                        "steps_per_launch, 1 to 64; default 1)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch for the baselines (default: this one)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    if args.goal is None:
        args.goal = 2.5 if cuda else 2.0
    if args.iterations is None:
        # On cuda a step is under a millisecond: 225 + 5 stays within the 234 full minibatches.
        args.iterations = 225 if cuda else 60
    full = FULL_EPOCH_IMAGES // BATCH_SIZE
    if args.iterations + args.warmup > full:
        p.error(f"--iterations + --warmup is {args.iterations + args.warmup}: at most {full}, the "
                f"full {BATCH_SIZE}-image minibatches of one epoch (the timed steps must all be "
                f"full ones)")
    if args.steps_per_launch > 64:
        p.error(f"--steps-per-launch is {args.steps_per_launch}: at most 64")
    if args.steps_per_launch != 1 and not cuda:
        p.error("--steps-per-launch is for --device cuda (CPU steps are not CUDA graphs)")
    if cuda:
        args.threads = [1]
    return args


def unwritable(path):
    """Why the results cannot be written to `path` (a new file), or None: checked before the
    runs, which take minutes, rather than after them."""
    directory = os.path.dirname(os.path.abspath(path))
    existing = directory
    while not os.path.exists(existing):  # write_atomically makes the missing directories
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    try:  # a file made and removed: permissions alone do not say it (root, /proc, read-only mounts)
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".compare-pytorch-probe.")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return f"cannot write in {existing} ({e.strerror})"
    return None


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(args.bench_runner) or not os.access(args.bench_runner, os.X_OK):
        return fail(f"{args.bench_runner}: not built (run scripts/build.sh)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join("results", f"compare-pytorch-{stamp}.json")
    if os.path.lexists(out):
        return fail(f"{out}: exists (results are never overwritten)")
    why = unwritable(out)
    if why:
        return fail(f"{out}: {why}")
    probe = "import torch, sys; sys.exit(0 if '%s' == 'cpu' or torch.cuda.is_available() else 3)"
    try:
        probed = subprocess.run([args.python, "-c", probe % args.device], capture_output=True,
                                text=True)
    except OSError as e:
        return fail(f"{args.python}: cannot run it ({e.strerror})")
    if probed.returncode == 3:
        return fail(f"{args.python}: torch sees no CUDA device")
    if probed.returncode:
        said = (probed.stderr.strip().splitlines() or ["no message"])[-1]
        if "No module named 'torch'" in said:
            return fail(f"{args.python}: torch is not installed "
                        "(scripts/install-deps.sh --with-torch)")
        return fail(f"{args.python}: importing torch failed: {said}")

    cuda = args.device == "cuda"
    keys = ["graphed", "book"] if cuda else ["book"]
    rows, env, baseline_docs, failures = [], None, {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in args.threads:
            runs = {"paralab": [], "graphed": [], "book": []}
            for repeat in range(1, args.repeats + 1):
                for key in ["paralab"] + keys:
                    try:
                        if key == "paralab":
                            sps, env = paralab_once(args, threads, tmp)
                        else:
                            sps, baseline_docs[key] = pytorch_once(args, key, threads, tmp)
                        runs[key].append(sps)
                        shown = f"{sps:.0f} images/s"
                    except RunFailed as e:
                        failures.append({"program": key, "threads": threads, "repeat": repeat,
                                         "error": str(e)})
                        shown = "FAILED: " + (str(e).splitlines() or ["no error"])[0]
                    print(f"threads {threads}, repeat {repeat}/{args.repeats}: {key} {shown}",
                          file=sys.stderr, flush=True)
            rows.append(summarise(args.device, threads, runs["paralab"], runs["book"],
                                  runs["graphed"]))

    goals = evaluate_goals(args.device, rows, args.goal, args.epoch_goal_ms, failures)
    book = baseline_docs.get("book") or baseline_docs.get("graphed") or {}
    doc = {"benchmark": "paralab-vs-pytorch-book-lenet",
           "command": sys.argv if argv is None else [PROG] + list(argv),
           "environment": {"paralab": env, "torch_version": book.get("torch_version"),
                           "torch_cuda_version": book.get("torch_cuda_version"),
                           "cudnn_version": book.get("cudnn_version"),
                           "torch_device_name": book.get("device_name"),
                           "tf32": book.get("tf32"),
                           "python": platform.python_version()},
           "config": {"device": args.device, "paralab_kernels": args.kernels,
                      "paralab_steps_per_launch": args.steps_per_launch,
                      "batch_size": BATCH_SIZE, "lr": LR, "seed": SEED,
                      "iterations": args.iterations,
                      "warmup": args.warmup, "repeats": args.repeats,
                      "order": ["paralab"] + keys,
                      "baselines": {k: {"baseline": baseline_docs.get(k, {}).get("baseline"),
                                        "args": BASELINES[k]["args"],
                                        "timing_method": (baseline_docs.get(k, {}).get("timing")
                                                          or {}).get("method"),
                                        "cuda_graph": baseline_docs.get(k, {}).get("cuda_graph")}
                                    for k in keys},
                      "epoch_ms_formula": f"{FULL_EPOCH_IMAGES} / median samples_per_s * 1000",
                      "epoch_goal_ms": args.epoch_goal_ms if cuda else None},
           "goal_ratio": args.goal,
           "rows": rows,
           "goals": [{k: g[k] for k in ("name", "required", "measured", "met")} for g in goals],
           "goal_met": all(g["met"] for g in goals),
           "failures": failures}
    write_atomically(doc, out)
    for line in table(args.device, rows):
        print(line)
    print(f"results: {out}")
    if failures:
        print(f"{PROG}: {len(failures)} run(s) failed (all in {out}); the first, "
              f"{failures[0]['program']} at threads {failures[0]['threads']}, repeat "
              f"{failures[0]['repeat']}: {failures[0]['error']}", file=sys.stderr)
    for g in goals:
        print(g["line"])
    sys.stdout.flush()
    return 1 if failures else 0


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
