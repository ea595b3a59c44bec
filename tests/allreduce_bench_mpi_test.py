#!/usr/bin/python3
"""allreduce_bench under mpirun, as nccl-tests runs under MPI: every rank runs every benchmark,
rank 0 alone prints and writes the results, times are the slowest rank's; a bad flag is one line.

    tests/allreduce_bench_mpi_test.py --allreduce-bench build/allreduce_bench -- mpirun [flags]
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--allreduce-bench", required=True)
    p.add_argument("mpirun", nargs=argparse.REMAINDER, help="-- mpirun and its flags")
    args = p.parse_args()
    if args.mpirun[:1] == ["--"]:
        args.mpirun = args.mpirun[1:]
    if not args.mpirun:
        p.error("give the mpirun command after --")
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory(prefix="paralab-mpi-bench-") as tmp:
        out = Path(tmp) / "out.json"
        proc = subprocess.run(
            [*args.mpirun, "-np", "2", args.allreduce_bench, "--sizes=lenet",
             "--max-wall=0.01", f"--benchmark_out={out}",
             "--benchmark_out_format=json"],
            capture_output=True, text=True, timeout=240, cwd=tmp)
        check(proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}")
        # One table: rank 0's.
        check(proc.stdout.count("allreduce/ring/devices:2/bytes:516272") == 1,
              "the ring row is not printed exactly once:\n" + proc.stdout[-3000:])
        check(sorted(p.name for p in Path(tmp).iterdir()) == ["out.json"],
              "files besides out.json: " + str(list(Path(tmp).iterdir())))
        if out.exists():
            doc = json.loads(out.read_text())
            ctx = doc["context"]
            check(ctx.get("paralab_launcher") == "mpi", f"launcher {ctx.get('paralab_launcher')}")
            check(ctx.get("mpi_world_size") == "2", f"world {ctx.get('mpi_world_size')}")
            rows = {r["name"].split("/iterations")[0]: r for r in doc["benchmarks"]}
            for algo in ("naive", "ring", "tree"):
                r = rows.get(f"allreduce/{algo}/devices:2/bytes:516272")
                check(r is not None and not r.get("error_occurred") and r["real_time"] > 0,
                      f"{algo}: {r}")
                check(r is not None and "mpi (2 processes)" in r.get("label", ""),
                      f"{algo} label: {r and r.get('label')}")
            check("memcpy/devices:2/bytes:516272" in rows, "no memcpy row")

        bad = subprocess.run([*args.mpirun, "-np", "2", args.allreduce_bench, "--devices=4"],
                             capture_output=True, text=True, timeout=120, cwd=tmp)
        lines = [l for l in bad.stderr.splitlines() if l.startswith("allreduce_bench:")]
        check(bad.returncode != 0, f"--devices=4 under -np 2 exited {bad.returncode}")
        check(len(lines) == 1 and "under mpirun the group is the world's 2 processes" in lines[0],
              f"--devices=4 under -np 2: {bad.stderr!r}")

        # Each was taken: ranks with other arguments (rank 1 timed tree under rank 0's naive
        # label, or hung in another collective), a BENCHMARK_OUT on rank 1 (it wrote its own
        # file), --launches (dropped without a word), a shuffled order (each rank its own).
        app = [args.allreduce_bench, "--sizes=4096", "--max-wall=0.01"]
        for argv, said in (
                ([*args.mpirun, "-np", "1", *app, "--benchmark_filter=allreduce/naive", ":",
                  "-np", "1", *app, "--benchmark_filter=allreduce/tree"],
                 "rank 1: its arguments (or BENCHMARK_* variables) differ from rank 0's"),
                ([*args.mpirun, "-np", "1", *app, ":", "-np", "1", "env",
                  f"BENCHMARK_OUT={Path(tmp) / 'rank1.json'}", *app],
                 "rank 1: its arguments (or BENCHMARK_* variables) differ from rank 0's"),
                ([*args.mpirun, "-np", "2", *app, "--launches"], "--launches: not under mpirun"),
                ([*args.mpirun, "-np", "2", *app, "--benchmark_enable_random_interleaving=true"],
                 "--benchmark_enable_random_interleaving: not under mpirun")):
            bad = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp)
            lines = [l for l in bad.stderr.splitlines() if l.startswith("allreduce_bench:")]
            check(bad.returncode != 0 and len(lines) == 1 and said in lines[0],
                  f"{said}: exit {bad.returncode}, {bad.stderr[-600:]!r}")
        check(sorted(p.name for p in Path(tmp).iterdir()) == ["out.json"],
              "files written by refused runs: " + str(list(Path(tmp).iterdir())))

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"allreduce_bench_mpi_test: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
