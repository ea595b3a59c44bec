#!/bin/sh
# scripts/model-session.sh and python3 -m model.session: a short session measured and validated,
# and each bad input refused with one line, a non-zero exit and nothing written.
#   usage: model_session.sh BENCH_RUNNER ALLREDUCE_BENCH
root=$(cd "$(dirname "$0")/.." && pwd)
export BENCH_RUNNER="$1" ALLREDUCE_BENCH="$2" PARALAB_PYTHON=/usr/bin/python3
tmp=$(mktemp -d /tmp/paralab-model-session-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
. "$root/tests/interrupt.sh"

# Bad arguments: one line naming the argument, exit 1.
refused() {  # refused PATTERN ARGS...: the script must exit 1 and say PATTERN in one line
  pattern="$1"; shift
  out=$("$root/scripts/model-session.sh" "$@" 2>&1) && fail "model-session.sh $* exited 0"
  echo "$out" | grep -q -- "$pattern" || fail "model-session.sh $*: '$out' does not say '$pattern'"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "model-session.sh $*: more than one line: $out"
}
refused "unknown argument '--bogus'" --bogus
refused "--rounds: '0'" --rounds 0
refused "--rounds: 'two'" --rounds two
refused "--label: 'a/b'" --label a/b
mkdir "$tmp/exists" && touch "$tmp/exists/keep"
refused "$tmp/exists exists" --out "$tmp/exists"
[ -f "$tmp/exists/keep" ] || fail "an existing --out was touched"

# model.session on what is not a session.
out=$(cd "$root" && /usr/bin/python3 -m model.session "$tmp/none" 2>&1) && fail "model.session on a missing directory exited 0"
echo "$out" | grep -q "$tmp/none: no such directory" || fail "model.session, missing directory: $out"
out=$(cd "$root" && /usr/bin/python3 -m model.session "$tmp/exists" 2>&1) && fail "model.session on an empty directory exited 0"
echo "$out" | grep -q "no profile-<i>.json, no allreduce-<i>.json, no strategies-<i>.json" ||
  fail "model.session, empty directory: $out"

# Interrupted (a timeout's SIGTERM) while the concurrent profile and its load run: exit 143 with
# one line, no session, no temporary directory, and no measurement left running.
"$root/scripts/model-session.sh" --short --out "$tmp/cut" >"$tmp/cut.log" 2>&1 &
interrupt_when $! "$tmp/cut.log" "the concurrent profile's load starting" \
  running "--out $tmp/\.session\.[A-Za-z0-9]*/load\.json"
rc=$interrupted_rc
[ "$rc" -eq 143 ] || { cat "$tmp/cut.log"; fail "model-session.sh on SIGTERM exited $rc, not 143"; }
[ "$(tail -n 1 "$tmp/cut.log")" = "model-session.sh: interrupted by SIGTERM: nothing kept ($tmp/cut not written)" ] ||
  fail "on SIGTERM, not the interruption's line: $(tail -n 1 "$tmp/cut.log")"
[ -e "$tmp/cut" ] && fail "an interrupted session was kept"
ls -a "$tmp" | grep -q '^\.session\.' && fail "an interrupted session left its temporary directory"
running "$tmp/\.session" && fail "an interrupted session left a measurement running"
rm -f "$tmp/cut.log"

# A short session: measured, moved into place whole, validated.
out=$("$root/scripts/model-session.sh" --short --out "$tmp/s" 2>&1) || { echo "$out"; fail "model-session.sh --short exited non-zero"; }
echo "$out"
for f in README.md profile-1.json concurrent-1.json allreduce-1.json strategies-1.json; do
  [ -s "$tmp/s/$f" ] || fail "the session lacks $f"
done
[ -e "$tmp/s/load.json" ] && fail "the concurrent profile's load left its results in the session"
for c in /proc/[0-9]*/cmdline; do  # the load bench_runner, if it were left running
  case "$(tr '\0' ' ' <"$c" 2>/dev/null)" in
    "$BENCH_RUNNER experiments/model-profile-concurrent.json --quiet --out $tmp/"*)
      fail "the concurrent profile's load process is still running ($c)" ;;
  esac
done
echo "$out" | grep -Eq "two devices computing at once: x[0-9.]+ per device \(from 1 concurrent" ||
  fail "the validation does not use the concurrent profile"
ls -a "$tmp" | grep -q '^\.session\.' && fail "a temporary .session.* directory was left behind"
echo "$out" | grep -Eq "cpu/training +[0-9]+ held-out samples, median \|error\| +[0-9.]+ %" ||
  fail "no training validation line"
echo "$out" | grep -Eq "cpu/allreduce_bench +[0-9]+ held-out samples" || fail "no allreduce_bench validation line"
grep -q "scripts/model-session.sh --short" "$tmp/s/README.md" || fail "the README does not say how it was measured"
(cd "$root" && /usr/bin/python3 -m model.session "$tmp/s" --json "$tmp/s.json" >/dev/null) || fail "model.session --json exited non-zero"
/usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); assert d['points'] and d['summary']" "$tmp/s.json" ||
  fail "model.session --json wrote no points"
echo PASS
