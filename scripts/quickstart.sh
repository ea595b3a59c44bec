#!/usr/bin/env bash
# The main job, set-up included: installs what is missing, builds, and runs the quickstart
# experiment (one epoch of LeNet on 12,800 Fashion-MNIST images, under a minute on 2 cores).
# Extra arguments go to bench_runner, e.g. scripts/quickstart.sh --set training.epochs=2
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec "${BUILD_DIR:-build}/bench_runner" experiments/quickstart.json "$@"
