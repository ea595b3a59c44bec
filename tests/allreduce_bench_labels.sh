#!/bin/sh
# allreduce_bench labels the rows of a run with more ranks than the machine has cores as
# time-shared, and leaves a run that fits unlabeled; each row is one iteration with its ops.   usage: allreduce_bench_labels.sh BENCH
bench="$1"
cores=$(getconf _NPROCESSORS_ONLN)
k=$((cores + 1))
out=$("$bench" --sizes=lenet --devices="$k" --oversubscribe \
  --benchmark_filter="allreduce/ring/devices:$k/bytes:516272/" 2>&1) || {
  echo "$out"; echo "FAIL: allreduce_bench --devices=$k --oversubscribe exited non-zero"; exit 1; }
echo "$out"
echo "$out" | grep -q "ring time-shared ($k ranks on $cores cores)" ||
  { echo "FAIL: the $k-rank row is not labeled time-shared"; exit 1; }
# One benchmark iteration: the mean of the collectives it timed, counted by "ops".
echo "$out" | grep -Eq "allreduce/ring/devices:$k/bytes:516272/iterations:1/manual_time .* ops=[1-9]" ||
  { echo "FAIL: the $k-rank row is not one iteration with an ops count"; exit 1; }
# A run that fits: as many ranks as cores (a 1-device run would time a no-op millions of times).
if [ "$cores" -ge 2 ]; then
  out=$("$bench" --sizes=lenet --devices="$cores" \
    --benchmark_filter="allreduce/ring/devices:$cores/bytes:516272/" 2>&1) || {
    echo "$out"; echo "FAIL: allreduce_bench --devices=$cores exited non-zero"; exit 1; }
  echo "$out"
  echo "$out" | grep -q "allreduce/ring/devices:$cores/bytes:516272/.*manual_time " ||
    { echo "FAIL: no $cores-device row"; exit 1; }
  if echo "$out" | grep -q "time-shared"; then
    echo "FAIL: a $cores-rank run on $cores cores is labeled time-shared"; exit 1
  fi
fi
echo PASS
