#!/usr/bin/python3
"""scripts/mpi-vs-threads.sh refuses bad arguments the way every ParaLab program does: exit 1,
one line on stderr naming the argument, nothing written.

    tests/script_bad_input_test.py SCRIPT BUILD_DIR
"""
import os
import subprocess
import sys
import tempfile


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
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    print(f"script_bad_input_test: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
