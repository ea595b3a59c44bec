#!/usr/bin/python3
"""scripts/fresh-machine-check.sh refuses bad arguments before it makes anything: exit 2, one line
on stderr naming the argument, no root or log directory made. (The check itself needs root,
debootstrap and a mirror, and takes 15 minutes; it is run by hand, not here.)

    tests/fresh_machine_check_test.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile


def main():
    script = os.path.join(sys.argv[1], "scripts", "fresh-machine-check.sh")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        cases = [
            (["--bogus"], "unknown option '--bogus'"),
            (["--suite"], "--suite needs a name"),
            (["--suite", "noble", "--keyring", os.path.join(tmp, "none.gpg")],
             "no Ubuntu archive keyring at " + os.path.join(tmp, "none.gpg")),
            (["--keyring", os.path.join(tmp, "none.gpg")],
             "--keyring " + os.path.join(tmp, "none.gpg") + ": cannot read it"),
        ]
        for args, expected in cases:
            proc = subprocess.run([script, "--root", root, *args], capture_output=True, text=True,
                                  timeout=60)
            lines = proc.stderr.splitlines()
            made = sorted(os.listdir(tmp))
            if proc.returncode != 2 or len(lines) != 1 or expected not in lines[0] or made:
                failures.append(f"{args}: exit {proc.returncode}, stderr {proc.stderr!r}, "
                                f"stdout {proc.stdout!r}, made {made}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(cases) - len(failures)} of {len(cases)} bad-argument cases refused cleanly")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
