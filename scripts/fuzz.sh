#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz: the IDX reader, the descriptor parser with --set, the
# --resume reader) with clang, ASan and UBSan in scripts/sanitize.sh's ASan build (build-asan/,
# which CI has built already), and runs each from its committed corpus (tests/fuzz/corpus/<target>).
# Prints each target's executions and exits non-zero on any crash, leak, timeout or out-of-memory
# (the reproducer is saved in build-asan/fuzz-findings/).
#   scripts/fuzz.sh [--seconds N] [--runs N] [--grow-corpus] [target ...]
#   --seconds N     give each target N seconds of a core (default 60; CI uses this): with no
#                   more targets than cores, each runs N seconds on its own core; with more,
#                   all run at once for N x targets / cores seconds (3 on 2 cores: 90 s)
#   --runs N        stop each target after N executions instead (e.g. 1000000)
#   --grow-corpus   merge the new inputs that add coverage into the committed corpus
# Installs clang and its runtimes with apt-get when missing (scripts/install-deps.sh --with-clang).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
cd "$(dirname "$0")/.."
seconds=60 runs="" grow=0 targets=()
# count OPTION "${2-}": a whole number > 0 follows the option (0 is no limit to libFuzzer).
count() {
  [[ ${2-} =~ ^[1-9][0-9]*$ ]] ||
    { echo "fuzz.sh: $1 needs a whole number > 0, not '${2-}'" >&2; exit 2; }
}
while (($#)); do
  case "$1" in
    --seconds) count "$1" "${2-}"; seconds=$2; shift 2 ;;
    --runs) count "$1" "${2-}"; runs=$2; shift 2 ;;
    --grow-corpus) grow=1; shift ;;
    fuzz_idx|fuzz_descriptor|fuzz_results) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (known: --seconds N, --runs N, --grow-corpus, fuzz_idx, fuzz_descriptor, fuzz_results)" >&2; exit 2 ;;
  esac
done
((${#targets[@]})) || targets=(fuzz_idx fuzz_descriptor fuzz_results)

# The ASan build's configuration (-O1 -g1, as libFuzzer's documentation builds), these targets only.
BUILD_TARGETS="${targets[*]}" scripts/sanitize.sh --build-only asan
build=build-asan findings=build-asan/fuzz-findings
mkdir -p "$findings"
# One libFuzzer process per target (each is single-threaded). With --seconds and more targets
# than cores they all run at once, each for N x targets / cores seconds of wall time: the same N
# seconds of a core each, in 90 s instead of two slots of 60 s for 3 targets on 2 cores (the
# second slot left a core idle). With --runs, as many at once as there are cores.
slots=$(nproc)
wall=$seconds
if [[ -z $runs ]] && ((${#targets[@]} > slots)); then
  wall=$(((seconds * ${#targets[@]} + slots - 1) / slots))
  slots=${#targets[@]}
fi
fuzz_one() {
  local t=$1 corpus=tests/fuzz/corpus/${1#fuzz_} work limit log=$findings/$1.log
  work=$(mktemp -d)
  limit=(-max_total_time="$wall")
  [[ -z $runs ]] || limit=(-runs="$runs")
  # New inputs go to a scratch directory first; the committed corpus only grows on request.
  if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     "$build/$t" "$work" "$corpus" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -artifact_prefix="$findings/$t-" -print_final_stats=1 \
       > "$log" 2>&1; then
    echo ok > "$findings/$t.verdict"
  else
    echo "FAILED (see $log and $findings/)" > "$findings/$t.verdict"
  fi
  if ((grow)); then
    "$build/$t" -merge=1 "$corpus" "$work" > /dev/null 2>&1
  fi
  rm -rf "$work"
}
for t in "${targets[@]}"; do
  rm -f "$findings/$t.verdict"
  while (($(jobs -rp | wc -l) >= slots)); do wait -n || true; done
  fuzz_one "$t" &
done
wait
status=0
for t in "${targets[@]}"; do
  verdict=$(cat "$findings/$t.verdict" 2>/dev/null || echo "FAILED (no verdict: see $findings/$t.log)")
  [[ $verdict == ok ]] || status=1
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$findings/$t.log" | tail -1)
  echo "fuzz.sh: $t: ${execs:-?} executions, $verdict"
done
exit $status
