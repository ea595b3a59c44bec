#!/usr/bin/python3
"""Tests of cmake/build_info.cmake, which records the commit a build is made from.

    tests/build_info_test.py --cmake cmake --source-dir . [-v]

Each case builds a small source tree in a temporary directory, runs the script on it as the
build does, and reads the header it writes: a git checkout of its own (clean, then dirty), a copy
inside another repository (which must not report that repository's commit), the same copy with a
.paralab-source-commit stamp, and a malformed stamp (a clear error naming the file). Needs git.
"""
import argparse
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

CMAKE = None
SCRIPT = None


def git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def new_repo(path):
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    (path / "file.txt").write_text("one\n")
    git(path, "add", "file.txt")
    git(path, "commit", "-q", "-m", "first")
    return git(path, "rev-parse", "HEAD")


class BuildInfo(unittest.TestCase):
    def setUp(self):
        if not shutil.which("git"):
            self.skipTest("git is not installed")
        self.tmp = Path(tempfile.mkdtemp(prefix="paralab-build-info-"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, src):
        out = self.tmp / "out" / "paralab_build_info.h"
        proc = subprocess.run([CMAKE, f"-DSRC={src}", f"-DOUT={out}", "-P", str(SCRIPT)],
                              capture_output=True, text=True)
        return proc, (out.read_text() if out.exists() else None)

    def header(self, src):
        proc, text = self.run_script(src)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        values = {}
        for line in text.splitlines():
            if line.startswith("#define "):
                _, name, value = line.split(None, 2)
                values[name] = value.split("//")[0].strip()
        return (values["PARALAB_BUILD_COMMIT"], values["PARALAB_BUILD_DIRTY"],
                values["PARALAB_BUILD_COMMIT_ORIGIN"])

    def test_own_checkout_clean_then_dirty(self):
        src = self.tmp / "src"
        head = new_repo(src)
        self.assertEqual(self.header(src), (f'"{head}"', "0", '"git"'))
        (src / "file.txt").write_text("two\n")
        self.assertEqual(self.header(src), (f'"{head}"', "1", '"git"'))

    def test_copy_inside_another_repository_does_not_take_its_commit(self):
        outer = self.tmp / "outer"
        new_repo(outer)
        src = outer / "vendor" / "paralab"
        src.mkdir(parents=True)
        (src / "CMakeLists.txt").write_text("# a copy\n")
        self.assertEqual(self.header(src), ("nullptr", "-1", '"unknown"'))

    def test_copy_with_a_stamp_reports_the_stamped_commit(self):
        outer = self.tmp / "outer"
        new_repo(outer)
        src = outer / "paralab"
        src.mkdir()
        sha = "0123456789abcdef0123456789abcdef01234567"
        (src / ".paralab-source-commit").write_text(f"commit {sha}\ndirty true\n")
        self.assertEqual(self.header(src), (f'"{sha}"', "1", '"stamp"'))

    def test_malformed_stamp_is_an_error_naming_the_file(self):
        src = self.tmp / "copy"
        src.mkdir()
        stamp = src / ".paralab-source-commit"
        stamp.write_text("commit not-a-sha\n")
        proc, text = self.run_script(src)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(str(stamp), proc.stderr.replace("\n", ""))
        self.assertIsNone(text, "no header is written")

    def test_an_unchanged_header_is_not_rewritten(self):
        src = self.tmp / "src"
        new_repo(src)
        self.header(src)
        out = self.tmp / "out" / "paralab_build_info.h"
        before = out.stat().st_mtime_ns
        self.header(src)
        self.assertEqual(out.stat().st_mtime_ns, before, "a rewrite would recompile its users")


def main():
    global CMAKE, SCRIPT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cmake", default="cmake")
    parser.add_argument("--source-dir", required=True)
    args, rest = parser.parse_known_args()
    CMAKE = args.cmake
    SCRIPT = Path(args.source_dir).resolve() / "cmake" / "build_info.cmake"
    unittest.main(module=__name__, argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
