#!/bin/sh
# allreduce_bench records the size from which memcpy stores past the caches, as the dynamic
# loader lists it (glibc on x86), and follows GLIBC_TUNABLES when that sets it; where the loader
# lists no such tunable the key is absent. Rows of CPU devices record no GPU model.
#   usage: allreduce_bench_context.sh BENCH
bench="$1"
command -v readelf >/dev/null || { echo "SKIP: no readelf (binutils) to find the dynamic loader"; exit 77; }
run() { "$bench" --devices=2 --sizes=lenet --benchmark_filter='^memcpy/' 2>&1; }
loader=$(readelf -l "$bench" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
listed=$("$loader" --list-tunables 2>/dev/null | sed -n 's/^glibc.cpu.x86_non_temporal_threshold: \(0x[0-9a-f]*\).*/\1/p')
out=$(run) || { echo "$out"; echo "FAIL: allreduce_bench exited non-zero"; exit 1; }
# Rows of CPU devices name no GPU (CUDA rows name theirs: paralab_gpu_model, checked on a GPU by
# scripts/gpu-check.sh sweep).
if echo "$out" | grep -q "^paralab_gpu_model:"; then
  echo "$out"; echo "FAIL: CPU rows record a GPU model"; exit 1
fi
got=$(echo "$out" | sed -n 's/^memcpy_non_temporal_threshold_bytes: //p')
if [ -z "$listed" ]; then
  [ -z "$got" ] || { echo "FAIL: the loader lists no threshold, yet the run records '$got'"; exit 1; }
  echo "PASS (no non-temporal threshold listed by '$loader': none recorded)"; exit 0
fi
[ "$got" = "$(printf %d "$listed")" ] ||
  { echo "$out"; echo "FAIL: recorded '$got', the loader lists $listed"; exit 1; }
out=$(GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=0x1000000 run) || {
  echo "$out"; echo "FAIL: allreduce_bench with GLIBC_TUNABLES exited non-zero"; exit 1; }
echo "$out" | grep -qx "memcpy_non_temporal_threshold_bytes: 16777216" ||
  { echo "$out"; echo "FAIL: GLIBC_TUNABLES' threshold of 16 MiB is not the one recorded"; exit 1; }
echo "PASS (recorded $got bytes, as the loader lists; 16777216 under GLIBC_TUNABLES)"
