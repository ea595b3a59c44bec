#!/usr/bin/env bash
# Configures and builds ParaLab (Release) into ${BUILD_DIR:-build}. Extra arguments go to cmake.
# BUILD_TARGETS="bench_runner ..." builds only those targets (default: everything).
# Configures again whenever the build folder has no build system (a configure that failed or was
# killed leaves CMakeCache.txt without build.ninja / Makefile), and starts the folder afresh when
# it was configured with another generator than the one chosen here (ninja when installed), or,
# with CXX set, with another C++ compiler (CMake reads CC and CXX only when it first configures).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
generator="Unix Makefiles"
command -v ninja >/dev/null && generator=Ninja
cache="$build_dir/CMakeCache.txt"
if [[ -f "$cache" ]]; then
  cached=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$cache")
  if [[ -n "$cached" && "$cached" != "$generator" ]]; then
    echo "build.sh: $build_dir was configured for '$cached', not '$generator': configuring it afresh"
    rm -rf "$cache" "$build_dir/CMakeFiles"
  fi
fi
if [[ -f "$cache" && -n "${CXX:-}" ]] && wanted=$(command -v "$CXX"); then
  cached=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$cache")
  if [[ -n "$cached" && $(realpath -m "$cached") != $(realpath -m "$wanted") ]]; then
    echo "build.sh: $build_dir was configured with $cached, not $CXX: configuring it afresh"
    rm -rf "$cache" "$build_dir/CMakeFiles"
  fi
fi
if [[ ! -f "$cache" ]]; then
  cmake -S . -B "$build_dir" -G "$generator" -DCMAKE_BUILD_TYPE=Release "$@"
elif (($#)) || [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
  # CMake keeps the options of the earlier configure in the cache; NOTFOUND entries are searched again.
  cmake -S . -B "$build_dir" "$@"
fi
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" --parallel "$(nproc)" "${targets[@]}"
