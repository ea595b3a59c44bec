#!/usr/bin/env bash
# Writes .paralab-source-commit: this checkout's commit and dirty flag, for a copy of the tree
# that is not a git checkout (the device machine gets the working tree without .git). A build of
# such a copy records them as the commit it was built from (cmake/build_info.cmake). Run it
# right before copying, e.g. before a device run that carries gpu-bundle and this file.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
(($# == 0)) || { echo "stamp-source.sh: unknown argument '$1' (it takes none; see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
top=$(git rev-parse --show-toplevel 2>/dev/null) || { echo "stamp-source.sh: $PWD is not a git checkout" >&2; exit 1; }
[[ $top -ef . ]] || { echo "stamp-source.sh: $PWD is inside another repository ($top)" >&2; exit 1; }
dirty=false
[[ -z $(git status --porcelain --untracked-files=no) ]] || dirty=true
printf 'commit %s\ndirty %s\n' "$(git rev-parse HEAD)" "$dirty" > .paralab-source-commit.tmp
mv .paralab-source-commit.tmp .paralab-source-commit
echo "stamp-source.sh: $(tr '\n' ' ' < .paralab-source-commit)"
