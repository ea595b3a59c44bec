#!/usr/bin/python3
"""Faults and hostile inputs: bench_runner and allreduce_bench must lose nothing and crash never.

    tests/fault_test.py --bench-runner build/bench_runner --allreduce-bench build/allreduce_bench
                        --source-dir . [-v] [unittest args]

Each case asserts the exit status, the one-line message (naming the file or key, under ~300
characters) and the results file on disk: valid against results/results.schema.json and holding
every run that finished, or absent when the input was bad.
- Interruption: SIGINT / SIGTERM during training, a second signal, SIGKILL at random moments
  (during training, evaluation and the rewrites), --resume of an interrupted 6-run sweep.
- The output: an unwritable path, a read-only file system, a full file system (at the start, and
  filling up during the run), a racing second invocation with the same --out.
- Inputs: bytes that are not UTF-8, a 100,000-deep array, a sweep of 10^10 runs, a gzip bomb,
  trailing garbage after a gzip stream, images of the wrong size, learning rates that are not
  usable floats, '--set training.=', a directory as descriptor, every run skipped.
- allreduce_bench's flags.
Cases that mount a file system need root (and mount rights); they skip with the reason otherwise.
Needs the Fashion-MNIST data (the installed package, $FASHION_MNIST_DIR or SOURCE/data).
"""
import argparse
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import unittest_parts  # noqa: E402
from validate_json import validate  # noqa: E402

BENCH = ALLREDUCE = SOURCE = SCHEMA = DATA = None
STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")
MAX_LINE = 320  # bench_runner's one-line bound


def find_data():
    for d in filter(None, [os.environ.get("FASHION_MNIST_DIR"), str(SOURCE / "data/fashion-mnist"),
                           "/usr/share/datasets/fashion-mnist"]):
        if all((Path(d) / (s + ".gz")).is_file() for s in STEMS):
            return Path(d).resolve()
    return None


def descriptor(runs=1, iterations=3, epochs=1, train=512, test=256, **training):
    t = {"epochs": epochs, "batch_size": 64, "lr": 0.1, "max_iterations_per_epoch": iterations,
         "warmup_iterations": 1}
    t.update(training)
    return {"name": "fault", "dataset": {"dir": str(DATA), "train_limit": train,
                                         "test_limit": test},
            "training": t, "runs": [{"strategy": "single"} for _ in range(runs)]}


def without_kept_from(run):
    """A run as the results file it was measured for holds it (--resume adds kept_from)."""
    return {k: v for k, v in run.items() if k != "kept_from"}


def can_mount():
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    probe = Path(tempfile.mkdtemp(prefix="paralab-mount-probe-"))
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "cannot mount a tmpfs here: " + r.stderr.strip()
        subprocess.run(["umount", str(probe)], check=True)
        return ""
    finally:
        probe.rmdir()


