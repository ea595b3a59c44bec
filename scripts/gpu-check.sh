#!/usr/bin/env bash
# The one-call GPU check: build (or use build-gpu/ if it is there), run the GPU tests, then the
# short GPU benchmark (experiments/gpu-check.json); everything it reports goes under $OUT
# (default ./gpu-check-out). Under 8 minutes on one GPU.
#
# On a host with ParaLab's packages it builds normally. On an offline GPU host it builds a
# CUDA-only ParaLab from gpu-bundle/ (scripts/make-gpu-bundle.sh, run where the packages are),
# taking cuDNN, cuBLAS and NCCL from the CUDA toolkit or from PyTorch's nvidia-* Python wheels.
# A copy of the tree without .git records its commit only from .paralab-source-commit
# (scripts/stamp-source.sh, run before copying; carry the file with gpu-bundle).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
log() { echo "gpu-check: $*" | tee -a "$OUT/summary.txt"; }
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.csv" 2>&1 ||
  log "nvidia-smi failed (see gpu.csv)"
log "GPU: $(tail -n +2 "$OUT/gpu.csv" 2>/dev/null | head -1)"

# cuDNN / cuBLAS / CUDA runtime from Python wheels when the toolkit lacks them.
wheel_dir() { python3 -c "import importlib, os; m = importlib.import_module('$1'); print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])" 2>/dev/null; }
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
lib_path=()
if [[ -d gpu-bundle ]]; then
  cmake_args+=(-DPARALAB_WITH_CPU=OFF -DPARALAB_DEPS_DIR="$PWD/gpu-bundle")
  export FASHION_MNIST_DIR=$PWD/gpu-bundle/data/fashion-mnist
  lib_path+=("$PWD/gpu-bundle/lib")
fi
if ! ls /usr/local/cuda/lib64/libcudnn.so* /usr/local/cuda/lib/libcudnn.so* >/dev/null 2>&1; then
  cudnn=$(wheel_dir nvidia.cudnn)
  if [[ -n $cudnn && -d $cudnn/lib ]]; then
    cudnn_lib=$(ls "$cudnn"/lib/libcudnn.so* | head -1)
    cmake_args+=(-DCUDNN_INCLUDE_DIR="$cudnn/include" -DCUDNN_LIBRARY="$cudnn_lib")
    lib_path+=("$cudnn/lib")
  fi
fi
if ! ls /usr/local/cuda/lib64/libnccl.so* /usr/local/cuda/lib/libnccl.so* >/dev/null 2>&1; then
  nccl=$(wheel_dir nvidia.nccl)
  nccl_include=$nccl/include
  [[ -f $nccl_include/nccl.h ]] || nccl_include=$PWD/gpu-bundle/include/nccl
  if [[ -n $nccl && -d $nccl/lib && -f $nccl_include/nccl.h ]]; then
    nccl_lib=$(ls "$nccl"/lib/libnccl.so* | head -1)
    cmake_args+=(-DNCCL_INCLUDE_DIR="$nccl_include" -DNCCL_LIBRARY="$nccl_lib")
  fi
fi
for mod in nvidia.cublas nvidia.cuda_runtime nvidia.nccl; do
  d=$(wheel_dir $mod)
  [[ -n $d && -d $d/lib ]] && lib_path+=("$d/lib")
