#!/usr/bin/python3
"""scripts/install-deps.sh with stand-ins for dpkg-query, apt-cache, apt-get and sudo: it installs
only what is missing, installs nothing when all is there, and when a package is not in the
system's sources (Ubuntu 24.04 has no python3-torch) says so in one line naming it, exits 1 and
installs nothing. --with-clang adds clang's packages. A bad option: one line, exit 2.

    tests/install_deps_test.py SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile

# $FAKE_INSTALLED: packages dpkg-query reports installed ("all": every one but $FAKE_UNKNOWN's);
# $FAKE_UNKNOWN: packages apt-cache has no candidate for. Every apt-get call is logged.
STANDINS = {
    "dpkg-query": """#!/bin/sh
pkg=$(eval echo \\${$#})
case " $FAKE_UNKNOWN " in *" $pkg "*) exit 1 ;; esac
case " $FAKE_INSTALLED " in
  *" all "*|*" $pkg "*) printf 'install ok installed' ;;
  *) exit 1 ;;
esac
""",
    "apt-cache": """#!/bin/sh
pkg=$2
case " $FAKE_UNKNOWN " in
  *" $pkg "*) printf '%s:\\n  Installed: (none)\\n  Candidate: (none)\\n' "$pkg" ;;
  *) printf '%s:\\n  Installed: (none)\\n  Candidate: 1.0-1\\n' "$pkg" ;;
esac
""",
    "apt-get": """#!/bin/sh
echo "apt-get $*" >> "$FAKE_LOG"
""",
    "sudo": """#!/bin/sh
exec "$@"
""",
}


def run(script, bin_dir, log, args=(), installed="", unknown=""):
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], FAKE_LOG=log,
               FAKE_INSTALLED=installed, FAKE_UNKNOWN=unknown)
    if os.path.exists(log):
        os.remove(log)
    proc = subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=60)
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    return proc, calls


def main():
    script = os.path.join(sys.argv[1], "scripts", "install-deps.sh")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = os.path.join(tmp, "bin")
        os.mkdir(bin_dir)
        for name, text in STANDINS.items():
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        log = os.path.join(tmp, "apt.log")

        proc, calls = run(script, bin_dir, log, installed="all")
        if proc.returncode != 0 or calls or "packages present" not in proc.stdout:
            failures.append(f"all present: exit {proc.returncode}, calls {calls}")

        proc, calls = run(script, bin_dir, log, installed="cmake g++ git")
        install = [c for c in calls if " install " in c]
        if (proc.returncode != 0 or len(install) != 1 or " cmake " in install[0] + " "
                or "libdnnl-dev" not in install[0]):
            failures.append(f"some missing: exit {proc.returncode}, calls {calls}, "
                            f"stderr {proc.stderr!r}")

        proc, calls = run(script, bin_dir, log, ["--with-torch"], installed="all",
                          unknown="python3-torch")
        lines = proc.stderr.splitlines()
        if (proc.returncode != 1 or len(lines) != 1 or "python3-torch" not in lines[0]
                or "--python" not in lines[0] or any(" install " in c for c in calls)):
            failures.append(f"unknown package: exit {proc.returncode}, stderr {proc.stderr!r}, "
                            f"calls {calls}")

        # --with-clang (scripts/sanitize.sh, fuzz.sh): clang and its runtimes, and only those
        # when the rest is there.
        base = ("cmake ninja-build g++ git pkg-config libdnnl-dev ocl-icd-opencl-dev zlib1g-dev "
                "nlohmann-json3-dev libcli11-dev libgtest-dev libbenchmark-dev libopenmpi-dev "
                "openmpi-bin python3 python3-jsonschema python3-matplotlib dataset-fashion-mnist")
        proc, calls = run(script, bin_dir, log, ["--with-clang"], installed=base)
        install = [c for c in calls if " install " in c]
        if (proc.returncode != 0 or len(install) != 1
                or install[0].split()[-3:] != ["clang", "libclang-rt-dev", "libomp-dev"]):
            failures.append(f"--with-clang: exit {proc.returncode}, calls {calls}, "
                            f"stderr {proc.stderr!r}")

        proc, calls = run(script, bin_dir, log, ["--bogus"])
        lines = proc.stderr.splitlines()
        if proc.returncode != 2 or len(lines) != 1 or "--bogus" not in lines[0] or calls:
            failures.append(f"bad option: exit {proc.returncode}, stderr {proc.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    print(f"install-deps.sh: {5 - len(failures)} of 5 cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
