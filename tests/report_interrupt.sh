#!/bin/sh
# scripts/report.sh --short, interrupted and resumed (ctest: report_short). A SIGTERM while it
# profiles stops the profile too, keeps its finished runs in a .partial file (never under the
# name the report reads) and exits 143 with one line; the next report.sh resumes that file
# instead of starting over or taking it whole, and writes the whole report.
#   usage: report_interrupt.sh BENCH_RUNNER
root=$(cd "$(dirname "$0")/.." && pwd)
export BENCH_RUNNER="$1" PARALAB_PYTHON=/usr/bin/python3
tmp=$(mktemp -d /tmp/paralab-report-interrupt-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$root/tests/interrupt.sh"
profile="$tmp/r/data/profile-cpu.json"
runs() {  # runs FILE [STATUS]: how many runs FILE holds (with that status); 0 when unreadable
  /usr/bin/python3 -c 'import json, sys
try:
    runs = json.load(open(sys.argv[1]))["runs"]
except Exception:
    runs = []
print(len([r for r in runs if len(sys.argv) < 3 or r["status"] == sys.argv[2]]))' "$@"
}
state() { /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["state"])' "$1"; }

# Bad arguments: one line naming the argument, exit 1, nothing written.
for args in "--bogus|unknown argument '--bogus'" "--out|--out needs a directory"; do
  a=${args%%|*}
  want=${args#*|}
  rc=0
  err=$("$root/scripts/report.sh" --out "$tmp/bad" $a 2>&1) || rc=$?
  [ "$rc" -eq 1 ] || fail "report.sh $a exited $rc, not 1"
  case "$err" in "report.sh: $want"*) ;; *) fail "report.sh $a: '$err' does not say '$want'" ;; esac
  [ "$(echo "$err" | wc -l)" -eq 1 ] || fail "report.sh $a: more than one line: $err"
done
[ -z "$(ls -A "$tmp")" ] || fail "report.sh with bad arguments wrote $(ls -A "$tmp")"

# --out before --short stays where it was put (--short used to choose a temporary directory).
profiled_two() { [ "$(runs "$profile.next" ok)" -ge 2 ]; }  # the profile has finished two runs
"$root/scripts/report.sh" --out "$tmp/r" --short >"$tmp/first.log" 2>&1 &
interrupt_when $! "$tmp/first.log" "the profile finishing two runs" profiled_two
rc=$interrupted_rc
[ "$rc" -eq 143 ] || { cat "$tmp/first.log"; fail "report.sh on SIGTERM exited $rc, not 143"; }
last=$(tail -n 1 "$tmp/first.log")
[ "$last" = "report.sh: interrupted by SIGTERM; the finished runs are in $profile.partial, which the next scripts/report.sh resumes" ] ||
  fail "on SIGTERM, not the interruption's line: $last"
[ -e "$profile" ] && fail "the interrupted profile is under the name the report reads"
[ -e "$profile.next" ] && fail "the interrupted profile's working file was left"
[ "$(state "$profile.partial")" = interrupted ] || fail "$profile.partial is not an interrupted results file"
kept=$(runs "$profile.partial" ok)
[ "$kept" -ge 2 ] || fail "$profile.partial kept $kept finished runs, not at least 2"
running "$tmp/r/data/profile-cpu\.json" && fail "report.sh left bench_runner running"

# Ctrl-C in a terminal reaches the whole process group, bench_runner too, before report.sh's
# trap stops it: a second signal, which made bench_runner stop at once and left a file in state
# running that report.sh did not keep (every finished run lost). Each measurement now runs in a
# session of its own (scripts/child.sh), so that it gets one signal, from report.sh.
rm -rf "$tmp/c"
cprofile="$tmp/c/data/profile-cpu.json"
profiled_two_c() { [ "$(runs "$cprofile.next" ok)" -ge 2 ]; }
in_own_group "$root/scripts/report.sh" --out "$tmp/c" --short >"$tmp/ctrl-c.log" 2>&1 &
ctrl_c_when $! "$tmp/ctrl-c.log" "the profile finishing two runs" profiled_two_c
rc=$interrupted_rc
[ "$rc" -eq 130 ] || { cat "$tmp/ctrl-c.log"; fail "report.sh on Ctrl-C exited $rc, not 130"; }
[ "$(tail -n 1 "$tmp/ctrl-c.log")" = "report.sh: interrupted by SIGINT; the finished runs are in $cprofile.partial, which the next scripts/report.sh resumes" ] ||
  { cat "$tmp/ctrl-c.log"; fail "on Ctrl-C, the finished runs were not kept"; }
[ "$(state "$cprofile.partial")" = interrupted ] || fail "$cprofile.partial is not an interrupted results file"
[ "$(runs "$cprofile.partial" ok)" -ge 2 ] || fail "on Ctrl-C, $cprofile.partial kept fewer than 2 runs"
running "$tmp/c/data/profile-cpu\.json" && fail "report.sh left bench_runner running after Ctrl-C"

# The next report.sh resumes it: the finished runs kept, the rest measured, the report written.
out=$("$root/scripts/report.sh" --short --out "$tmp/r" 2>&1) || { echo "$out"; fail "the second report.sh exited non-zero"; }
echo "$out" | grep -q "report.sh: resuming $profile.partial (its finished runs are kept)" ||
  { echo "$out"; fail "the second report.sh did not resume the profile"; }
[ -e "$profile.partial" ] && fail "the resumed profile's .partial was left"
[ "$(state "$profile")" = complete ] || fail "the resumed profile is not complete"
/usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["resumed_from"]["runs_kept"] == int(sys.argv[2]), d["resumed_from"]
assert all(r["status"] == "ok" for r in d["runs"]) and len(d["runs"]) == 11, [r["status"] for r in d["runs"]]' \
  "$profile" "$kept" || fail "the resumed profile does not hold the kept runs and the rest, all ok"
[ -s "$tmp/r/README.md" ] || fail "the resumed report.sh wrote no report"
echo PASS
