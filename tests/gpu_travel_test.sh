#!/bin/sh
# scripts/gpu-travel.sh in a scratch repository: hide takes results/ and report/ out of what
# travels (out of the index, ignored, their files untouched) and blocks commits; restore gives back
# the index and .git/info/exclude byte for byte; over the limit, hide undoes itself; bad
# arguments and a second hide are refused in one line.   usage: gpu_travel_test.sh SCRIPT
set -eu
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=$(mktemp -d /tmp/paralab-gpu-travel.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp"
git init -q . && git config user.email t@t && git config user.name t
mkdir -p scripts results/reference report/data core
cp "$script" scripts/gpu-travel.sh && chmod +x scripts/gpu-travel.sh
head -c 300000 /dev/zero >results/reference/big.json
head -c 200000 /dev/zero >report/data/sweep.json
echo 'int main() {}' >core/main.cpp
echo '/gpu-bundle/' >.gitignore
git add -A && git commit -q -m init
mkdir gpu-bundle && head -c 1000 /dev/zero >gpu-bundle/data
echo 'staged' >core/staged.cpp && git add core/staged.cpp  # a staged change survives hide/restore
echo '/own-ignore/' >.git/info/exclude
git ls-files -s >"$tmp.index-before"
cp .git/info/exclude "$tmp.exclude-before"
before=$(scripts/gpu-travel.sh size | cut -d' ' -f1)
[ "$before" -ge 501000 ] || fail "size before hiding: $before bytes (the results, the code, the bundle: >= 501000)"

out=$(scripts/gpu-travel.sh hide) || fail "hide exited non-zero: $out"
after=$(scripts/gpu-travel.sh size | cut -d' ' -f1)
[ "$after" -lt 10000 ] || fail "hidden, $after bytes would still travel"
[ "$after" -ge 1000 ] || fail "the carried bundle no longer counts ($after bytes)"
[ -z "$(git ls-files results report)" ] || fail "results/ or report/ still in the index"
git status --porcelain --untracked-files=all -- results report | grep -q '^??' &&
  fail "results/ or report/ untracked but not ignored"
[ -s results/reference/big.json ] && [ -s report/data/sweep.json ] || fail "hide touched the files"
git commit -q -m "would delete the results" >/dev/null 2>&1 && fail "a commit went through while hidden"
msg=$(scripts/gpu-travel.sh hide 2>&1) && fail "a second hide went through"
[ "$(echo "$msg" | wc -l)" -eq 1 ] && echo "$msg" | grep -q "already hidden" || fail "second hide: '$msg'"

scripts/gpu-travel.sh restore >/dev/null || fail "restore exited non-zero"
git ls-files -s | cmp -s - "$tmp.index-before" || fail "the index differs after restore"
cmp -s .git/info/exclude "$tmp.exclude-before" || fail ".git/info/exclude differs after restore"
[ ! -e .git/hooks/pre-commit ] || fail "the commit guard is left after restore"
[ -z "$(git status --porcelain -- results report)" ] || fail "results/ or report/ changed after restore"
scripts/gpu-travel.sh restore | grep -q "nothing hidden" || fail "a second restore did not say nothing was hidden"

# Over the limit even with the results hidden: hide refuses and leaves everything as it was.
truncate -s 70M core/huge.bin
msg=$(scripts/gpu-travel.sh hide 2>&1) && fail "hide went through with 70 MiB left to travel"
echo "$msg" | grep -q "over the device tool's" || fail "over the limit: '$msg'"
[ -n "$(git ls-files results)" ] || fail "refused hide left results/ out of the index"
[ ! -e .git/hooks/pre-commit ] || fail "refused hide left the commit guard"
rm core/huge.bin
msg=$(scripts/gpu-travel.sh bogus 2>&1) && fail "an unknown verb went through"
echo "$msg" | grep -q "^gpu-travel.sh: usage" || fail "unknown verb: '$msg'"
rm -f "$tmp.index-before" "$tmp.exclude-before"
echo PASS
