#!/usr/bin/python3
"""ParaLab's single device against the book's PyTorch trainer, side by side in one invocation.

For each thread count, runs the same training (full Fashion-MNIST, batch 256, lr 0.2, seed 0,
--iterations minibatches after --warmup excluded ones) through
  * bench_runner (strategy "single", threads_per_device = T), and
  * experiments/baselines/pytorch_lenet.py (torch.set_num_threads(T)),
alternating the two --repeats times so that drift in the machine hits both alike, and reports the
median training throughput (images/s) of each and their ratio ParaLab / PyTorch.

ParaLab's iteration time includes the minibatch gather; the baseline's excludes it (it indexes
before starting its clock), so the ratio slightly favours PyTorch.

    /usr/bin/python3 experiments/baselines/compare_pytorch.py --threads 1 2
    (needs python3-torch: scripts/install-deps.sh --with-torch)

On a GPU (--device cuda): bench_runner with backend cuda (CUDA graphs on, as single's default)
against the trainer on torch's CUDA device, the thread count irrelevant (one row, threads 1);
the interpreter running this script must have torch with CUDA, and the default goal is 15x.

Writes results/compare-pytorch-<UTC time>.json (never overwriting) unless --out is given.
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


def fail(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(1)


def run_json(cmd, out_path):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    with open(out_path) as f:
        return json.load(f)


def paralab_once(args, threads, tmp):
    out = os.path.join(tmp, f"paralab-{threads}-{time.monotonic_ns()}.json")
    cmd = [args.bench_runner, os.path.join(ROOT, "experiments", "lenet-10epochs.json"),
           "--quiet", "--out", out,
           "--set", "name=compare-pytorch",
           "--set", "training.epochs=1",
           "--set", f"training.max_iterations_per_epoch={args.iterations + args.warmup}",
           "--set", f"training.warmup_iterations={args.warmup}",
           "--set", f"training.threads_per_device={threads}",
           "--set", f"backend={args.device}"]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    doc = run_json(cmd, out)
    run = doc["runs"][0]
    if run["status"] != "ok":
        fail(f"bench_runner run ended {run['status']}: {run['reason']}")
    return run["timing"]["samples_per_s"], doc["environment"]


def pytorch_once(args, threads, tmp):
    out = os.path.join(tmp, f"pytorch-{threads}-{time.monotonic_ns()}.json")
    cmd = [args.python, os.path.join(HERE, "pytorch_lenet.py"), "--quiet", "--device", args.device,
           "--epochs", "1", "--max-iterations-per-epoch", str(args.iterations + args.warmup),
           "--warmup-iterations", str(args.warmup), "--threads", str(threads),
           "--test-limit", "1000", "--json", out]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    doc = run_json(cmd, out)
    return doc["timing"]["samples_per_s"], doc.get("torch_version")


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


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--bench-runner", default=os.path.join(ROOT, "build", "bench_runner"))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--iterations", type=int, default=60, help="timed minibatches per run")
    p.add_argument("--warmup", type=int, default=5, help="excluded minibatches per run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--goal", type=float, default=None,
                   help="required ParaLab/PyTorch ratio (default 2 on cpu, 15 on cuda)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter with torch for the baseline (default: this one)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.goal is None:
        args.goal = 15.0 if args.device == "cuda" else 2.0
    if args.device == "cuda":
        args.threads = [1]
    if not os.access(args.bench_runner, os.X_OK):
        fail(f"{args.bench_runner}: not built (run scripts/build.sh)")
    probe = "import torch, sys; sys.exit(0 if '%s' == 'cpu' or torch.cuda.is_available() else 3)"
    got = subprocess.run([args.python, "-c", probe % args.device], capture_output=True).returncode
    if got == 3:
        fail(f"{args.python}: torch sees no CUDA device")
    if got:
        fail(f"{args.python}: torch is not installed (scripts/install-deps.sh --with-torch)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join("results", f"compare-pytorch-{stamp}.json")
    if os.path.exists(out):
        fail(f"{out}: exists (results are never overwritten)")

    rows, env, torch_version = [], None, None
    with tempfile.TemporaryDirectory() as tmp:
        for threads in args.threads:
            ours, theirs = [], []
            for _ in range(args.repeats):
                s, env = paralab_once(args, threads, tmp)
                ours.append(s)
                s, torch_version = pytorch_once(args, threads, tmp)
                theirs.append(s)
            row = {"threads": threads,
                   "paralab_samples_per_s": ours, "pytorch_samples_per_s": theirs,
                   "paralab_median": statistics.median(ours),
                   "pytorch_median": statistics.median(theirs)}
            row["ratio"] = row["paralab_median"] / row["pytorch_median"]
            rows.append(row)
            print(f"threads {threads}: ParaLab {row['paralab_median']:8.0f} images/s   "
                  f"PyTorch {row['pytorch_median']:8.0f} images/s   ratio {row['ratio']:.2f}x",
                  flush=True)

    doc = {"benchmark": "paralab-vs-pytorch-book-lenet",
           "command": sys.argv,
           "environment": {"paralab": env, "torch_version": torch_version,
                           "python": platform.python_version()},
           "config": {"device": args.device, "batch_size": 256, "lr": 0.2, "seed": 0,
                      "iterations": args.iterations,
                      "warmup": args.warmup, "repeats": args.repeats},
           "goal_ratio": args.goal,
           "rows": rows,
           "goal_met": all(r["ratio"] >= args.goal for r in rows)}
    write_atomically(doc, out)
    print(f"goal {args.goal:.1f}x {'met' if doc['goal_met'] else 'NOT met'}; results: {out}")


if __name__ == "__main__":
    main()
