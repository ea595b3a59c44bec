#!/usr/bin/env bash
# The main job, set-up included: installs what is missing, builds, and runs the quickstart
# experiment (two epochs of LeNet on the full Fashion-MNIST on one core, about 25 s). Builds only
# bench_runner, so the first run's build is shorter than the test job's.
# Extra arguments go to bench_runner, e.g. scripts/quickstart.sh --set training.epochs=2
# (build/bench_runner --help lists them; scripts/quickstart.sh --help prints this and does nothing).
set -euo pipefail
case "${1:-}" in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac  # the comment above
cd "$(dirname "$0")/.."
scripts/install-deps.sh
BUILD_TARGETS=bench_runner scripts/build.sh
exec "${BUILD_DIR:-build}/bench_runner" experiments/quickstart.json "$@"