class Case(unittest.TestCase):
    def setUp(self):
        if DATA is None:
            self.skipTest("Fashion-MNIST not found (apt-get install dataset-fashion-mnist)")
        self.tmp = Path(tempfile.mkdtemp(prefix="paralab-fault-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    # ---- helpers ----
    def write(self, doc, name="d.json"):
        (self.tmp / name).write_text(json.dumps(doc))
        return name

    def start(self, *args, program=None):
        return subprocess.Popen([str(program or BENCH), *args], cwd=self.tmp,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")

    def run_cmd(self, *args, program=None, timeout=120):
        p = subprocess.run([str(program or BENCH), *args], cwd=self.tmp,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")

    def assert_bad_input(self, args, *needles, rc=1, program=None):
        """Exit rc, one line on stderr naming what is wrong, and no file left behind."""
        before = sorted(p.name for p in self.tmp.rglob("*"))
        code, out, err = self.run_cmd(*args, program=program)
        self.assertEqual(code, rc, f"stderr: {err!r}")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, f"not one line: {err!r}")
        self.assertLessEqual(len(lines[0]), MAX_LINE, lines[0])
        for n in needles:
            self.assertIn(n, lines[0])
        self.assertEqual(sorted(p.name for p in self.tmp.rglob("*")), before,
                         "a file was written or left behind")
        return lines[0]

    def load_valid(self, path):
        doc = json.loads(Path(path).read_text())
        self.assertEqual(validate(SCHEMA, doc), [], f"{path} does not match the schema")
        return doc

    def wait_for_runs(self, path, n, proc, timeout=60):
        """Waits until the results file holds n runs (it is rewritten after each)."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            if proc.poll() is not None:
                self.fail(f"exited {proc.returncode} early: {proc.stderr.read()}")
            try:
                if len(json.loads(Path(path).read_text())["runs"]) >= n:
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        self.fail(f"{path} never held {n} runs")

    def no_temporaries(self, directory):
        left = [p.name for p in Path(directory).iterdir() if p.name.startswith(".")]
        self.assertEqual(left, [], "temporary files left behind")


class Interruption(Case):
    def test_sigint_in_run_3_keeps_runs_1_and_2_and_marks_3(self):
        doc = descriptor(runs=3, iterations=400, train=60000)
        for run in doc["runs"][:2]:  # short, so that the signal lands in run 3's training
            run["training"] = {"max_iterations_per_epoch": 2}
        name = self.write(doc)
        p = self.start(name, "--out", "r.json", "--quiet")
        self.wait_for_runs(self.tmp / "r.json", 2, p, timeout=120)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("interrupted by SIGINT", err)
        doc = self.load_valid(self.tmp / "r.json")
        self.assertEqual(doc["state"], "interrupted")
        self.assertEqual([r["status"] for r in doc["runs"]], ["ok", "ok", "interrupted"])
        self.assertEqual(doc["runs"][2]["interrupted_at"]["epoch"], 1)
        self.no_temporaries(self.tmp)

    def test_sigterm_exits_143_and_a_second_signal_exits_at_once(self):
        name = self.write(descriptor(runs=2, iterations=400, train=60000))
        p = self.start(name, "--out", "r.json", "--quiet")
        self.wait_for_runs(self.tmp / "r.json", 0, p)
        time.sleep(1.0)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 143, err)
        self.assertEqual(self.load_valid(self.tmp / "r.json")["state"], "interrupted")
        # Two signals in a row: the second ends it without writing; the file stays as it was.
        name = self.write(descriptor(runs=2, iterations=400, train=60000), "d2.json")
        p = self.start(name, "--out", "r2.json", "--quiet")
        self.wait_for_runs(self.tmp / "r2.json", 0, p)
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        doc = self.load_valid(self.tmp / "r2.json")
        self.assertIn(doc["state"], ("running", "interrupted"))
        self.no_temporaries(self.tmp)

    def test_no_thread_that_computes_can_take_the_stop_signals(self):
        # oneDNN's JIT GEMM kernels point the stack pointer into a heap workspace while they run
        # (bench_runner.cpp, take_stop_signals): a handler run on such a thread writes its frame
        # over the heap. So while runs train, every thread blocks SIGINT and SIGTERM and none has
        # a handler for them: one thread of bench_runner's own takes them with sigwait() (which
        # the kernel shows as not blocking them while it waits).
        tasks = Path("/proc/self/task")
        if not tasks.is_dir():
            self.skipTest("no /proc/<pid>/task")
        name = self.write(descriptor(runs=2, iterations=400, train=60000))
        p = self.start(name, "--out", "r.json", "--quiet")
        self.wait_for_runs(self.tmp / "r.json", 0, p)
        time.sleep(1.0)
        stop = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
        masks = {}
        for status in Path(f"/proc/{p.pid}/task").glob("*/status"):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            comm = (status.parent / "comm").read_text().strip()
            masks[status.parent.name] = (comm, int(fields["SigBlk"], 16), int(fields["SigCgt"], 16))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertGreaterEqual(len(masks), 2, masks)  # the main thread and the signal thread
        for tid, (comm, blocked, caught) in masks.items():
            if comm != "stop-signals":
                self.assertEqual(blocked & stop, stop, f"thread {tid} ({comm}) does not block SIGINT and SIGTERM")
            self.assertEqual(caught & stop, 0, f"thread {tid} ({comm}): a handler for SIGINT or SIGTERM")
        self.assertEqual([m[0] for m in masks.values()].count("stop-signals"), 1, masks)
        self.assertEqual(self.load_valid(self.tmp / "r.json")["state"], "interrupted")
        self.no_temporaries(self.tmp)

    def test_sigkill_at_random_moments_leaves_a_valid_file_with_every_finished_run(self):
        # Runs short enough that kills land in training, in evaluation (a 10,000-image test
        # set) and during the rewrites after each run; 12 kills at spread-out moments.
        name = self.write(descriptor(runs=6, iterations=2, test=10000))
        rng = random.Random(7)
        for i in range(12):
            out = f"k{i}.json"
            p = self.start(name, "--out", out, "--quiet")
            self.wait_for_runs(self.tmp / out, 0, p)
            time.sleep(rng.uniform(0.0, 2.5))
            p.kill()
            p.communicate(timeout=60)
            doc = self.load_valid(self.tmp / out)
            finished = [r for r in doc["runs"] if r["status"] == "ok"]
            self.assertEqual(len(finished), len(doc["runs"]), "a run written unfinished")
            self.assertIn(doc["state"], ("running", "complete"))
            if doc["state"] == "complete":
                self.assertEqual(len(doc["runs"]), 6)
        # SIGKILL cannot clean up: a rewrite it interrupts may leave its hidden temporary file.

    def test_resume_completes_an_interrupted_6_run_sweep_exactly(self):
        doc = descriptor(iterations=2)
        doc["runs"] = [{"strategy": "data_parallel", "devices": 2,
                        "sweep": {"allreduce": ["naive", "ring", "tree"],
                                  "batch_scaling": ["strong", "weak"]}}]
        name = self.write(doc)
        p = self.start(name, "--out", "first.json", "--quiet")
        self.wait_for_runs(self.tmp / "first.json", 3, p)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130)
        first = self.load_valid(self.tmp / "first.json")
        kept = [r for r in first["runs"] if r["status"] == "ok"]
        self.assertGreaterEqual(len(kept), 3)
        code, out, err = self.run_cmd(name, "--resume", "first.json", "--out", "all.json",
                                      "--quiet")
        self.assertEqual(code, 0, err)
        full = self.load_valid(self.tmp / "all.json")
        self.assertEqual(full["state"], "complete")
        self.assertEqual(full["resumed_from"], {"path": "first.json", "runs_kept": len(kept)})
        specs = [json.dumps(r["run_spec"], sort_keys=True) for r in full["runs"]]
        self.assertEqual(len(specs), 6)
        self.assertEqual(len(set(specs)), 6, "a run twice")
        self.assertTrue(all(r["status"] == "ok" for r in full["runs"]))
        # The kept runs are the earlier file's, unchanged, and say where they were measured.
        for r in kept:
            self.assertIn(r, [without_kept_from(k) for k in full["runs"]])
        for r in full["runs"]:
            if without_kept_from(r) in kept:
                self.assertEqual(r["kept_from"], {"path": "first.json",
                                                  "environment": first["environment"]})
            else:
                self.assertNotIn("kept_from", r)
        # Another descriptor cannot resume it.
        self.assert_bad_input([name, "--resume", "first.json", "--set", "training.epochs=2"],
                              "--resume first.json", "another descriptor", "/training/epochs")

    def test_resume_reads_the_same_data_wherever_the_descriptor_names_it(self):
        # The first invocation finds the data itself (dataset.dir null); naming the same
        # directory with --data-dir, in another spelling, resumes it. Another directory does
        # not: it could hold other data.
        doc = descriptor(runs=2)
        doc["dataset"]["dir"] = None
        name = self.write(doc)
        env = dict(os.environ, FASHION_MNIST_DIR=str(DATA))
        p = subprocess.run([str(BENCH), name, "--out", "first.json", "--quiet"], cwd=self.tmp,
                           env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        code, out, err = self.run_cmd(name, "--resume", "first.json", "--out", "again.json",
                                      "--quiet", "--data-dir", str(DATA) + "/.")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.load_valid(self.tmp / "again.json")["resumed_from"]["runs_kept"], 2)
        # The summary table says which runs were kept rather than run.
        code, out, err = self.run_cmd(name, "--resume", "first.json", "--out", "table.json",
                                      "--data-dir", str(DATA))
        self.assertEqual(code, 0, err)
        self.assertEqual(out.count("\n    kept from first.json (not run again)\n"), 2, out)
        other = self.tmp / "other-data"
        other.mkdir()
        for stem in STEMS:
            shutil.copy(DATA / (stem + ".gz"), other)
        line = self.assert_bad_input([name, "--resume", "first.json", "--data-dir", str(other)],
                                     "--resume first.json: its runs read the data in " + str(DATA),
                                     "this invocation's is in " + str(other),
                                     "give --data-dir " + str(DATA))
        self.assertNotIn("another descriptor", line)

    def test_resume_refuses_runs_of_other_data_another_machine_or_an_edited_file(self):
        # Both invocations find the data themselves (dataset.dir null), the first through
        # FASHION_MNIST_DIR in a copy, the second in its usual place: the descriptors agree, the
        # data need not, and the runs were kept all the same.
        doc = descriptor(runs=3)
        doc["dataset"]["dir"] = None
        name = self.write(doc)
        copy = self.tmp / "copy-data"
        copy.mkdir()
        for stem in STEMS:
            shutil.copy(DATA / (stem + ".gz"), copy)
        env = dict(os.environ, FASHION_MNIST_DIR=str(copy))
        p = subprocess.run([str(BENCH), name, "--out", "first.json", "--quiet"], cwd=self.tmp,
                           env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        here = dict(os.environ, FASHION_MNIST_DIR=str(DATA))
        p = subprocess.run([str(BENCH), name, "--resume", "first.json", "--out", "x.json"],
                           cwd=self.tmp, env=here, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=120, text=True)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stderr.strip(), f"bench_runner: --resume first.json: its runs read "
                         f"the data in {copy}, this invocation's is in {DATA} (give --data-dir "
                         f"{copy} to resume it)")
        self.assertFalse((self.tmp / "x.json").exists())
        first = json.loads((self.tmp / "first.json").read_text())

        def edited(change):
            doc = json.loads(json.dumps(first))
            change(doc)
            (self.tmp / "edited.json").write_text(json.dumps(doc))
            return [name, "--resume", "edited.json", "--data-dir", str(copy)]

        def set_in(path, value):
            def change(doc):
                *parents, last = path
                target = doc
                for key in parents:
                    target = target[key]
                target[last] = value
            return change

        self.assert_bad_input(edited(set_in(["environment", "cpu_model"], "Another CPU")),
                              "--resume edited.json: its runs ran on another machine",
                              'environment.cpu_model "Another CPU"')
        self.assert_bad_input(edited(set_in(["environment", "cpu_cores"], 4096)),
                              "environment.cpu_cores 4096")
        for path, value, needle in (
                (["runs", 1, "config"], "x", "runs[1].config: must be an object"),
                (["runs", 2, "config", "devices"], 0, "runs[2].config.devices: must be an integer >= 1"),
                (["runs", 0, "epochs", 0, "test_acc"], None, "runs[0].epochs[0].test_acc: must be a number"),
                (["runs", 0, "timing"], [], "runs[0].timing: must be an object"),
                (["runs", 2, "reason"], "why", "runs[2].reason: must be null")):
            with self.subTest(path=path):
                self.assert_bad_input(edited(set_in(path, value)), "--resume edited.json: " + needle)
        self.assert_bad_input(edited(lambda doc: doc["runs"][2].pop("label")),
                              "runs[2].label: missing")
        # The file as written resumes, with the data it read.
        code, _, err = self.run_cmd(*edited(lambda doc: None), "--out", "all.json", "--quiet")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.load_valid(self.tmp / "all.json")["resumed_from"]["runs_kept"], 3)

    def test_an_interrupted_resume_keeps_the_later_runs_of_the_earlier_file(self):
        # Run 2 of 6 is missing from the earlier file; the resume is stopped while it reruns. Its
        # file must hold runs 3-6 too (ok in the earlier file), so that resuming it in turn
        # finishes the sweep with nothing run twice and nothing lost.
        doc = descriptor(iterations=2, train=12800)
        doc["runs"] = [{"strategy": "single", "training": {"seed": k}} for k in range(6)]
        doc["runs"][1]["training"]["max_iterations_per_epoch"] = 200  # 2 s here, longer under ASan
        name = self.write(doc)
        code, _, err = self.run_cmd(name, "--out", "full.json", "--quiet")
        self.assertEqual(code, 0, err)
        earlier = json.loads((self.tmp / "full.json").read_text())
        earlier["runs"][1]["status"] = "interrupted"
        (self.tmp / "first.json").write_text(json.dumps(earlier))
        p = self.start(name, "--resume", "first.json", "--out", "second.json", "--quiet")
        self.wait_for_runs(self.tmp / "second.json", 1, p)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        second = self.load_valid(self.tmp / "second.json")
        self.assertEqual(second["state"], "interrupted")
        self.assertEqual([r["status"] for r in second["runs"]], ["ok", "interrupted"] + ["ok"] * 4)
        self.assertEqual(second["resumed_from"]["runs_kept"], 5)
        for i in (0, 2, 3, 4, 5):
            self.assertIn(earlier["runs"][i], [without_kept_from(r) for r in second["runs"]])
        code, _, err = self.run_cmd(name, "--resume", "second.json", "--out", "third.json", "--quiet")
        self.assertEqual(code, 0, err)
        third = self.load_valid(self.tmp / "third.json")
        self.assertEqual(third["state"], "complete")
        self.assertEqual(third["resumed_from"], {"path": "second.json", "runs_kept": 5})
        self.assertEqual([r["run_spec"] for r in third["runs"]], [r["run_spec"] for r in earlier["runs"]])
        self.assertTrue(all(r["status"] == "ok" for r in third["runs"]))
        # Each kept run names the first file that kept it (first.json, through second.json);
        # run 2, interrupted in second.json, ran in third.json itself.
        self.assertEqual([r.get("kept_from", {}).get("path") for r in third["runs"]],
                         ["first.json", None] + ["first.json"] * 4)
        self.no_temporaries(self.tmp)


class Output(Case):
    def test_unwritable_places_fail_before_training(self):
        name = self.write(descriptor())
        self.assert_bad_input([name, "--out", "/proc/x.json"], "/proc/x.json")
        self.assert_bad_input([name, "--out", "nodir/x.json"], "nodir", "does not exist")
        os.symlink("/nonexistent/target", self.tmp / "dangling.json")
        self.assert_bad_input([name, "--out", "dangling.json"], "dangling.json", "symbolic link")
        (self.tmp / "taken.json").write_text("{}")
        self.assert_bad_input([name, "--out", "taken.json"], "taken.json", "never overwritten")
        self.assertEqual((self.tmp / "taken.json").read_text(), "{}")

    def test_a_racing_second_invocation_stops_before_training(self):
        name = self.write(descriptor(runs=2))
        a = self.start(name, "--out", "same.json", "--quiet")
        b = self.start(name, "--out", "same.json", "--quiet")
        (_, err_a), (_, err_b) = a.communicate(timeout=120), b.communicate(timeout=120)
        self.assertEqual(sorted([a.returncode, b.returncode]), [0, 1], err_a + err_b)
        loser = err_a if a.returncode else err_b
        self.assertIn("same.json", loser)
        self.assertRegex(loser, "exists|never overwritten")
        self.assertEqual(len(self.load_valid(self.tmp / "same.json")["runs"]), 2)

    def mount_tmpfs(self, size, *options):
        why = can_mount()
        if why:
            self.skipTest(why)
        mnt = self.tmp / "mnt"
        mnt.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]),
                        "tmpfs", str(mnt)], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", str(mnt)])
        return mnt

    def test_read_only_file_system(self):
        mnt = self.mount_tmpfs("1m", "ro")
        name = self.write(descriptor())
        self.assert_bad_input([name, "--out", str(mnt / "r.json")], str(mnt), "not writable")

    def test_a_full_file_system_fails_at_the_start(self):
        mnt = self.mount_tmpfs("64k")
        name = self.write(descriptor(runs=3, iterations=50))
        line = self.assert_bad_input([name, "--out", str(mnt / "r.json")], str(mnt / "r.json"),
                                     "MiB free")
        self.assertEqual(list(mnt.iterdir()), [], line)

    def test_a_file_system_that_fills_up_keeps_the_runs_written_before(self):
        mnt = self.mount_tmpfs("2m")
        name = self.write(descriptor(runs=4, iterations=3))
        p = self.start(name, "--out", str(mnt / "r.json"), "--quiet")
        self.wait_for_runs(mnt / "r.json", 1, p)
        # Fill what is left: the next rewrite cannot be written.
        subprocess.run(["dd", "if=/dev/zero", f"of={mnt / 'filler'}", "bs=64k"],
                       capture_output=True)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 1, err)
        self.assertIn("cannot", err)
        self.assertIn("holds the runs written before", err)
        doc = self.load_valid(mnt / "r.json")
        self.assertGreaterEqual(len(doc["runs"]), 1)
        self.no_temporaries(mnt)


class HostileInput(Case):
    def test_bytes_that_are_not_utf8(self):
        name = self.write(descriptor())
        bad = self.tmp / os.fsdecode(b"d\xff.json")  # a file name that is not UTF-8
        bad.write_text(json.dumps(descriptor()))
        self.assert_bad_input([os.fsdecode(b"d\xff.json")], "not valid UTF-8", "\\xFF")
        bad.unlink()
        self.assert_bad_input([name, "--out", os.fsdecode(b"r\xfe.json")], "--out",
                              "not valid UTF-8")
        self.assert_bad_input([name, "--data-dir", os.fsdecode(b"/tmp/\xc0\xaf")], "--data-dir",
                              "not valid UTF-8")
        self.assert_bad_input([name, "--set", os.fsdecode(b"name=\xfe")], "--set name",
                              "not valid UTF-8")

    def test_deep_nesting_is_refused_in_a_file_and_in_set(self):
        deep = "[" * 100000 + "1" + "]" * 100000
        doc = json.dumps(descriptor())[:-1] + ', "deep": ' + deep + "}"
        (self.tmp / "deep.json").write_text(doc)
        self.assert_bad_input(["deep.json"], "deep.json", "nested deeper than 32 levels")
        name = self.write(descriptor())
        self.assert_bad_input([name, "--set", "runs.0.sweep.devices=" + "[" * 50000 + "]" * 50000],
                              "--set runs.0.sweep.devices", "nested deeper")

    def test_a_huge_sweep_is_refused_before_it_is_expanded(self):
        doc = descriptor()
        doc["runs"] = [{"strategy": "data_parallel",
                        "sweep": {f"k{i}": list(range(10)) for i in range(10)}}]
        name = self.write(doc)
        line = self.assert_bad_input([name], "runs.0.sweep", "10000000000 runs", "k0 (10)")
        self.assertIn("limit of 10000", line)

    def write_data(self, images_gz_bytes=None, side=(28, 28), trailing=b""):
        data = self.tmp / "data"
        data.mkdir(exist_ok=True)
        for stem in STEMS:
            shutil.copy(DATA / (stem + ".gz"), data / (stem + ".gz"))
        target = data / "train-images-idx3-ubyte.gz"
        if images_gz_bytes is not None:
            target.write_bytes(images_gz_bytes)
        elif side != (28, 28):
            raw = gzip.open(DATA / "train-images-idx3-ubyte.gz").read()
            count = int.from_bytes(raw[4:8], "big")
            body = raw[16:16 + count * side[0] * side[1]]
            body += bytes(count * side[0] * side[1] - len(body))
            header = raw[:4] + b"".join(v.to_bytes(4, "big") for v in (count, *side))
            target.write_bytes(gzip.compress(header + body, 1) + trailing)
        elif trailing:
            target.write_bytes(target.read_bytes() + trailing)
        return data

    def test_data_files_are_checked_from_their_headers(self):
        doc = descriptor()
        del doc["dataset"]["dir"]
        name = self.write(doc)
        data = self.write_data(side=(14, 56))
        self.assert_bad_input([name, "--data-dir", str(data)], "train-images-idx3-ubyte.gz",
                              "images are 14x56, the model takes 28x28")
        data = self.write_data(side=(32, 32))
        self.assert_bad_input([name, "--data-dir", str(data)], "images are 32x32")
        data = self.write_data(trailing=b"garbage")
        self.assert_bad_input([name, "--data-dir", str(data)], "train-images-idx3-ubyte.gz",
                              "after the end of the gzip stream")
        # A 1 MB file that inflates to 1 GiB: refused after the promised bytes, quickly.
        header = (0x803).to_bytes(4, "big") + b"".join(v.to_bytes(4, "big") for v in (1, 28, 28))
        comp = __import__("zlib").compressobj(9, 8, 31)
        bomb = comp.compress(header + bytes(784))
        zeros = bytes(1 << 20)
        for _ in range(1024):
            bomb += comp.compress(zeros)
        bomb += comp.flush()
        data = self.write_data(images_gz_bytes=bomb)
        t0 = time.time()
        self.assert_bad_input([name, "--data-dir", str(data)], "train-images-idx3-ubyte.gz",
                              "more than 64 MiB of unexpected trailing bytes")
        self.assertLess(time.time() - t0, 10)

    def test_numbers_must_be_usable_as_the_type_they_become(self):
        name = self.write(descriptor())
        for value in ("4.9e-324", "1e300"):
            self.assert_bad_input([name, "--set", "training.lr=" + value], "training.lr",
                                  "positive float32")
        self.assert_bad_input([name, "--set", "training.lr=1e999"], "--set training.lr",
                              "overflow")
        self.assert_bad_input([name, "--set", "training.=0.1"], "--set training.",
                              "empty key")

    def test_a_directory_as_descriptor(self):
        (self.tmp / "dir").mkdir()
        self.assert_bad_input(["dir"], "dir: is a directory")

    def test_nothing_could_run_exits_4_with_the_file(self):
        # Runs that need more cores than the machine has are skipped (as is cuda without a GPU).
        # One example per device: a plan the strategy accepts (4,096 devices cannot split 64).
        doc = descriptor(runs=2, train=8192, batch_size=1)
        doc["runs"] = [{"strategy": "data_parallel", "devices": 4096, "batch_scaling": "weak"}] * 2
        name = self.write(doc)
        code, out, err = self.run_cmd(name, "--out", "r.json", "--quiet")
        self.assertEqual(code, 4, err)
        self.assertIn("nothing could run", err)
        doc = self.load_valid(self.tmp / "r.json")
        self.assertEqual({r["status"] for r in doc["runs"]}, {"skipped"})


class AllreduceBenchFlags(Case):
    def test_several_chunk_sizes_are_each_timed_and_reported(self):
        code, out, err = self.run_cmd(
            "--devices=2", "--sizes=lenet", "--chunk-bytes=0,4096,auto",
            "--benchmark_filter=^allreduce/ring/", "--max-wall=0.01",
            "--benchmark_format=json", program=ALLREDUCE)
        self.assertEqual(code, 0, err)
        rows = json.loads(out)["benchmarks"]
        chunk = lambda name: next(p for p in name.split("/") if p.startswith("chunk:"))
        got = sorted((chunk(r["name"]), r["chunk_bytes"]) for r in rows)
        # CPU devices: "auto" (-1) means the default 256 KiB pieces.
        self.assertEqual(got, [("chunk:-1", 262144), ("chunk:0", 0), ("chunk:4096", 4096)])

    def test_max_wall_caps_each_rows_timing_and_is_recorded(self):
        def run(*extra):
            code, out, err = self.run_cmd(
                "--devices=2", "--sizes=1024", "--benchmark_filter=^allreduce/ring/",
                "--benchmark_format=json", *extra, program=ALLREDUCE)
            self.assertEqual(code, 0, err)
            doc = json.loads(out)
            return doc["context"]["paralab_max_wall_s"], doc["benchmarks"][0]["ops"]
        wall, ops = run()
        self.assertEqual(float(wall), 0.5)
        short_wall, short_ops = run("--max-wall=0.01")
        self.assertEqual(float(short_wall), 0.01)
        # A 1 KiB ring between two cores takes tens of microseconds with its barriers: the
        # default row times thousands, the capped one a small fraction of them.
        self.assertGreaterEqual(short_ops, 1)
        self.assertLess(short_ops, ops / 5)

    def test_launches_time_a_chain_per_rank_only_when_asked(self):
        code, out, err = self.run_cmd(
            "--devices=2", "--sizes=lenet", "--launches", "--benchmark_filter=^launches",
            "--max-wall=0.01", "--benchmark_format=json", program=ALLREDUCE)
        self.assertEqual(code, 0, err)
        rows = json.loads(out)["benchmarks"]
        self.assertEqual([r["name"].split("/iterations")[0] for r in rows], ["launches/devices:2"])
        self.assertEqual((rows[0]["devices"], rows[0]["launches_per_rank"]), (2, 32))
        self.assertGreater(rows[0]["real_time"], 0)
        code, out, err = self.run_cmd("--devices=2", "--sizes=lenet", "--benchmark_list_tests",
                                      program=ALLREDUCE)
        self.assertEqual(code, 0, err)
        self.assertNotIn("launches", out)

    def test_sizes_named_or_listed(self):
        def sizes(arg):
            code, out, err = self.run_cmd("--devices=2", arg, "--benchmark_filter=^memcpy/",
                                          "--benchmark_list_tests", program=ALLREDUCE)
            self.assertEqual(code, 0, err)
            return [int(n.split("bytes:")[1].split("/")[0]) for n in out.split()]
        lenet = 516272
        self.assertEqual(sizes("--sizes=lenet"), [lenet])
        self.assertEqual(sizes("--sizes=sweep"), sorted([4 ** i for i in range(1, 15)] + [lenet]))
        self.assertEqual(sizes("--sizes=fine"), sorted([2 ** i for i in range(2, 29)] + [lenet]))
        # A list: those sizes alone, ascending, each once.
        self.assertEqual(sizes("--sizes=1048576,64,64,536870912"), [64, 1048576, 536870912])

    def test_flags(self):
        code, out, err = self.run_cmd("--help", program=ALLREDUCE)
        self.assertEqual(code, 0)
        for flag in ("--backend", "--devices", "--oversubscribe", "--sizes", "--chunk-bytes",
                     "--launches", "--max-wall", "--benchmark_filter"):
            self.assertIn(flag, out)
        for bad in ("0", "-1", "abc", "1e3", "7200", ".", "", "0.5.1"):
            self.assert_bad_input(["--max-wall=" + bad], "--max-wall: '%s'" % bad, program=ALLREDUCE)
        self.assert_bad_input(["--devices=2abc"], "--devices", "2abc", program=ALLREDUCE)
        # Each row times collectives for --max-wall; Google Benchmark's minimum times would be
        # silently ignored (every row is one iteration), so they are refused.
        for flag in ("--benchmark_min_time=2", "--benchmark_min_time=2s", "--benchmark_min_warmup_time=1"):
            self.assert_bad_input([flag, "--devices=2", "--sizes=lenet"], flag.split("=")[0] + ": not used here",
                                  "--max-wall", program=ALLREDUCE)
        for bad in ("2", "fast", "-4", "", "4,,8"):
            self.assert_bad_input(["--chunk-bytes=" + bad], "--chunk-bytes", program=ALLREDUCE)
        for bad, item in (("6", "'6'"), ("coarse", "'coarse'"), ("0", "'0'"), ("4,,8", "''"),
                          ("-4", "'-4'"), ("8589934592", "'8589934592'"), ("", "''")):
            self.assert_bad_input(["--sizes=" + bad], "--sizes: " + item, program=ALLREDUCE)
        (self.tmp / "old.json").write_text("{}")
        self.assert_bad_input(["--benchmark_out=old.json", "--devices=2", "--sizes=lenet"],
                              "old.json", "never overwritten", program=ALLREDUCE)
        self.assertEqual((self.tmp / "old.json").read_text(), "{}")
        for bad in ("(", "matches_nothing"):
            code, out, err = self.run_cmd("--devices=2", "--sizes=lenet",
                                          "--benchmark_filter=" + bad, program=ALLREDUCE)
            self.assertEqual(code, 1, err)
            self.assertIn("no benchmark ran", err)
        # Google Benchmark's own flags, whose bad values it took by printing its usage and
        # exiting 0, or silently (no row, exit 0); pieces that are not whole floats (labelled
        # chunk:5, timed as 4-byte pieces); --graphs=on where no graph can be made (it failed
        # at the first memcpy row, after the file was opened).
        for args, said in ((["--benchmark_format=xml"], "--benchmark_format: 'xml' (known: "),
                           (["--benchmark_out_format=xml", "--benchmark_out=x.json"],
                            "--benchmark_out_format: 'xml'"),
                           (["--benchmark_time_unit=fs"], "--benchmark_time_unit: 'fs'"),
                           (["--benchmark_repetitions=0", "--benchmark_out=x.json"],
                            "--benchmark_repetitions: '0' is not a whole number >= 1"),
                           (["--benchmark_repetitions=-3"], "--benchmark_repetitions: '-3'"),
                           (["--chunk-bytes=6"], "--chunk-bytes: '6'"),
                           (["--graphs=on", "--devices=4", "--oversubscribe",
                             "--benchmark_out=x.json"], "--graphs=on: cpu:0 cannot capture")):
            with self.subTest(args=args):
                self.assert_bad_input(["--sizes=4", "--devices=2", *args], said,
                                      program=ALLREDUCE)

    def test_bench_out_is_whole_or_absent(self):
        # The rows go to a hidden file that becomes --benchmark_out's once all are written.
        code, out, err = self.run_cmd("--devices=2", "--sizes=4,1024", "--max-wall=0.01",
                                      "--benchmark_out=rows.json", program=ALLREDUCE)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(p.name for p in self.tmp.iterdir()), ["rows.json"])
        rows = json.loads((self.tmp / "rows.json").read_text())["benchmarks"]
        self.assertEqual(sorted(r["name"] for r in rows if r["name"].startswith("memcpy/")),
                         ["memcpy/devices:2/bytes:1024/iterations:1/manual_time",
                          "memcpy/devices:2/bytes:4/iterations:1/manual_time"])
        # BENCHMARK_OUT, which Google Benchmark reads too, obeys the same rules: an existing
        # file is refused (it was overwritten), a new one is written whole.
        env = dict(os.environ, BENCHMARK_OUT="rows.json")
        p = subprocess.run([str(ALLREDUCE), "--devices=2", "--sizes=4"], cwd=self.tmp, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stderr, "allreduce_bench: --benchmark_out=rows.json: file exists "
                                   "(results are never overwritten)\n")
        # Stopped by SIGINT while it times: exit 130, no file, not even a hidden one.
        p = self.start("--devices=2", "--sizes=sweep", "--max-wall=0.05",
                       "--benchmark_out=stopped.json", program=ALLREDUCE)
        deadline = time.time() + 30
        while not any(f.name.startswith(".stopped.json.partial-") for f in self.tmp.iterdir()):
            self.assertLess(time.time(), deadline, "no hidden file appeared")
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130)
        self.assertEqual(sorted(f.name for f in self.tmp.iterdir()), ["rows.json"])


def main():
    global BENCH, ALLREDUCE, SOURCE, SCHEMA, DATA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-runner", required=True)
    parser.add_argument("--allreduce-bench", required=True)
    parser.add_argument("--source-dir", required=True)
    args, rest = parser.parse_known_args()
    BENCH = Path(args.bench_runner).resolve()
    ALLREDUCE = Path(args.allreduce_bench).resolve()
    SOURCE = Path(args.source_dir).resolve()
    SCHEMA = SOURCE / "results" / "results.schema.json"
    DATA = find_data()
    unittest_parts.main(__name__, rest)


if __name__ == "__main__":
    main()
