#!/usr/bin/env bash
# The main job, set-up included: installs what is missing, builds, and runs the quickstart
# experiment (two epochs of LeNet on the full Fashion-MNIST on one core, under a minute).
# Extra arguments go to bench_runner, e.g. scripts/quickstart.sh --set training.epochs=2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec "${BUILD_DIR:-build}/bench_runner" experiments/quickstart.json "$@"
