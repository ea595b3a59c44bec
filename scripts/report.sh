#!/usr/bin/env bash
# One command for the report (issue 16): measures what report/data/ lacks, fits the performance
# model (model/), predicts every committed reference run, projects to 1,024 devices and writes
# report/README.md, report/predictions.json and the figures.
#
#   scripts/report.sh            short profiles (LeNet, AlexNet) if missing; the accuracy sweep's 10-epoch files in
#                                DIR/data if any (all of them, as they are), else lr-batch.json at
#                                2 epochs, one seed (788 s from scratch on the 2-core VM, 2026-11-30)
#   scripts/report.sh --full     the accuracy sweep at 10 epochs, each file that is missing:
#                                lr-batch.json (seed 0, B 256..8192: 65 minutes on the 2-core VM),
#                                lr-batch-warmup.json (seed 0, 8 minutes), lr-batch-seeds.json for
#                                seeds 1 and 2 (27 minutes each; 2026-12-01, beside a C++ build)
#                                and 3 and 4 (the two side by side: 31 minutes, 2026-12-04, on a
#                                2-core AMD EPYC VM with fresh-machine-check.sh running beside them)
#   scripts/report.sh --short    CI's smoke test: tiny profiles and sweep into --out (default a
#                                temporary directory), then the whole report from them (~1 minute);
#                                AlexNet from the committed profile, not measured
#   --out DIR                    where the report goes (default report/)
#
# Measured inputs go to DIR/data/ and are kept: a second run only fits and writes (seconds). A
# measurement that is interrupted (Ctrl-C, SIGTERM: exit 128 + the signal) or fails keeps its
# finished runs in DIR/data/FILE.partial, which the next run resumes.
# Needs build/bench_runner (built here if missing) and python3 with numpy (matplotlib for figures).
set -euo pipefail
start=$PWD  # a relative --out is read from here, where the command was typed
cd "$(dirname "$0")/.."
mode=default
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --full) mode=full ;;
    --short) mode=short ;;
    --out)
      [ $# -ge 2 ] && [ -n "$2" ] && [[ $2 != -* ]] || { echo "report.sh: --out needs a directory" >&2; exit 1; }
      out="$2"; [[ $out == /* ]] || out="$start/$out"; shift ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "report.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
if [ "$mode" = short ] && [ -z "$out" ]; then
  out=$(mktemp -d /tmp/paralab-report-short.XXXXXX)
  trap 'rm -rf "$out"' EXIT  # a smoke test's report is not kept
fi
out=${out:-report}
python=${PARALAB_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
runner=${BENCH_RUNNER:-build/bench_runner}
if [ ! -x "$runner" ]; then
  echo "report.sh: building bench_runner"
  cmake --build "${BUILD_DIR:-build}" --target bench_runner >/dev/null
fi
data="$out/data"
mkdir -p "$data"
start=$(date +%s)

# Each measurement goes to FILE.partial and becomes FILE only when bench_runner has ended every
# run (exit 0), so that an interrupted or failed one is never taken for a finished one; the next
# report.sh resumes FILE.partial (bench_runner --resume keeps its ok runs). bench_runner runs with
# in_child (scripts/child.sh): a signal to the script (Ctrl-C, a timeout's SIGTERM) stops it too,
# keeps what it finished in FILE.partial and exits 128 + the signal's number.
. scripts/child.sh
exec 3>&2  # the script's own stderr, for the lines below (a child's may be filtered)
measuring=""
keep_partial() {  # what the run being measured wrote, if bench_runner ended it in order
  if [ -s "$measuring.next" ] && "$python" -c 'import json, sys
sys.exit(json.load(open(sys.argv[1])).get("state") not in ("complete", "interrupted"))' "$measuring.next" 2>/dev/null; then
    mv -f "$measuring.next" "$measuring.partial"
  else
    rm -f "$measuring.next"  # stopped at once (a second signal): the earlier .partial stands
  fi
}
on_signal() {  # on_signal NAME NUMBER
  trap '' INT TERM HUP
  stop_child
  local kept=""
  if [ -n "$measuring" ]; then
    keep_partial
    [ -f "$measuring.partial" ] && kept="; the finished runs are in $measuring.partial, which the next scripts/report.sh resumes"
  fi
  echo "report.sh: interrupted by SIG$1$kept" >&3
  exit $((128 + $2))
}
trap 'on_signal INT 2' INT
trap 'on_signal TERM 15' TERM
trap 'on_signal HUP 1' HUP
measure() {  # measure FILE BENCH_RUNNER_ARGS...
  measuring=$1
  shift
  local resume=() rc=0
  if [ -f "$measuring.partial" ]; then
    resume=(--resume "$measuring.partial")
    echo "report.sh: resuming $measuring.partial (its finished runs are kept)"
  fi
  rm -f "$measuring.next"
  in_child "$runner" "$@" --out "$measuring.next" "${resume[@]}" || rc=$?
  keep_partial
  if [ "$rc" -ne 0 ]; then
    echo "report.sh: bench_runner exited $rc measuring $measuring$([ -f "$measuring.partial" ] &&
      echo "; its finished runs are in $measuring.partial, which the next scripts/report.sh resumes (delete it to measure afresh)")" >&3
    exit "$rc"
  fi
  mv -f "$measuring.partial" "$measuring"
  measuring=""
}

# 1. Short profiles: the single step at batch 32..512 and each layer's forward+backward.
profile="$data/profile-cpu.json"
if [ ! -f "$profile" ]; then
  extra=()
  if [ "$mode" = short ]; then
    extra=(--set training.max_iterations_per_epoch=4 --set training.warmup_iterations=1 --set dataset.test_limit=200)
  fi
  echo "report.sh: profiling (experiments/model-profile.json) -> $profile"
  measure "$profile" experiments/model-profile.json --quiet "${extra[@]}"
fi

# 1b. AlexNet's short profile (experiments/model-profile-alexnet.json, ~2.5 minutes on 2 cores).
# --short measures none: it takes the committed report/data/profile-cpu-alexnet.json when there is
# one (the fit, validation and projections still run), and leaves AlexNet out otherwise.
alex_profile="$data/profile-cpu-alexnet.json"
if [ "$mode" = short ]; then
  alex_profile=report/data/profile-cpu-alexnet.json
elif [ ! -f "$alex_profile" ]; then
  echo "report.sh: profiling AlexNet (experiments/model-profile-alexnet.json) -> $alex_profile"
  measure "$alex_profile" experiments/model-profile-alexnet.json --quiet
fi

# 2. Accuracy versus global batch: results files, each "descriptor|--set ...|file", one seed each.
# The report takes every run once by (global batch, rule, seed) and aggregates over seeds.
sweep=()
if [ "$mode" = full ]; then
  # lr-batch.json is seed 0 at every batch and rule but sqrt+warm-up; lr-batch-warmup.json adds the
  # warm-up runs it lacks at B <= 1024; lr-batch-seeds.json repeats B <= 1024 for seeds 1 to 4.
  sweep=("experiments/lr-batch.json||$data/lr-batch-10ep.json"
    "experiments/lr-batch-warmup.json|--set training.seed=0|$data/lr-batch-10ep-warmup-seed0.json"
    "experiments/lr-batch-seeds.json|--set training.seed=1|$data/lr-batch-10ep-seed1.json"
    "experiments/lr-batch-seeds.json|--set training.seed=2|$data/lr-batch-10ep-seed2.json"
    "experiments/lr-batch-seeds.json|--set training.seed=3|$data/lr-batch-10ep-seed3.json"
    "experiments/lr-batch-seeds.json|--set training.seed=4|$data/lr-batch-10ep-seed4.json")
elif [ "$mode" = short ]; then
  tiny='--set dataset.train_limit=2048 --set dataset.test_limit=500 --set training.epochs=1'
  tiny_runs='runs=[{"strategy":"single","label":"B256 lr-none","training":{"batch_size":256}},{"strategy":"single","label":"B1024 lr-linear","training":{"batch_size":1024,"lr":0.8}},{"strategy":"data_parallel","devices":4,"batch_scaling":"weak","lr_scaling":"linear","lr_warmup_iterations":2,"allreduce":"tree","allow_oversubscription":true,"label":"B1024 lr-linear+warmup"}]'
  sweep=("experiments/lr-batch.json|$tiny --set training.seed=0|$data/lr-batch-short-seed0.json"
    "experiments/lr-batch.json|$tiny --set training.seed=1|$data/lr-batch-short-seed1.json")
else
  shopt -s nullglob
  have=("$data"/lr-batch-10ep*.json)
  shopt -u nullglob
  if [ ${#have[@]} -gt 0 ]; then  # whatever 10-epoch files are there, as they are
    for f in "${have[@]}"; do sweep+=("||$f"); done
  else
    sweep=("experiments/lr-batch.json|--set training.epochs=2|$data/lr-batch-2ep.json")
  fi
fi
acc=()
for s in "${sweep[@]}"; do
  IFS='|' read -r desc sets file <<<"$s"
  acc+=("$file")
  [ -f "$file" ] && continue
  set_args=()
  [ -n "$sets" ] && read -ra set_args <<<"$sets"
  [ "$mode" = short ] && set_args+=(--set "$tiny_runs")
  echo "report.sh: accuracy sweep ($desc ${set_args[*]:0:20}) -> $file"
  measure "$file" "$desc" --quiet "${set_args[@]}" 2> >(grep -v "oversubscri" >&2)
done

# 3. Fit, validate, project, write.
# (model.report refuses a named --profile-alexnet that is missing: name it only where it is.)
alex=()
[ -f "$alex_profile" ] && alex=(--profile-alexnet "$alex_profile")
"$python" -m model.report --profile "$profile" "${alex[@]}" --accuracy "${acc[@]}" --out "$out"
for f in README.md predictions.json; do
  [ -s "$out/$f" ] || { echo "report.sh: $out/$f was not written" >&2; exit 1; }
done
for section in "## 1. How good" "## 2. Why two GPUs" "## 3. Projections" "## 4. Accuracy"; do
  grep -q "^$section" "$out/README.md" || { echo "report.sh: $out/README.md lacks '$section'" >&2; exit 1; }
done
echo "report.sh: done in $(($(date +%s) - start)) s: $out/README.md"
