#!/bin/bash
# The threads launcher against mpirun on this machine, interleaved so that both see the same load:
#   1. bench_runner experiments/mpi-vs-threads.json (data_parallel/ring, 2 CPU devices, batch
#      256) in one process, under `mpirun -np 2` (Open MPI's default binding) and under
#      `mpirun -np 2 --bind-to none` (ParaLab pins the ranks itself), ROUNDS times in turn;
#   2. allreduce_bench's ring allreduce of the LeNet gradient (516,272 bytes) in one process and
#      under `mpirun -np 2`, ROUNDS times in turn.
# Prints each measurement, the medians and the ratios MPI / threads; writes everything to
# OUT/summary.json (the results files and benchmark outputs beside it). A failed or interrupted
# run (Ctrl-C, SIGTERM) stops its measurement and writes nothing.
#
#   scripts/mpi-vs-threads.sh [--rounds N] [--build DIR] [--out DIR]
#
# Needs a build with MPI (CMake says "MPI ... ON") and Open MPI's mpirun.
set -euo pipefail

rounds=3
build=build
out=""
# value OPTION WHAT "${2-}": the option's value is there and is not another option.
value() {
  [[ $# -ge 3 && -n $3 && $3 != -* ]] ||
    { echo "mpi-vs-threads.sh: $1 needs $2 (see --help)" >&2; exit 1; }
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) value "$1" "a number" "${2-}"; rounds="$2"; shift 2 ;;
    --build) value "$1" "a directory" "${2-}"; build="$2"; shift 2 ;;
    --out) value "$1" "a directory" "${2-}"; out="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "mpi-vs-threads.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
done
here="$(cd "$(dirname "$0")/.." && pwd)"
runner="$(cd "$build" 2>/dev/null && pwd)/bench_runner"
bench="$(dirname "$runner")/allreduce_bench"
for b in "$runner" "$bench"; do
  [[ -x "$b" ]] || { echo "mpi-vs-threads.sh: no $b (build first: scripts/build.sh)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "mpi-vs-threads.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "mpi-vs-threads.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 1; }
out="${out:-$here/results/mpi-vs-threads-$(date -u +%Y%m%dT%H%M%SZ)}"
while [[ "$out" == ?*/ ]]; do out="${out%/}"; done  # OUT.partial must sit beside OUT, not in it
if [[ -e "$out" ]]; then echo "mpi-vs-threads.sh: $out exists (results are never overwritten)" >&2; exit 1; fi
# The measurements go to OUT.partial, renamed to OUT once the summary is written: a failed or
# interrupted run leaves nothing under either name (OUT's absence is what "not measured" means).
# Each measurement is a child the script waits for (scripts/child.sh), so a signal stops it too.
final="$out"
out="$final.partial"
rm -rf "$out"
mkdir -p "$out"
trap 'rm -rf "$out"' EXIT
. "$here/scripts/child.sh"
exec 3>&2
stop_on_signals "mpi-vs-threads.sh: interrupted by {SIG}: nothing kept ($final not written)"
measure() {  # measure CMD...: CMD in a child; its failure ends the script with one line
  local rc=0
  in_child "$@" || rc=$?
  [[ $rc == 0 ]] || { echo "mpi-vs-threads.sh: '$*' failed (exit $rc): nothing kept ($final not written)" >&2; exit 1; }
}
mpirun=(mpirun --oversubscribe)
[[ "$(id -u)" == 0 ]] && mpirun+=(--allow-run-as-root)
descriptor="$here/experiments/mpi-vs-threads.json"

for ((i = 1; i <= rounds; i++)); do
  measure "$runner" "$descriptor" --out "$out/threads-$i.json" --quiet
  measure "${mpirun[@]}" -np 2 "$runner" "$descriptor" --out "$out/mpi-$i.json" --quiet
  measure "${mpirun[@]}" --bind-to none -np 2 "$runner" "$descriptor" --out "$out/mpi-unbound-$i.json" --quiet
  args=(--sizes=lenet --devices=2 --benchmark_filter='allreduce/ring' --benchmark_format=json)
  measure "$bench" "${args[@]}" --benchmark_out="$out/bench-threads-$i.json" >/dev/null
  measure "${mpirun[@]}" -np 2 "$bench" "${args[@]}" --benchmark_out="$out/bench-mpi-$i.json" >/dev/null
  echo "round $i/$rounds done" >&2
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
from pathlib import Path
out, rounds = Path(sys.argv[1]), int(sys.argv[2])

def step(name):
    run = json.loads((out / name).read_text())["runs"][0]
    if run["status"] != "ok":
        sys.exit(f"mpi-vs-threads.sh: {out / name}: run {run['status']}: {run['reason']}")
    return run["timing"]["median_iteration_ms"]

def ring_us(name):
    rows = [b for b in json.loads((out / name).read_text())["benchmarks"]
            if b.get("run_type", "iteration") == "iteration" and "error_occurred" not in b]
    if not rows:
        sys.exit(f"mpi-vs-threads.sh: {out / name}: no ring allreduce row")
    return rows[0]["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[rows[0]["time_unit"]]

series = {
    "step_ms_threads": [step(f"threads-{i}.json") for i in range(1, rounds + 1)],
    "step_ms_mpi": [step(f"mpi-{i}.json") for i in range(1, rounds + 1)],
    "step_ms_mpi_bind_none": [step(f"mpi-unbound-{i}.json") for i in range(1, rounds + 1)],
    "ring_lenet_us_threads": [ring_us(f"bench-threads-{i}.json") for i in range(1, rounds + 1)],
    "ring_lenet_us_mpi": [ring_us(f"bench-mpi-{i}.json") for i in range(1, rounds + 1)],
}
med = {k: statistics.median(v) for k, v in series.items()}
ratios = {
    "step mpi / threads": med["step_ms_mpi"] / med["step_ms_threads"],
    "step mpi --bind-to none / threads": med["step_ms_mpi_bind_none"] / med["step_ms_threads"],
    "ring allreduce mpi / threads": med["ring_lenet_us_mpi"] / med["ring_lenet_us_threads"],
}
for k, v in series.items():
    print(f"{k:24s} " + "  ".join(f"{x:8.2f}" for x in v) + f"   median {med[k]:8.2f}")
for k, v in ratios.items():
    print(f"{k:36s} {v:.2f}x")
(out / "summary.json").write_text(json.dumps(
    {"rounds": rounds, "series": series, "medians": med, "ratios": ratios}, indent=1) + "\n")
EOF
trap '' INT TERM HUP
mv "$out" "$final"
trap - EXIT
echo "written: $final/summary.json"
