#!/usr/bin/python3
"""scripts/gpu-results.sh: gpu-check.sh calls' files into results/reference/<gpu>-<date>/ with a
PROVENANCE.md of their facts; every bad input one line, a non-zero exit, nothing written.

    gpu_results_test.py --source-dir DIR
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

SOURCE = None  # main(): --source-dir


def gpu_check_json(gpu="NVIDIA H100 80GB HBM3", utc="2026-12-07T10:11:12Z"):
    dev = {"name": "cuda:0", "kind": "cuda", "gpu_model": gpu, "sm_count": 132, "sm_share": 132}
    return {"environment": {"utc_time": utc, "git": {"build": {"commit": "ab" * 20, "dirty": False}},
                            "libraries": {"cudnn": "9.19.0", "nccl": "2.28.9"}},
            "runs": [{"status": "ok", "label": "single", "config": {"backend": "cuda", "device_list": [dev]}}]}


def call(root, name, files, summary):
    """A gpu-check.sh call's $OUT: its files packed as gpu-check-files.tar.gz, its summary.txt."""
    out = os.path.join(root, name)
    os.makedirs(out)
    with tarfile.open(os.path.join(out, "gpu-check-files.tar.gz"), "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo("./" + rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(summary)
    return out


SUMMARY1 = ("gpu-check: budget 480 s; parts: determinism speed; files in /tmp/x, packed into /o/x.tar.gz\n"
            "gpu-check: GPU: NVIDIA H100 80GB HBM3, 580.1, 81559 MiB\n"
            "gpu-check: PASS: same seed, same bits (cudnn) (2 epochs)\n"
            "gpu-check: FAIL: ParaLab full epoch 70.1 ms (goal <= 50 ms)\n"
            "gpu-check: FAIL after 300 s of the 480 s budget\n")
SUMMARY2 = ("gpu-check: budget 200 s; parts: sweep; files in /tmp/y, packed into /o/y.tar.gz\n"
            "gpu-check: NOT RUN: ncu (x): 10 s of the 200 s budget left, it needs about 60 s\n"
            "gpu-check: PASS: the model's collective sweep: every algorithm (exit 0, 256 rows)\n"
            "gpu-check: PASS after 150 s of the 200 s budget\n")
CSV = "name, driver_version, memory.total [MiB]\nNVIDIA H100 80GB HBM3, 580.1, 81559 MiB\n"


def run(*args, cwd=None):
    return subprocess.run([os.path.join(SOURCE, "scripts", "gpu-results.sh"), *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd or SOURCE)


class GpuResults(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.ref = os.path.join(self.root, "reference")
        os.mkdir(self.ref)

    def tearDown(self):
        self.tmp.cleanup()

    def contents(self):
        return sorted(os.listdir(self.ref))

    def refused(self, proc, code, *words):
        self.assertEqual(proc.returncode, code, proc.stdout + proc.stderr)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("gpu-results.sh: "), lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(self.contents(), [], "something was written")

    def test_two_calls_make_the_gpus_directory_with_its_provenance(self):
        c1 = call(self.root, "c1", {"gpu.csv": CSV, "gpu-check.json": json.dumps(gpu_check_json()),
                                    "test_single.log": "first", "runs/det-cudnn-1.json": "{}"}, SUMMARY1)
        c2 = call(self.root, "c2", {"gpu.csv": CSV, "test_single.log": "second",
                                    "allreduce-cuda-sweep.json": "{}", "odd.bin": "x"}, SUMMARY2)
        proc = run("--reference", self.ref, c1, c2)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(self.contents(), ["h100-2026-12-07"])
        d = os.path.join(self.ref, "h100-2026-12-07")
        self.assertIn("gpu-results.sh: wrote %s (" % d, proc.stdout)
        self.assertIn("the performance model cannot fit it", proc.stdout)
        self.assertIn("add what the figures show against the goals", proc.stdout)
        self.assertEqual(sorted(os.listdir(d)), ["PROVENANCE.md", "allreduce-cuda-sweep.json", "gpu-check.json",
                                                 "gpu.csv", "odd.bin", "runs", "summary-call1.txt",
                                                 "summary-call2.txt", "test_single.log"])
        with open(os.path.join(d, "test_single.log")) as f:
            self.assertEqual(f.read(), "second", "a later call's file replaces an earlier one")
        with open(os.path.join(d, "summary-call1.txt")) as f:
            self.assertEqual(f.read(), SUMMARY1)
        with open(os.path.join(d, "PROVENANCE.md")) as f:
            prov = f.read()
        for text in ("One NVIDIA H100 80GB HBM3 (132 SMs, 81559 MiB, driver 580.1; `gpu.csv`); cudnn 9.19.0, "
                     "nccl 2.28.9, on 2026-12-07 (UTC). Built there from commit abababababab (recorded dirty: "
                     "false)", "from 2 call(s)",
                     "`summary-call1.txt`: budget 480 s; parts: determinism speed;",
                     "FAIL after 300 s of the 480 s budget",
                     "- FAIL: ParaLab full epoch 70.1 ms (goal <= 50 ms)",
                     "- NOT RUN: ncu (x)", "`summary-call2.txt`: budget 200 s; parts: sweep;",
                     "| `test_single.log` | the GPU tests",
                     "| `runs/det-cudnn-1.json` | same seed, same bits",
                     "| `odd.bin` | (not described here: see the summaries) |"):
            self.assertIn(text, prov)
        self.assertEqual(sorted(os.listdir(self.ref)), ["h100-2026-12-07"], "no staging left behind")

        # The same calls again: the directory exists, nothing is written into it.
        before = sorted(os.listdir(d))
        proc = run("--reference", self.ref, c1, c2)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("h100-2026-12-07 exists: nothing written", proc.stderr)
        self.assertEqual(sorted(os.listdir(d)), before)
        self.assertEqual(self.contents(), ["h100-2026-12-07"])
        # Another date is another directory; one call keeps its summary as summary.txt. Paths are
        # taken from where the script is called.
        proc = run("--reference", "reference", "--date", "2026-12-08", "c1", cwd=self.root)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("summary.txt", os.listdir(os.path.join(self.ref, "h100-2026-12-08")))

    def test_the_model_fits_a_real_run_gathered_so(self):
        # The 2026-12-04 H200 run's check and sweep as one call's files: the directory it makes is
        # one the performance model fits (model/calibrate.py gpu_run), and the script says so.
        src = os.path.join(SOURCE, "results", "reference", "h200-2026-12-04")
        files = {}
        for f in ("gpu.csv", "gpu-check.json", "allreduce-cuda-sweep.json"):
            with open(os.path.join(src, f)) as fh:
                files[f] = fh.read()
        with open(os.path.join(src, "summary-call2.txt")) as fh:
            c = call(self.root, "c", files, fh.read())
        proc = run("--reference", self.ref, c)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("the performance model fits it (scripts/report.sh): GpuRun(kind='h200', directory='%s', "
                      "gpu='H200', sms=132)" % os.path.join(self.ref, "h200-2026-12-04"), proc.stdout)

    def test_bad_inputs_are_one_line_and_write_nothing(self):
        good = call(self.root, "good", {"gpu.csv": CSV, "gpu-check.json": json.dumps(gpu_check_json())}, SUMMARY1)
        self.refused(run("--reference", self.ref), 2, "no call's output folder given")
        self.refused(run("--reference", self.ref, "--bogus", good), 2, "unknown option '--bogus'")
        self.refused(run("--reference", self.ref, good, "--date"), 2, "--date needs a value")
        self.refused(run("--reference", self.ref, "--date", "7 Dec", good), 2, "--date '7 Dec' is not YYYY-MM-DD")
        self.refused(run("--reference", os.path.join(self.root, "absent"), good), 1, "absent: no such directory")
        os.makedirs(os.path.join(self.root, "empty"))
        self.refused(run("--reference", self.ref, good, os.path.join(self.root, "empty")), 1,
                     "empty: no gpu-check-files.tar.gz")
        amd = call(self.root, "amd", {"gpu.csv": "name, d, m\nAMD Instinct MI300X, 1, 2 MiB\n"}, SUMMARY1)
        self.refused(run("--reference", self.ref, amd), 1, "gpu.csv: 'AMD Instinct MI300X' is not an NVIDIA GPU's name")
        nosmi = call(self.root, "nosmi", {"gpu.csv": "Failed to initialize NVML\n"}, SUMMARY1)
        self.refused(run("--reference", self.ref, nosmi), 1, "gpu.csv: no GPU named")
        undated = call(self.root, "undated", {"gpu.csv": CSV}, SUMMARY1)
        self.refused(run("--reference", self.ref, undated), 1, "no UTC date recorded; give one with --date")
        broken = os.path.join(self.root, "broken")
        os.makedirs(broken)
        with open(os.path.join(broken, "gpu-check-files.tar.gz"), "w") as f:
            f.write("not a tar")
        with open(os.path.join(broken, "summary.txt"), "w") as f:
            f.write(SUMMARY1)
        proc = run("--reference", self.ref, broken)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("broken/gpu-check-files.tar.gz: cannot unpack", proc.stderr)
        self.assertEqual(self.contents(), [])
        self.assertEqual(run("--help").returncode, 0)


def main():
    global SOURCE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source-dir", required=True)
    args, rest = ap.parse_known_args()
    SOURCE = os.path.abspath(args.source_dir)
    unittest.main(module=__name__, argv=[sys.argv[0], *rest])


if __name__ == "__main__":
    main()
