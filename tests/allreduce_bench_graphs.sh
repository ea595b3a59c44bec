#!/bin/sh
# allreduce_bench --graphs: on devices that capture (a test build whose CPU devices record and
# replay their work, tests/recording_allreduce_bench.cpp) every collective and the memcpy are
# timed as one graph over the group, labeled "graph" with the counter graph=1, after the replay
# is checked for the exact sum; a replay without the waits between devices is refused (exit 2).
# On real CPU devices --graphs=on is one line saying why not, exit 1; a bad value likewise.
# usage: allreduce_bench_graphs.sh RECORDING_BENCH BENCH
rec="$1"
bench="$2"
filter='(allreduce/(ring|tree|naive)|allgather/ring|reduce_scatter/ring|memcpy)/devices:2/bytes:(516272|16)/'
out=$("$rec" --graphs=on --sizes=lenet --devices=2 --benchmark_filter="$filter" \
  --max-wall=0.01 --benchmark_counters_tabular=false 2>&1) || {
  echo "$out"; echo "FAIL: recording_allreduce_bench --graphs=on exited non-zero"; exit 1; }
echo "$out"
rows=$(echo "$out" | grep -c "manual_time ")
graphs=$(echo "$out" | grep "manual_time " | grep -c "graph=1 .*graph$")
[ "$rows" -eq 6 ] || { echo "FAIL: $rows rows, want 6 (naive, ring, tree, allgather, reduce_scatter, memcpy)"; exit 1; }
[ "$graphs" -eq "$rows" ] || { echo "FAIL: $graphs of $rows rows timed as graphs"; exit 1; }
out=$("$rec" skip-ready-wait --graphs=on --sizes=lenet --devices=2 \
  --benchmark_filter='allreduce/ring/devices:2/bytes:516272/' 2>&1)
rc=$?
echo "$out"
[ $rc -eq 2 ] || { echo "FAIL: a replay without the waits between devices exited $rc, want 2"; exit 1; }
echo "$out" | grep -q "allreduce/ring.*wrong result before timing: rank" ||
  { echo "FAIL: the unordered replay is not reported as a wrong result"; exit 1; }
# A graph the devices cannot make: under auto, said once per group on stderr and timed eagerly
# (no "graph" label, graph=0), exit 0; under on, each benchmark skipped with the reason, exit 2.
out=$("$rec" fail-group-end --sizes=lenet --devices=2 --benchmark_filter="$filter" \
  --max-wall=0.01 --benchmark_counters_tabular=false 2>&1) || {
  echo "$out"; echo "FAIL: a capture that fails under --graphs=auto exited non-zero"; exit 1; }
echo "$out"
rows=$(echo "$out" | grep -c "manual_time ")
eager=$(echo "$out" | grep "manual_time " | grep "graph=0 " | grep -vc "graph$")
said=$(echo "$out" | grep -c "could not be made (cudaGraphInstantiate: out of memory (simulated)): this benchmark and every later one on 2 devices are timed eagerly")
[ "$rows" -eq 6 ] && [ "$eager" -eq 6 ] && [ "$said" -eq 1 ] ||
  { echo "FAIL: a failed capture under auto: $rows rows, $eager eager, said $said times"; exit 1; }
out=$("$rec" fail-group-end --graphs=on --sizes=lenet --devices=2 \
  --benchmark_filter='allreduce/ring/devices:2/bytes:516272/' 2>&1)
rc=$?
echo "$out"
[ $rc -eq 2 ] && echo "$out" | grep -q "allreduce/ring.*--graphs=on: capture failed: .*simulated" &&
  echo "$out" | grep -q "^allreduce_bench: --graphs=on: a collective's graph could not be made" ||
  { echo "FAIL: a failed capture under --graphs=on: exit $rc"; exit 1; }
out=$("$bench" --graphs=on --sizes=lenet --devices=2 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$out" = "allreduce_bench: --graphs=on: cpu:0 cannot capture work (CUDA Graphs are CUDA only)" ] ||
  { echo "$out"; echo "FAIL: --graphs=on on CPU devices: exit $rc"; exit 1; }
out=$("$bench" --graphs=maybe 2>&1)
rc=$?
[ $rc -eq 1 ] && [ "$out" = "allreduce_bench: --graphs: 'maybe' (known: auto, on, off)" ] ||
  { echo "$out"; echo "FAIL: --graphs=maybe: exit $rc"; exit 1; }
echo PASS
