#!/usr/bin/python3
"""scripts/mpi-vs-threads.sh refuses bad arguments the way every ParaLab program does: exit 1,
one line on stderr naming the argument, nothing written. A measurement that fails, and one
stopped by SIGTERM, leave nothing either (neither OUT nor OUT.partial), and the signal stops the
measurement too; both are run with stand-ins for bench_runner, allreduce_bench and mpirun.

    tests/script_bad_input_test.py SCRIPT BUILD_DIR
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

# Stand-in for bench_runner and allreduce_bench: writes its --out file (a measurement under way),
# then fails, or records its pid and sleeps until stopped.
FAKE_TOOL = """#!/bin/sh
prev=
for a in "$@"; do [ "$prev" = --out ] && echo '{}' > "$a"; prev="$a"; done
case "$FAKE_MODE" in
  fail) exit 3 ;;
  sleep) echo $$ > "$FAKE_PID"; exec sleep 60 ;;
esac
"""


def fake_build(tmp):
    build, bin_dir = os.path.join(tmp, "fake-build"), os.path.join(tmp, "fake-bin")
    for d, names in ((build, ("bench_runner", "allreduce_bench")), (bin_dir, ("mpirun",))):
        os.mkdir(d)
        for name in names:
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(FAKE_TOOL)
            os.chmod(path, 0o755)
    return build, bin_dir


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as stopped.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def check_stopped_runs(script, tmp, failures):
    build, bin_dir = fake_build(tmp)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    outs = [os.path.join(tmp, "failed"), os.path.join(tmp, "stopped")]

    def left():
        return [p + x for p in outs for x in ("", ".partial") if os.path.exists(p + x)]

    # A failing measurement: its exit status, one line of the script's, nothing kept.
    proc = subprocess.run([script, "--rounds", "1", "--build", build, "--out", outs[0]], cwd=tmp,
                          env=dict(env, FAKE_MODE="fail"), capture_output=True, text=True,
                          timeout=60)
    lines = proc.stderr.splitlines()
    if proc.returncode != 1 or len(lines) != 1 or "failed (exit 3)" not in lines[0] or left():
        failures.append(f"failing measurement: exit {proc.returncode}, stderr {proc.stderr!r}, "
                        f"left {left()}")

    # SIGTERM while a measurement runs: exit 143, one line, the measurement stopped, nothing kept.
    pid_file, err_file = os.path.join(tmp, "fake.pid"), os.path.join(tmp, "stopped.stderr")
    with open(err_file, "w") as err:  # a file: an orphaned measurement would hold a pipe open
        proc = subprocess.Popen([script, "--rounds", "1", "--build", build, "--out", outs[1]],
                                cwd=tmp, env=dict(env, FAKE_MODE="sleep", FAKE_PID=pid_file),
                                stderr=err)
    deadline = time.time() + 30
    while not os.path.exists(pid_file) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the pid is written just before the exec
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    fake = int(open(pid_file).read()) if os.path.exists(pid_file) else None
    stopped = fake is not None and not alive(fake)
    err = open(err_file).read()
    lines = err.splitlines()
    if (rc != 128 + signal.SIGTERM or len(lines) != 1 or "interrupted by SIGTERM" not in lines[0]
            or left() or not stopped):
        failures.append(f"SIGTERM: exit {rc}, stderr {err!r}, left {left()}, measurement "
                        f"{'never started' if fake is None else 'stopped' if stopped else 'still running'}")
    if fake is not None and not stopped:
        os.kill(fake, signal.SIGKILL)


def main():
    script, build = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory(prefix="paralab-script-args-") as tmp:
        existing = os.path.join(tmp, "existing")
        os.mkdir(existing)
        cases = [(["--rounds", "0"], "--rounds"), (["--rounds", "x"], "--rounds"),
                 (["--bogus"], "'--bogus'"), (["--out", existing], existing)]
        for args, names in cases:
            proc = subprocess.run([script, *args, "--build", build], cwd=tmp,
                                  capture_output=True, text=True, timeout=60)
            lines = proc.stderr.splitlines()
            if proc.returncode != 1 or len(lines) != 1 or not lines[0].startswith(
                    "mpi-vs-threads.sh: ") or names not in lines[0]:
                failures.append(f"{args}: exit {proc.returncode}, stderr {proc.stderr!r}")
        written = sorted(set(os.listdir(tmp)) - {"existing"}) + os.listdir(existing)
        if written:
            failures.append(f"files written: {written}")
        check_stopped_runs(script, tmp, failures)
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"script_bad_input_test: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
