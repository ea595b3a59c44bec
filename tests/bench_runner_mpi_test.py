#!/usr/bin/python3
"""bench_runner under mpirun (the mpi launcher): data_parallel with naive, ring and tree,
layer_split (profiled split, 1F1B) and channel_split (both pairings) as one rank per process give
the same bits as the same descriptor in one process (threads): per-epoch metrics and the final
parameters (parameters_digest), over shared memory with 2 processes
and over TCP with 3; a run that cannot be one rank per process is skipped with the reason; rank 0 alone writes the
(schema-valid) results; CPU ranks say how they were placed (pinned to cores of their own by
mpirun or by ParaLab, or why not) and never share a pinned core; killing a rank ends the job
within 30 s and leaves rank 0's file with every finished run.

    tests/bench_runner_mpi_test.py --bench-runner build/bench_runner --source-dir . -- mpirun [flags]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DESCRIPTOR = {
    "name": "mpi-check", "backend": "cpu",
    "dataset": {"train_limit": 2048, "test_limit": 500},
    "training": {"epochs": 2, "batch_size": 48, "lr": 0.2, "max_iterations_per_epoch": 10,
                 "warmup_iterations": 2},
    # allow_oversubscription: the reference in one process has 3 devices on 2 cores.
    "runs": [{"strategy": "data_parallel", "devices": 2, "allow_oversubscription": True,
              "sweep": {"allreduce": ["naive", "ring", "tree"]}},
             {"strategy": "layer_split", "devices": 2, "microbatches": 2, "schedule": "1f1b",
              "allow_oversubscription": True},
             {"strategy": "channel_split", "devices": 2, "allow_oversubscription": True,
              "sweep": {"pairing": ["none", "megatron"]}},
             {"strategy": "single", "devices": 1}],
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench-runner", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("mpirun", nargs=argparse.REMAINDER)
    args = p.parse_args()
    mpirun = args.mpirun[1:] if args.mpirun[:1] == ["--"] else args.mpirun
    args.bench_runner = os.path.abspath(args.bench_runner)
    sys.path.insert(0, os.path.join(args.source_dir, "tests"))
    from validate_json import validate  # noqa: E402
    schema = os.path.join(args.source_dir, "results", "results.schema.json")
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    def epochs(doc, i):
        return [(e["train_loss"], e["test_loss"], e["test_acc"]) for e in doc["runs"][i]["epochs"]]

    with tempfile.TemporaryDirectory(prefix="paralab-mpi-runner-") as tmp:
        tmp = Path(tmp)
        # 3 ranks over TCP, on the loopback interface (tests/CMakeLists.txt says why).
        tcp = ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
        for np_, extra in ((2, []), (3, tcp)):
            d = json.loads(json.dumps(DESCRIPTOR))
            for run in d["runs"]:
                if run["strategy"] != "single":
                    run["devices"] = np_
            (tmp / f"d{np_}.json").write_text(json.dumps(d))
            threads = subprocess.run([args.bench_runner, f"d{np_}.json", "--out",
                                      f"threads{np_}.json", "--quiet"], cwd=tmp,
                                     capture_output=True, text=True, timeout=300)
            check(threads.returncode == 0, f"threads x{np_}: {threads.stderr}")
            proc = subprocess.run([*mpirun, *extra, "-np", str(np_), args.bench_runner,
                                   f"d{np_}.json", "--out", f"mpi{np_}.json"], cwd=tmp,
                                  capture_output=True, text=True, timeout=300)
            check(proc.returncode == 0, f"mpirun -np {np_}: exit {proc.returncode}: {proc.stderr}")
            check(proc.stdout.count("data: ") == 1 and proc.stdout.count("\nrun ") == 1,
                  "one rank prints:\n" + proc.stdout[-2000:])
            if proc.returncode or threads.returncode:
                continue
            mpi, ref = (json.loads((tmp / f).read_text())
                        for f in (f"mpi{np_}.json", f"threads{np_}.json"))
            check(validate(schema, mpi) == [], f"mpi{np_}.json: {validate(schema, mpi)[:3]}")
            devices = mpi["runs"][0]["config"]["device_list"]
            check([d.get("rank") for d in devices] == list(range(np_)) and
                  all(d.get("host") for d in devices), f"device_list: {devices}")
            check_binding(devices, check)
            env = mpi["environment"]["launcher"]
            check(env.get("name") == "mpi" and env.get("world_size") == np_ and
                  len(env.get("hosts", [])) == np_, f"launcher: {env}")
            for i in range(6):
                run = mpi["runs"][i]
                check(run["status"] == "ok" and run["config"].get("launcher") == "mpi",
                      f"x{np_} run {i}: {run['status']} {run['reason']}")
                check(len(run["iterations"][0].get("devices", [])) == np_,
                      f"x{np_} run {i}: per-device times of every rank")
                check(epochs(mpi, i) and epochs(mpi, i) == epochs(ref, i),
                      f"x{np_} {run['label']}: mpi {epochs(mpi, i)} != threads {epochs(ref, i)}")
                # The final parameters, every rank's part of a split model, to the bit.
                digests = [doc["runs"][i].get("parameters_digest") for doc in (mpi, ref)]
                check(digests[0] and digests[0] == digests[1],
                      f"x{np_} {run['label']}: final parameters differ: mpi {digests[0]}, "
                      f"threads {digests[1]}")
            check(mpi["runs"][6]["status"] == "skipped" and
                  "group is the world's" in mpi["runs"][6]["reason"], "single not skipped")
            split = [r.get("strategy_report", {}).get("split") for r in (mpi["runs"][3],
                                                                         ref["runs"][3])]
            check(split[0] == split[1], f"layer_split cut the model differently: {split}")
        check(sorted(f.name for f in tmp.iterdir()) ==
              ["d2.json", "d3.json", "mpi2.json", "mpi3.json", "threads2.json", "threads3.json"],
              f"stray files: {sorted(f.name for f in tmp.iterdir())}")

        # Not bound by mpirun: ParaLab pins each rank to a core of its own where there are enough
        # cores, and says why not elsewhere; --no-pin leaves them.
        d = json.loads(json.dumps(DESCRIPTOR))
        d["training"]["epochs"] = 1
        d["runs"] = [{"strategy": "data_parallel", "devices": 2}]
        (tmp / "pin.json").write_text(json.dumps(d))
        for flags, out in (([], "pin-out.json"), (["--no-pin"], "nopin-out.json")):
            proc = subprocess.run([*mpirun, "--bind-to", "none", "-np", "2", args.bench_runner,
                                   "pin.json", "--out", out, "--quiet", *flags], cwd=tmp,
                                  capture_output=True, text=True, timeout=120)
            check(proc.returncode == 0, f"--bind-to none {flags}: {proc.stderr}")
            if proc.returncode:
                continue
            devices = json.loads((tmp / out).read_text())["runs"][0]["config"]["device_list"]
            check_binding(devices, check)
            hows = [dev.get("binding") for dev in devices]
            if flags:
                check(hows == ["not pinned (--no-pin)"] * 2, f"--no-pin: {hows}")
            elif len(os.sched_getaffinity(0)) >= 2:
                check(hows == ["pinned by ParaLab"] * 2, f"--bind-to none: {hows}")
            else:
                check(all(h.startswith("not pinned: ") for h in hows), f"one CPU: {hows}")

        # A CUDA run this machine cannot give (no GPU, or more ranks on the node than GPUs) is
        # skipped by every rank alike, with the reason and the rank that saw it, and the next run
        # still runs: a rank that went on alone would wait in its first collective for ever.
        # (On a machine whose every node has a GPU per rank the CUDA run is ok instead.) A run
        # whose options need one process is skipped with the reason too.
        d = json.loads(json.dumps(DESCRIPTOR))
        d["backend"] = "auto"
        d["training"]["epochs"] = 1
        d["runs"] = [{"strategy": "data_parallel", "devices": "cuda:0,cuda:1"},
                     {"strategy": "data_parallel", "devices": 2},
                     {"strategy": "data_parallel", "devices": 2, "read_back": "epoch"},
                     {"strategy": "layer_split", "devices": 2, "read_back": "epoch"},
                     {"strategy": "channel_split", "devices": 2, "read_back": "epoch"}]
        (tmp / "gpu.json").write_text(json.dumps(d))
        proc = subprocess.run([*mpirun, "-np", "2", args.bench_runner, "gpu.json", "--out",
                               "gpu-out.json", "--quiet"], cwd=tmp, capture_output=True,
                              text=True, timeout=120)
        check(proc.returncode == 0, f"cuda then cpu: exit {proc.returncode}: {proc.stderr}")
        if proc.returncode == 0:
            runs = json.loads((tmp / "gpu-out.json").read_text())["runs"]
            statuses = [(r["status"], r["reason"]) for r in runs]
            check(runs[0]["status"] == "ok" or (
                runs[0]["status"] == "skipped" and runs[0]["reason"].startswith("rank ") and
                "cuda: " in runs[0]["reason"]), f"cuda then cpu: {statuses}")
            check(runs[1]["status"] == "ok", f"cuda then cpu: {statuses}")
            # Steps read once per epoch need every rank in one process: skipped with the reason.
            every_rank = ('with read_back "epoch" needs every rank in one process (each process '
                          'would read its own ranks\' steps); under mpirun use "step"')
            every_stage = ('with read_back "epoch" needs every stage in one process (each '
                           'process would read its own stage\'s steps); under mpirun use "step"')
            for run, why in ((runs[2], "data_parallel " + every_rank),
                             (runs[3], "layer_split " + every_stage),
                             (runs[4], "channel_split " + every_rank)):
                check(run["status"] == "skipped" and run["reason"] == why,
                      f"read_back epoch under mpirun: {statuses}")

        # Kill rank 1 while the third run trains: the job ends, rank 0's file keeps two runs.
        d = json.loads(json.dumps(DESCRIPTOR))
        d["training"]["epochs"] = 200
        d["runs"] = [{"strategy": "data_parallel", "devices": 2, "label": f"r{i}",
                      "training": {"epochs": 1 if i < 2 else 200}} for i in range(3)]
        (tmp / "long.json").write_text(json.dumps(d))
        job = subprocess.Popen([*mpirun, "-np", "2", args.bench_runner, "long.json", "--out",
                                "killed.json", "--quiet"], cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        victim, deadline = None, time.time() + 120
        while victim is None and time.time() < deadline and job.poll() is None:
            time.sleep(0.5)
            try:
                doc = json.loads((tmp / "killed.json").read_text())
            except (OSError, ValueError):
                continue
            if len(doc.get("runs", [])) >= 2:
                victim = rank_process(args.bench_runner, "1")
        check(victim is not None, "never saw two finished runs and rank 1's process")
        if victim:
            os.kill(victim, signal.SIGKILL)
            t0 = time.time()
            try:
                _, err = job.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                _, err = job.communicate()
            took = time.time() - t0
            check(took <= 30, f"the job took {took:.1f} s to end after rank 1 was killed")
            check(job.returncode != 0, "mpirun exited 0 after a rank was killed")
            doc = json.loads((tmp / "killed.json").read_text())
            check([r["label"] for r in doc["runs"]] == ["r0", "r1"] and
                  all(r["status"] == "ok" for r in doc["runs"]),
                  f"rank 0's file: {[(r['label'], r['status']) for r in doc['runs']]}")
        else:
            job.kill()
            job.communicate()

        # Bad input on one rank or all: every rank ends, within seconds, with one line of
        # bench_runner's (rank 0's, or the rank that met it alone), nothing written. An --out
        # that exists (checked by rank 0 alone) and data missing on one rank's node hung the
        # job; another --set on rank 1 trained another experiment under rank 0's record.
        (tmp / "exists.json").write_text("{}")
        one = [args.bench_runner, "d2.json", "--out", "bad.json", "--quiet"]
        for argv, said in (
                ([*mpirun, "-np", "2", args.bench_runner, "d2.json", "--out", "exists.json"],
                 "bench_runner: --out exists.json: file exists"),
                ([*mpirun, "-np", "1", *one, ":", "-np", "1", *one, "--data-dir",
                  str(tmp / "nowhere")], "bench_runner: rank 1: " + str(tmp / "nowhere")),
                ([*mpirun, "-np", "1", *one, ":", "-np", "1", *one, "--set", "training.lr=5"],
                 "bench_runner: rank 1: its descriptor (after --set and defaults, or its data) "
                 "differs from rank 0's"),
                ([*mpirun, "-np", "2", *one, "--set", "training.batch_size=0"],
                 "bench_runner: d2.json: training.batch_size: must be >= 1, got 0")):
            t0 = time.time()
            try:
                bad = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired:
                check(False, f"{said}: the job did not end in 60 s")
                continue
            lines = [l for l in bad.stderr.splitlines() if l.startswith("bench_runner:")]
            check(bad.returncode != 0 and len(lines) == 1 and lines[0].startswith(said),
                  f"{said}: exit {bad.returncode} after {time.time() - t0:.0f} s: "
                  f"{bad.stderr[-800:]!r}")
        check(not (tmp / "bad.json").exists(), "a refused job wrote bad.json")
        check((tmp / "exists.json").read_text() == "{}", "exists.json was changed")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"bench_runner_mpi_test: {len(failures)} failure(s)")
    return 1 if failures else 0


def check_binding(devices, check):
    """Every CPU rank says how it was placed; ranks pinned (by ParaLab or the launcher) on one
    host have CPUs of their own."""
    seen = {}
    for dev in devices:
        how, cpus = dev.get("binding"), dev.get("cpus")
        if not (isinstance(how, str) and isinstance(cpus, list) and cpus):
            check(False, f"rank {dev.get('rank')}: no binding: {dev}")
            continue
        if how in ("pinned by ParaLab", "bound by the launcher"):
            for c in cpus:
                check((dev["host"], c) not in seen,
                      f"ranks {seen.get((dev['host'], c))} and {dev['rank']} share CPU {c}")
                seen[(dev["host"], c)] = dev["rank"]
        else:
            check(how.startswith("not pinned"), f"rank {dev.get('rank')}: binding '{how}'")


def rank_process(program, rank):
    """The pid of `program` running as MPI rank `rank` (from /proc), or None."""
    name = os.path.basename(program)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0].decode(errors="replace")) == name and \
                f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return None


if __name__ == "__main__":
    sys.exit(main())