done
if ((${#lib_path[@]})); then
  export LD_LIBRARY_PATH="$(IFS=:; echo "${lib_path[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

t0=$(date +%s)
if [[ ! -x build-gpu/bench_runner ]]; then
  if ! cmake -S . -B build-gpu "${cmake_args[@]}" > "$OUT/configure.log" 2>&1 ||
     ! cmake --build build-gpu --parallel "$(nproc)" \
       --target bench_runner allreduce_bench test_backends test_collectives test_data_parallel test_layer_split test_channel_split test_single \
       > "$OUT/build.log" 2>&1; then
    log "build FAILED after $(( $(date +%s) - t0 )) s (see configure.log, build.log)"
    exit 1
  fi
fi
grep "ParaLab:" "$OUT/configure.log" 2>/dev/null | tee -a "$OUT/summary.txt"
log "built in $(( $(date +%s) - t0 )) s"
log "built from: $(grep -hE '^#define PARALAB_BUILD_(COMMIT|DIRTY|COMMIT_ORIGIN) ' build-gpu/generated/paralab_build_info.h 2>/dev/null | awk '{print $3}' | tr '\n' ' ')(commit, dirty, origin; run scripts/stamp-source.sh and carry .paralab-source-commit where the copy has no .git)"

# GPU tests: every backend test on cuda; collectives (NCCL included), data_parallel, layer_split
# and channel_split on virtual devices.
t0=$(date +%s)
for t in test_backends test_collectives test_data_parallel test_layer_split test_channel_split test_single; do
  filter="*cuda*:*Cuda*"
  timeout 240 "build-gpu/tests/$t" --gtest_filter="$filter" > "$OUT/$t.log" 2>&1
  rc=$?
  log "$t: $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$OUT/$t.log" | tr '\n' ' ')$(grep -cE '^\[  SKIPPED \] .*\(' "$OUT/$t.log") skipped (exit $rc)"
  ((rc == 0)) || status=1
done
log "tests took $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
timeout 240 build-gpu/bench_runner experiments/gpu-check.json --out "$OUT/gpu-check.json" \
  > "$OUT/bench_runner.log" 2>&1
rc=$?
log "benchmark exit $rc in $(( $(date +%s) - t0 )) s"
tail -n 20 "$OUT/bench_runner.log" >> "$OUT/summary.txt"
((rc == 0)) || status=1
# The 10-epoch run against the CPU backend's accuracy bar: >= 0.82 within 10 epochs and >= 0.80
# at the end.
bar=$(python3 - "$OUT/gpu-check.json" <<'PY'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["runs"]
except (OSError, ValueError, KeyError) as e:
    print(f"FAIL: no results to check ({e})")
    sys.exit()
run = next((r for r in runs if r.get("label", "").startswith("single gpu 10 epochs")), None)
accs = [e["test_acc"] for e in (run or {}).get("epochs", [])]
if len(accs) < 10:
    print(f"FAIL: the 10-epoch run has {len(accs)} epochs (status {(run or {}).get('status')})")
else:
    ok = max(accs) >= 0.82 and accs[-1] >= 0.80
    print(("PASS" if ok else "FAIL") + f": best test accuracy {max(accs):.4f}, final {accs[-1]:.4f}")
PY
)
log "10-epoch accuracy bar: $bar"
[[ $bar == PASS* ]] || status=1

# The collectives alone between CUDA devices (virtual ones on a single GPU): allreduce and the
# memcpy baseline over the message-size sweep, on 2 and 4 devices.
t0=$(date +%s)
timeout 150 build-gpu/allreduce_bench --backend=cuda --devices=2,4 \
  --benchmark_filter='^(allreduce|memcpy)/' \
  --benchmark_out="$OUT/allreduce-cuda.json" --benchmark_out_format=json \
  > "$OUT/allreduce_bench.log" 2>&1
rc=$?
log "allreduce_bench (cuda) exit $rc in $(( $(date +%s) - t0 )) s"
((rc == 0)) || status=1

# The speed goal's benchmark: ParaLab against the book's PyTorch trainer on the same GPU, in one
# invocation (the interpreter that has torch with CUDA).
t0=$(date +%s)
data_args=()
[[ -n ${FASHION_MNIST_DIR:-} ]] && data_args=(--data-dir "$FASHION_MNIST_DIR")
timeout 150 python3 experiments/baselines/compare_pytorch.py --device cuda \
  --bench-runner build-gpu/bench_runner --repeats 3 "${data_args[@]}" \
  --out "$OUT/compare-pytorch-gpu.json" > "$OUT/compare-pytorch.log" 2>&1
rc=$?
log "PyTorch comparison exit $rc in $(( $(date +%s) - t0 )) s: $(tail -n 2 "$OUT/compare-pytorch.log" | tr '\n' ' ')"
exit $status
