#!/usr/bin/env bash
# The test job, set-up included: installs what is missing, builds, and runs every test (ctest).
# The numerical tests (label "numerics": backends, reference, training, every strategy against
# single-device training) then run again with oneDNN limited to AVX2 and to SSE4.1, so that an
# AVX-512 machine also checks the AVX2 and SSE code paths and an AVX2 machine the SSE one
# (a limit under which oneDNN dispatches as it does natively is skipped).
# Where nvcc is present the default build includes the CUDA backend; then a second, CPU-only
# build (PARALAB_WITH_CUDA=OFF) is built and tested too, so that the build without CUDA keeps
# working.
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
(($# == 0)) || { echo "test.sh: unknown argument '$1' (it takes none; see --help)" >&2; exit 2; }
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure --timeout 600 -j "$(nproc)")
# The instruction set oneDNN dispatches to, as the results record it, natively or under
# ONEDNN_MAX_CPU_ISA=$1 (a one-step run on 256 examples).
onednn_isa() {
  local tmp isa
  tmp=$(mktemp -d)
  env ${1:+ONEDNN_MAX_CPU_ISA=$1} "${BUILD_DIR:-build}/bench_runner" experiments/quickstart.json \
    --quiet --out "$tmp/r.json" --set backend=cpu --set training.max_iterations_per_epoch=1 \
    --set training.epochs=1 --set dataset.train_limit=256 --set dataset.test_limit=256 \
    > /dev/null 2>&1 &&
    isa=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["environment"]["onednn_cpu_isa"])' "$tmp/r.json")
  rm -rf "$tmp"
  echo "${isa:-unknown}"
}
native_isa=$(onednn_isa "")
# (Pipeline.* in those suites time sleeping stages, not arithmetic: once is enough.)
for isa in AVX2 SSE41; do
  # Where the limit changes nothing (an AVX2 CPU under AVX2), the run above took those paths.
  limited=$(onednn_isa "$isa")
  if [[ $native_isa != unknown && $limited == "$native_isa" ]]; then
    echo "test.sh: oneDNN dispatches to $native_isa natively and with ONEDNN_MAX_CPU_ISA=$isa: the run above tested those paths"
    continue
  fi
  echo "test.sh: numerical tests with ONEDNN_MAX_CPU_ISA=$isa (oneDNN: $limited; natively $native_isa)"
  (cd "${BUILD_DIR:-build}" && ONEDNN_MAX_CPU_ISA=$isa \
    ctest -L numerics -E '^Pipeline\.' --output-on-failure --timeout 600 -j "$(nproc)")
done
# PARALAB_SKIP_CPU_ONLY_BUILD=1 (.ci/run, whose sanitizer builds are CPU-only) skips it.
if [[ ${PARALAB_SKIP_CPU_ONLY_BUILD:-0} != 1 ]] &&
   { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  echo "test.sh: CPU-only build (PARALAB_WITH_CUDA=OFF)"
  BUILD_DIR=build-cpu-only scripts/build.sh -DPARALAB_WITH_CUDA=OFF
  (cd build-cpu-only && ctest --output-on-failure --timeout 600 -j "$(nproc)")
fi
