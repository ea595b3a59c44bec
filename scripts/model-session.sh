#!/usr/bin/env bash
# Measure one self-consistent session for the performance model on this machine, then validate the
# model on it alone: compute fitted on the session's profiles, collectives on its allreduce_bench
# rows, every strategy run predicted (model/session.py). The way to check the model on a CPU other
# than the ones under results/reference/.
#
#   scripts/model-session.sh [--rounds N] [--label NAME] [--out DIR] [--short]
#
#   --rounds N   interleaved rounds (default 4; about 3-4 minutes each on 2 cores): each runs
#                experiments/model-profile.json, experiments/model-profile-concurrent.json beside a
#                second process computing the same step (the per-device slowdown of devices that
#                compute at once), allreduce_bench on 2 devices at 4 B..256 MiB by 2x (--sizes=fine), and
#                experiments/model-session.json, in that order, so that fit data and predicted runs
#                see the same machine state
#   --label NAME the machine's directory under results/reference/ (default cpu-<cores>core-<cpu>,
#                e.g. cpu-2core-epyc)
#   --out DIR    where the session goes (default results/reference/<label>/session-<UTC date>,
#                -<HHMM> added when that exists); it must not exist: nothing is overwritten
#   --short      CI's smoke test: one round, tiny profiles and strategy runs, a few sizes
#                (about 20 s); into a temporary directory unless --out is given
#
# Measure on an otherwise idle machine: the session's README.md records the load average before
# and after, and the report's noise floor is the rounds' own spread. Files are written to a
# temporary directory beside DIR and moved into place at the end, so an interrupted session leaves
# nothing behind: SIGINT, SIGTERM or SIGHUP stops the running measurement too, removes the
# unfinished session and exits 128 + the signal's number. Needs build/bench_runner and
# build/allreduce_bench (built if missing) and python3 with numpy.
set -euo pipefail
start=$PWD  # a relative --out is read from here, where the command was typed
cd "$(dirname "$0")/.."
rounds=4
label=""
out=""
short=0
die() { echo "model-session.sh: $*" >&2; exit 1; }
value() { [ $# -ge 3 ] && [ -n "$3" ] && [[ $3 != -* ]] || die "$1 needs $2"; }  # value OPTION WHAT "${2-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) value "$1" "a number" "${2-}"; rounds="$2"; shift ;;
    --label) value "$1" "a name" "${2-}"; label="$2"; shift ;;
    --out) value "$1" "a directory" "${2-}"; out="$2"; [[ $out == /* ]] || out="$start/$out"; shift ;;
    --short) short=1 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: '$rounds' is not a positive whole number"
[ -z "$label" ] || [[ $label =~ ^[A-Za-z0-9._-]+$ ]] || die "--label: '$label' (letters, digits, . _ - only)"

cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
cores=$(nproc)
if [ -z "$label" ]; then
  case "$cpu" in
    *EPYC*) family=epyc ;;
    *Xeon*) family=xeon ;;
    *) family=$(echo "${cpu:-unknown}" | tr -c 'A-Za-z0-9\n' ' ' | awk '{print tolower($1)}') ;;
  esac
  label="cpu-${cores}core-${family:-unknown}"
fi
if [ "$short" = 1 ]; then
  rounds=1
  if [ -z "$out" ]; then
    tmp_parent=$(mktemp -d /tmp/paralab-model-session.XXXXXX)
    trap 'rm -rf "$tmp_parent"' EXIT  # a smoke test's session is not kept
    out="$tmp_parent/session"
  fi
fi
if [ -z "$out" ]; then  # a second session on the same day gets the time too (names sort by time)
  out="results/reference/$label/session-$(date -u +%F)"
  [ -e "$out" ] && out="$out-$(date -u +%H%M)"
fi
[ -e "$out" ] && die "$out exists; give another --out (nothing is overwritten)"

build=${BUILD_DIR:-build}
runner=${BENCH_RUNNER:-$build/bench_runner}
bench=${ALLREDUCE_BENCH:-$build/allreduce_bench}
python=${PARALAB_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
"$python" -c 'import numpy' 2>/dev/null || die "$python has no numpy (Debian's python3-numpy, which python3-matplotlib from scripts/install-deps.sh brings)"
for t in "$runner" "$bench"; do
  if [ ! -x "$t" ]; then
    echo "model-session.sh: building $(basename "$t")"
    cmake --build "$build" --target "$(basename "$t")" >/dev/null
  fi
done

mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.session.XXXXXX")
load_pid=""
cleanup_work() {
  [ -z "$load_pid" ] || { kill -TERM "$load_pid" 2>/dev/null; wait "$load_pid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap 'cleanup_work; [ -n "${tmp_parent:-}" ] && rm -rf "$tmp_parent"; true' EXIT
# Each measurement runs with in_child (scripts/child.sh): a signal stops it too, and the EXIT trap
# then removes the unfinished session.
. scripts/child.sh
exec 3>&2  # the script's own stderr, for the interruption's line (a child's may go to a log)
stop_on_signals "model-session.sh: interrupted by {SIG}: nothing kept ($out not written)"

profile_args=(--quiet)
concurrent_args=(--quiet)
session_args=(--quiet)
bench_args=(--devices=2 --sizes=fine --benchmark_repetitions=2)
filter='^(allreduce/(naive|ring|tree)|allgather/ring|reduce_scatter/ring|memcpy)/devices:2'
if [ "$short" = 1 ]; then
  tiny=(--set training.max_iterations_per_epoch=2 --set training.warmup_iterations=1
    --set dataset.train_limit=2048 --set dataset.test_limit=100)
  profile_args+=("${tiny[@]}")
  concurrent_args+=("${tiny[@]}")
  session_args+=("${tiny[@]}")
  # The fit's least: latency rows (<= 4 KiB) and two sizes for the per-byte cost.
  filter="$filter/bytes:(4|4096|65536|1048576)/"
  bench_args=(--devices=2 --sizes=sweep --benchmark_repetitions=1)
fi

# The step timed while a second bench_runner process computes on the other core: that load is the
# same descriptor's batch-256 step over whole epochs (20: minutes, far longer than the profile),
# started a second before (its dataset loaded and computing) and stopped with SIGTERM after; its
# results are dropped.
load_runs='runs=[{"strategy":"single","label":"load","training":{"batch_size":256}}]'
load_sets=(--set "$load_runs" --set training.epochs=20 --set training.max_iterations_per_epoch=null)
concurrent() {  # concurrent OUT
  "$runner" experiments/model-profile-concurrent.json --quiet --out "$work/load.json" "${load_sets[@]}" \
    >"$work/load.log" 2>&1 &
  load_pid=$!
  sleep 1
  kill -0 "$load_pid" 2>/dev/null || { cat "$work/load.log" >&2; die "the load process beside the concurrent profile ended early (above)"; }
  in_child "$runner" experiments/model-profile-concurrent.json "${concurrent_args[@]}" --out "$1"
  kill -0 "$load_pid" 2>/dev/null || die "the load process ended before the concurrent profile did"
  kill -TERM "$load_pid"
  wait "$load_pid" 2>/dev/null || true
  load_pid=""
  rm -f "$work/load.json" "$work/load.log"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v l="${load_before%% *}" -v c="$cores" 'BEGIN { exit !(l > 0.5 * c) }' &&
  echo "model-session.sh: warning: load average $load_before on $cores cores: another job is running, and the session will measure it too" >&2
start=$(date +%s)
started=$(date -u '+%F %H:%M')
for i in $(seq 1 "$rounds"); do
  echo "model-session.sh: round $i of $rounds"
  in_child "$runner" experiments/model-profile.json "${profile_args[@]}" --out "$work/profile-$i.json"
  concurrent "$work/concurrent-$i.json"
  # Google Benchmark's table and context go to a log, shown only if the run fails.
  in_child "$bench" "${bench_args[@]}" --benchmark_filter="$filter" \
    --benchmark_out="$work/allreduce-$i.json" --benchmark_out_format=json >"$work/bench.log" 2>&1 ||
    { cat "$work/bench.log" >&2; die "allreduce_bench failed in round $i (above)"; }
  rm -f "$work/bench.log"
  in_child "$runner" experiments/model-session.json "${session_args[@]}" --out "$work/strategies-$i.json"
done
seconds=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -qv '^??' && echo " (with uncommitted changes)" || true)
isa=$(grep -m1 -o -w -E 'avx512f' /proc/cpuinfo || grep -m1 -o -w 'avx2' /proc/cpuinfo || echo "no AVX2")

{
  echo "# Session $(date -u +%F) on $label: one self-consistent CPU data set for the performance model"
  echo
  echo "Measured $started UTC with scripts/model-session.sh$([ "$short" = 1 ] && echo " --short") on"
  echo "\"${cpu:-unknown CPU}\" ($cores cores, $isa), the source tree at $commit$dirty (binaries: $runner, $bench),"
  echo "$rounds round(s) back to back in $((seconds / 60)) min $((seconds % 60)) s. Load average (1, 5, 15 min):"
  echo "$load_before before, $load_after after."
  echo
  echo "Each round, in this order:"
  echo
  echo '```'
  echo "bench_runner experiments/model-profile.json ${profile_args[*]} --out profile-<i>.json"
  echo "bench_runner experiments/model-profile-concurrent.json --set '$load_runs' \\"
  echo "  --set training.epochs=20 --set training.max_iterations_per_epoch=null &  # the load, stopped after"
  echo "bench_runner experiments/model-profile-concurrent.json ${concurrent_args[*]} --out concurrent-<i>.json"
  echo "allreduce_bench ${bench_args[*]} \\"
  echo "  --benchmark_filter='$filter' \\"
  echo "  --benchmark_out=allreduce-<i>.json --benchmark_out_format=json"
  echo "bench_runner experiments/model-session.json ${session_args[*]} --out strategies-<i>.json"
  echo '```'
  echo
  echo "The model validates on this directory alone: \`python3 -m model.session $out\`"
  echo "(compute fitted on the profiles, collectives on the allreduce_bench rows, every strategy run"
  echo "predicted; see model/session.py)."
} >"$work/README.md"

mv "$work" "$out"
trap '[ -n "${tmp_parent:-}" ] && rm -rf "$tmp_parent"; true' EXIT
echo "model-session.sh: $rounds round(s) in $seconds s -> $out"
"$python" -m model.session "$out"
