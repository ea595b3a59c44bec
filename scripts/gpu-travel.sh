#!/usr/bin/env bash
# What travels to the GPU machine with scripts/gpu-check.sh. The device tool sends the checkout's
# tracked and untracked-not-ignored files, plus the carried paths (gpu-bundle/ and
# .paralab-source-commit), 64 MiB at most. The committed measurements (results/ and report/, about
# 60 MiB of JSON) are not needed there, and beside gpu-bundle's 30 MiB of Fashion-MNIST they would
# pass the limit, so for the call they leave git's index and are ignored; their files stay on disk.
#
#   scripts/gpu-travel.sh hide     before the device call: results/ and report/ out of the index and
#                                  into .git/info/exclude; prints the bytes that will travel and
#                                  undoes itself when they are over 64 MiB
#   scripts/gpu-travel.sh restore  right after the call: the index and .git/info/exclude exactly as
#                                  they were before `hide`
#   scripts/gpu-travel.sh size     the bytes that would travel now, carried paths included
#
# While hidden, a commit would record the results as deleted: a pre-commit hook refuses it until
# `restore`. Exit 1 with one line on a refusal.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
cd "$(dirname "$0")/.."
die() { echo "gpu-travel.sh: $*" >&2; exit 1; }
git rev-parse --git-dir >/dev/null 2>&1 || die "$(pwd) is not a git checkout"
git_dir=$(git rev-parse --absolute-git-dir)
state="$git_dir/paralab-gpu-travel"  # the saved index and exclude file while hidden
hook="$git_dir/hooks/pre-commit"
hidden=(results report)
carried=(gpu-bundle .paralab-source-commit)
limit=$((64 << 20))

travelling_bytes() {
  local extra=()
  for p in "${carried[@]}"; do [ -e "$p" ] && extra+=("$p"); done
  {
    git ls-files -z --cached --others --exclude-standard
    [ ${#extra[@]} -eq 0 ] || find "${extra[@]}" -type f -print0
  } | du -cb --files0-from=- 2>/dev/null | awk 'END {print $1 + 0}'
}

restore() {
  [ -d "$state" ] || { echo "gpu-travel.sh: nothing hidden"; return 0; }
  cp "$state/index" "$git_dir/index"
  if [ -f "$state/exclude" ]; then cp "$state/exclude" "$git_dir/info/exclude"; else rm -f "$git_dir/info/exclude"; fi
  if [ -f "$hook" ] && grep -q "paralab-gpu-travel" "$hook"; then rm -f "$hook"; fi
  rm -rf "$state"
  echo "gpu-travel.sh: restored: ${hidden[*]} tracked again"
}

case "${1:-}" in
  size)
    echo "$(travelling_bytes) bytes would travel (limit $limit)"
    ;;
  hide)
    [ ! -d "$state" ] || die "already hidden (scripts/gpu-travel.sh restore first)"
    [ ! -e "$hook" ] || die "$hook exists: it would not be replaced by the guard against commits while hidden"
    mkdir -p "$state" "$git_dir/info" "$git_dir/hooks"
    cp "$git_dir/index" "$state/index"
    [ ! -f "$git_dir/info/exclude" ] || cp "$git_dir/info/exclude" "$state/exclude"
    for p in "${hidden[@]}"; do echo "/$p/" >>"$git_dir/info/exclude"; done
    cat >"$hook" <<'EOF'
#!/bin/sh
# paralab-gpu-travel: installed by scripts/gpu-travel.sh hide, removed by its restore
echo "pre-commit: results/ and report/ are hidden for a device call (scripts/gpu-travel.sh restore first)" >&2
exit 1
EOF
    chmod +x "$hook"
    git rm -r -q --cached --ignore-unmatch -- "${hidden[@]}"
    bytes=$(travelling_bytes)
    if [ "$bytes" -gt "$limit" ]; then
      restore >/dev/null
      die "$bytes bytes would still travel, over the device tool's $limit (nothing hidden now)"
    fi
    echo "gpu-travel.sh: ${hidden[*]} hidden; $bytes bytes will travel (limit $limit);" \
      "run scripts/gpu-travel.sh restore right after the device call"
    ;;
  restore)
    restore
    ;;
  *)
    die "usage: scripts/gpu-travel.sh hide|restore|size (see its header)"
    ;;
esac
