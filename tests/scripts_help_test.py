#!/usr/bin/python3
"""Every user-facing script answers -h / --help with its usage and does nothing else.

    tests/scripts_help_test.py SOURCE_DIR

Each scripts/*.sh (but child.sh, an internal wrapper whose arguments are a command) runs with
--help and with -h, with stand-ins first on the PATH for every program the scripts install,
build, fetch or run with (apt-get, sudo, cmake, ninja, curl, ...): it must exit 0, print the
comment at its top (its first line at least) and call none of them.
"""
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SOURCE = None
STANDINS = ("apt-get", "sudo", "dpkg-query", "cmake", "ninja", "make", "ctest", "curl", "wget",
            "git", "debootstrap", "chroot", "mount", "nvcc", "mpirun", "python3", "tar", "mkdir",
            "mktemp", "bench_runner", "allreduce_bench")


class Help(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="paralab-help-test-"))
        self.calls = self.tmp / "calls"
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        for name in STANDINS:
            p = bin_dir / name
            p.write_text('#!/bin/sh\necho "%s $*" >> "%s"\nexit 99\n' % (name, self.calls))
            p.chmod(p.stat().st_mode | stat.S_IXUSR)
        self.env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ.get("PATH", "")))

    def tearDown(self):
        subprocess.run(["rm", "-rf", str(self.tmp)], check=False)

    def test_every_script_prints_its_usage_and_does_nothing_else(self):
        scripts = sorted(p for p in (SOURCE / "scripts").glob("*.sh") if p.name != "child.sh")
        self.assertGreater(len(scripts), 10)
        for script in scripts:
            lines = script.read_text().splitlines()
            first = lines[1].lstrip("#").strip()
            self.assertTrue(first, "%s: no comment on its second line" % script.name)
            for flag in ("--help", "-h"):
                with self.subTest(script=script.name, flag=flag):
                    p = subprocess.run(["bash", str(script), flag], cwd=self.tmp, env=self.env,
                                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                       timeout=30)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertEqual(p.stdout.splitlines()[0], first)
                    self.assertNotIn("#!/", p.stdout)
                    self.assertFalse(self.calls.exists(),
                                     "called: " + (self.calls.read_text() if self.calls.exists() else ""))

    def run_script(self, script, *args):
        self.calls.unlink(missing_ok=True)
        return subprocess.run(["bash", str(SOURCE / "scripts" / script), *args], cwd=self.tmp,
                              env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=30)

    def assert_called_nothing(self):
        self.assertFalse(self.calls.exists(),
                         "called: " + (self.calls.read_text() if self.calls.exists() else ""))

    def test_help_after_other_arguments(self):
        for script, before in (("install-deps.sh", ["--with-torch"]), ("gpu-check.sh", ["core"]),
                               ("fresh-machine-check.sh", ["--keep"])):
            with self.subTest(script=script):
                p = self.run_script(script, *before, "--help")
                self.assertEqual(p.returncode, 0, p.stderr)
                first = (SOURCE / "scripts" / script).read_text().splitlines()[1].lstrip("#").strip()
                self.assertEqual(p.stdout.splitlines()[0], first)
                self.assert_called_nothing()

    def test_arguments_and_values_that_were_taken_silently_are_refused_before_anything(self):
        # Each used to go on: an argument of a script that takes none ignored, the next option
        # taken as a value (--out --full made a directory named --full), an empty or zero value
        # falling back to the default (--budget=, --out "") or to no limit (fuzz.sh --seconds 0).
        for script, args, rc, said in (
                ("test.sh", ["--bogus"], 2, "test.sh: unknown argument '--bogus'"),
                ("stamp-source.sh", ["x"], 2, "stamp-source.sh: unknown argument 'x'"),
                ("make-gpu-bundle.sh", ["x"], 2, "make-gpu-bundle.sh: unknown argument 'x'"),
                ("fetch-fashion-mnist.sh", ["a", "b"], 2, "one TARGET_DIR at most"),
                ("report.sh", ["--out", "--full"], 1, "report.sh: --out needs a directory"),
                ("report.sh", ["--out", ""], 1, "report.sh: --out needs a directory"),
                ("model-session.sh", ["--out", "--short"], 1, "model-session.sh: --out needs a directory"),
                ("model-session.sh", ["--label", ""], 1, "model-session.sh: --label needs a name"),
                ("mpi-vs-threads.sh", ["--build", "--rounds", "2"], 1,
                 "mpi-vs-threads.sh: --build needs a directory"),
                ("mpi-vs-threads.sh", ["--rounds"], 1, "mpi-vs-threads.sh: --rounds needs a number"),
                ("fuzz.sh", ["--seconds", "0"], 2, "fuzz.sh: --seconds needs a whole number > 0, not '0'"),
                ("fuzz.sh", ["--runs", "--grow-corpus"], 2, "fuzz.sh: --runs needs a whole number"),
                ("fuzz.sh", ["--seconds"], 2, "fuzz.sh: --seconds needs a whole number > 0, not ''"),
                ("fresh-machine-check.sh", ["--root", "--keep"], 2, "--root needs a directory"),
                ("fresh-machine-check.sh", ["--suite", "bookwrom"], 2, "--suite 'bookwrom': not a release"),
                ("gpu-check.sh", ["--budget="], 2, "gpu-check.sh: --budget= needs a number of seconds")):
            with self.subTest(script=script, args=args):
                p = self.run_script(script, *args)
                self.assertEqual(p.returncode, rc, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
                self.assertIn(said, p.stderr)
                self.assert_called_nothing()
                self.assertEqual(sorted(x.name for x in self.tmp.iterdir()), ["bin"])

    def test_the_sanitizer_and_fuzz_scripts_refuse_an_unknown_argument_before_anything(self):
        for script, arg, known in (("sanitize.sh", "msan", "--build-only, asan, tsan"),
                                   ("fuzz.sh", "--wat", "--seconds N")):
            with self.subTest(script=script):
                self.calls.unlink(missing_ok=True)
                p = subprocess.run(["bash", str(SOURCE / "scripts" / script), arg], cwd=self.tmp,
                                   env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
                self.assertIn("'%s'" % arg, p.stderr)
                self.assertIn(known, p.stderr)
                self.assertFalse(self.calls.exists(),
                                 "called: " + (self.calls.read_text() if self.calls.exists() else ""))


if __name__ == "__main__":
    SOURCE = Path(sys.argv.pop(1)).resolve()
    unittest.main()
