#!/usr/bin/env bash
# The files of scripts/gpu-check.sh's calls on a GPU host, into results/reference/<gpu>-<date>/
# where the performance model reads a GPU's runs (model/calibrate.py), with a PROVENANCE.md of
# the facts the files hold: the GPU, driver and libraries, the commit built, each call's parts and
# verdicts, and what every file is.
#
#   scripts/gpu-results.sh [--date YYYY-MM-DD] [--reference DIR] OUT [OUT ...]
#
# OUT: one call's output folder (its gpu-check-files.tar.gz and summary.txt), in the order the
# calls ran. A later call's file replaces an earlier one of the same name; each call's summary is
# kept as summary-call<N>.txt (summary.txt when there is one call). <gpu>: gpu.csv's model after
# "NVIDIA" in lower case (h200, h100, ...); <date>: the UTC date gpu-check.json's environment
# records (--date otherwise or to choose). --reference: where the directory goes (default
# results/reference). An existing directory is never written into: one line, exit 1, nothing
# made. The analysis (what the figures show against the goals) is written by hand below the facts.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."
# A path as given from where the script was called (it runs from the repository root).
given() { [[ $1 == /* ]] && echo "$1" || echo "$here/$1"; }
die() { echo "gpu-results.sh: $*" >&2; exit 1; }
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

date_arg="" reference=results/reference outs=()
while (($#)); do
  case $1 in
    --help | -h) usage; exit 0 ;;
    --date | --reference)
      (($# >= 2)) || { echo "gpu-results.sh: $1 needs a value" >&2; exit 2; }
      [[ $1 == --date ]] && date_arg=$2 || reference=$(given "$2")
      shift 2 ;;
    -*) echo "gpu-results.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) outs+=("$(given "$1")"); shift ;;
  esac
done
((${#outs[@]})) || { echo "gpu-results.sh: no call's output folder given (see --help)" >&2; exit 2; }
if [[ -n $date_arg && ! $date_arg =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]]; then
  echo "gpu-results.sh: --date '$date_arg' is not YYYY-MM-DD" >&2
  exit 2
fi
for o in "${outs[@]}"; do
  [[ -f $o/gpu-check-files.tar.gz ]] || die "$o: no gpu-check-files.tar.gz (a gpu-check.sh call's \$OUT)"
  [[ -f $o/summary.txt ]] || die "$o: no summary.txt (a gpu-check.sh call's \$OUT)"
done
[[ -d $reference ]] || die "$reference: no such directory"

stage=$(mktemp -d "$reference/.gpu-results.XXXXXX")
trap 'rm -rf "$stage"' EXIT
n=0
for o in "${outs[@]}"; do
  n=$((n + 1))
  tar -xzf "$o/gpu-check-files.tar.gz" -C "$stage" || die "$o/gpu-check-files.tar.gz: cannot unpack"
  rm -f "$stage/summary.txt"
  cp "$o/summary.txt" "$stage/summary-call$n.txt"
done
((n > 1)) || mv "$stage/summary-call1.txt" "$stage/summary.txt"

# The directory's name and PROVENANCE.md, from the files (Python: they are JSON and CSV).
name=$(/usr/bin/python3 - "$stage" "$date_arg" <<'PY'
import csv, glob, json, os, re, sys

stage, date_arg = sys.argv[1], sys.argv[2]


def fail(msg):
    print("gpu-results.sh: " + msg, file=sys.stderr)
    sys.exit(1)


def load(name):
    try:
        with open(os.path.join(stage, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


try:
    with open(os.path.join(stage, "gpu.csv")) as f:
        rows = [r for r in csv.reader(f, skipinitialspace=True) if r]
    gpu, driver, memory = rows[1][:3]
except (OSError, IndexError, ValueError):
    fail("gpu.csv: no GPU named in the calls' files (nvidia-smi failed on the host?)")
sys.path.insert(0, os.getcwd())  # the repository root: the model's name of a GPU
from model.calibrate import gpu_kind  # noqa: E402
kind = gpu_kind(gpu)
if not kind:
    fail("gpu.csv: '%s' is not an NVIDIA GPU's name" % gpu)

check = load("gpu-check.json") or {}
env = check.get("environment") or {}
date = date_arg or (env.get("utc_time") or "")[:10]
if not re.match(r"^\d{4}-\d{2}-\d{2}$", date):
    fail("gpu-check.json: no UTC date recorded; give one with --date YYYY-MM-DD")
sms = sorted({d.get("sm_count") for r in check.get("runs", []) for d in r["config"].get("device_list") or []
              if d.get("sm_count")})
if not sms:
    sweep = load("allreduce-cuda-sweep.json") or {}
    sms = [int(sweep.get("context", {}).get("paralab_gpu_sm_count", 0))] if sweep else []
commit = ((env.get("git") or {}).get("build") or {})
libs = env.get("libraries") or {}

summaries = sorted(glob.glob(os.path.join(stage, "summary*.txt")))
calls = []
for s in summaries:
    with open(s) as f:
        lines = [l.rstrip("\n") for l in f]
    start = next((l for l in lines if re.match(r"gpu-check: budget \d+ s; parts: ", l)), "")
    end = next((l for l in reversed(lines) if re.match(r"gpu-check: (PASS|FAIL) after ", l)), "")
    verdicts = [l[len("gpu-check: "):] for l in lines
                if l.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: ", "gpu-check: NOT RUN: "))]
    calls.append((os.path.basename(s), start, end, verdicts))

DESCRIBE = [
    (r"^gpu\.csv$", "nvidia-smi: the GPU's name, driver and memory"),
    (r"^(configure|build)\.log$", "CMake's configure and build output (the CUDA, cuDNN, NCCL and MPI found)"),
    (r"^summary(-call\d+)?\.txt$", "gpu-check.sh's summary of the call: every goal's PASS/FAIL line"),
    (r"^(tests/)?test_fused_kernels\.log$", "the own kernels under the CPU emulation of CUDA"),
    (r"^(tests/)?test_[a-z_]+\.log$", "the GPU tests (`*cuda*:*Cuda*`)"),
    (r"^runs/det-", "same seed, same bits: two runs per kernel set, separate processes"),
    (r"^runs/speed-", "the speed part's runs: the kernel sets and configurations, alternating"),
    (r"^runs/|^core-runs\.log$", "the core parts' other runs and their output"),
    (r"^compare-pytorch", "`compare_pytorch.py --device cuda`: against PyTorch's graphed LeNet and the book's trainer"),
    (r"^allreduce-cuda-sweep\.json$", "the performance model's collective sweep (gpu-check.sh sweep)"),
    (r"^allreduce-cuda(-eager|-per-rank|-whole-steps)?\.json$",
     "allreduce_bench: the collectives goals' rows (one CUDA graph per collective; eager; each message its "
     "receiver's kernel; a kernel per collective step)"),
    (r"^allreduce-launches\.json$", "allreduce_bench --launches: the cost of the ranks' kernel launches"),
    (r"^allreduce_bench.*\.log$", "allreduce_bench's output"),
    (r"^gpu-check-connections32\.json$", "data_parallel on 8 devices with 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)"),
    (r"^gpu-check(-per-rank)?\.json$",
     "`bench_runner experiments/gpu-check.json` (-per-rank: runs retried without whole steps)"),
    (r"^bench_runner.*\.log$", "bench_runner's output"),
    (r"^scaling-gpu", "`bench_runner experiments/scaling.json --set backend=cuda --plot` and its plots"),
    (r"^scaling-main-command\.log$", "the main command as a user runs it"),
    (r"^lenet-10epochs-seeds", "the 10-epoch accuracy bar, seeds 0-4, per kernel set"),
    (r"^sanitizer-", "compute-sanitizer"),
    (r"^ncu-", "ncu: the time of one step's kernels, per kernel"),
    (r"^alexnet-gpu", "AlexNet on one GPU and on virtual devices (gpu-check.sh models)"),
    (r"^PROVENANCE\.md$", "this file"),
]
files = []
for root, _, names in os.walk(stage):
    for f in names:
        rel = os.path.relpath(os.path.join(root, f), stage)
        files.append(rel)
groups = {}
for rel in sorted(files):
    what = next((d for p, d in DESCRIBE if re.search(p, rel)), "")
    key = what or rel
    groups.setdefault(key, []).append(rel)

L = []
w = L.append
w("# Provenance")
w("")
w("One %s (%s SMs, %s, driver %s; `gpu.csv`)%s, on %s (UTC). Built there from commit %s%s with "
  "`scripts/gpu-check.sh`; gathered by `scripts/gpu-results.sh` from %d call(s)." % (
      gpu, "/".join(str(x) for x in sms) or "?", memory, driver,
      "; " + ", ".join("%s %s" % kv for kv in sorted(libs.items())) if libs else "",
      date, (commit.get("commit") or "?")[:12],
      " (recorded dirty: %s)" % json.dumps(commit.get("dirty")) if commit else "", len(calls)))
w("")
w("## Calls, in order")
for name, start, end, verdicts in calls:
    w("")
    w("`%s`: %s; %s" % (name, start[len("gpu-check: "):] if start else "no start line",
                        end[len("gpu-check: "):] if end else "no end line (stopped before its end)"))
    w("")
    for v in verdicts:
        w("- " + v)
w("")
w("## Files")
w("")
w("| file | what |")
w("|---|---|")
for key, rels in groups.items():
    shown = ", ".join("`%s`" % r for r in rels[:4]) + (" and %d more" % (len(rels) - 4) if len(rels) > 4 else "")
    w("| %s | %s |" % (shown, key if key not in rels else "(not described here: see the summaries)"))
with open(os.path.join(stage, "PROVENANCE.md"), "w") as f:
    f.write("\n".join(L) + "\n")
print("%s-%s" % (kind, date))
PY
) || exit 1
target="$reference/$name"
[[ ! -e $target ]] || die "$target exists: nothing written (name another date with --date)"
mv "$stage" "$target"
trap - EXIT
chmod 755 "$target"
echo "gpu-results.sh: wrote $target ($(find "$target" -type f | wc -l) files, PROVENANCE.md with the facts)"
# What the performance model makes of it.
if why=$(/usr/bin/python3 -c "
import os, sys
from model import calibrate
try:
    print(calibrate.gpu_run(os.path.abspath(sys.argv[1])))
except (OSError, ValueError, KeyError, TypeError) as e:
    print(e); sys.exit(1)" "$target" 2>&1); then
  echo "gpu-results.sh: the performance model fits it (scripts/report.sh): $why"
else
  echo "gpu-results.sh: the performance model cannot fit it (its other files stand): $why"
fi
echo "gpu-results.sh: add what the figures show against the goals to $target/PROVENANCE.md by hand"
