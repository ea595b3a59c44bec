#!/usr/bin/python3
"""Command-line tests of bench_runner: results files, --set, output, bad input, divergence.

    tests/cli_test.py --bench-runner build/bench_runner --source-dir . [-v] [unittest args]

Each test runs bench_runner in a fresh temporary directory (its cwd) on a tiny slice of
Fashion-MNIST (512 train / 500 test images, 4 iterations of 64 per epoch), so the suite takes
seconds. Results files are checked against results/results.schema.json with
tests/validate_json.py; bad descriptors are checked against experiments/descriptor.schema.json
too, so the schema and experiments/descriptor.cpp cannot drift apart unnoticed.

Tests that train need the dataset ($FASHION_MNIST_DIR, SOURCE_DIR/data/fashion-mnist or
/usr/share/datasets/fashion-mnist); without it they are skipped with that reason, and the
bad-input tests still run. Uses only the standard library and python3-jsonschema.
"""
import argparse
import calendar
import gzip
import json
import math
import os
import pty
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import unittest_parts  # noqa: E402  (needs the path above)
from validate_json import validate  # noqa: E402

BENCH_RUNNER = None  # absolute paths, set in main()
SOURCE_DIR = None
DATA_DIR = None
RESULTS_SCHEMA = None
DESCRIPTOR_SCHEMA = None

TIMEOUT_S = 120  # one tiny run takes about a second; this only stops a hang
DATA_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
TRAIN_LIMIT, TEST_LIMIT, BATCH, ITERS, WARMUP = 512, 500, 64, 4, 1
HUGE_LR = 1e30  # LeNet's loss is NaN by the 2nd step at this lr (1e5 stays finite, 1e10 works too)


def find_data_dir():
    """The first directory of bench_runner's search list that holds all four files, or None."""
    candidates = [os.environ.get("FASHION_MNIST_DIR") or None,
                  str(SOURCE_DIR / "data" / "fashion-mnist"),
                  "/usr/share/datasets/fashion-mnist"]
    for d in filter(None, candidates):
        if all((Path(d) / (s + ".gz")).is_file() or (Path(d) / s).is_file() for s in DATA_STEMS):
            return str(Path(d).resolve())
    return None


def tiny_descriptor(**top):
    """A valid descriptor for a run of a few seconds; keyword arguments replace top-level keys."""
    doc = {
        "name": "clitest",
        "description": "bench_runner CLI test",
        "backend": "auto",
        "dataset": {"dir": DATA_DIR, "train_limit": TRAIN_LIMIT, "test_limit": TEST_LIMIT},
        "training": {"epochs": 1, "batch_size": BATCH, "lr": 0.1, "seed": 0,
                     "max_iterations_per_epoch": ITERS, "warmup_iterations": WARMUP},
        "runs": [{"strategy": "single"}],
    }
    doc.update(top)
    return doc


def with_training(**values):
    doc = tiny_descriptor()
    doc["training"].update(values)
    return doc


def idx_gz(path, magic, dims, payload):
    """Writes an IDX file (big-endian header: magic, then each dimension) gzip-compressed."""
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


class BenchRunnerCase(unittest.TestCase):
    """A fresh temporary cwd per test, and helpers to run bench_runner in it."""

    needs_data = False

    def setUp(self):
        if self.needs_data and DATA_DIR is None:
            self.skipTest("Fashion-MNIST not found in $FASHION_MNIST_DIR, <source>/data/fashion-"
                          "mnist or /usr/share/datasets/fashion-mnist: apt-get install "
                          "dataset-fashion-mnist")
        self.tmp = Path(tempfile.mkdtemp(prefix="paralab-cli-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def write_descriptor(self, doc, name="descriptor.json"):
        path = self.tmp / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc, indent=1))
        return name  # relative to the cwd bench_runner runs in

    def run_bench(self, *args, env=None):
        return subprocess.run([str(BENCH_RUNNER), *args], cwd=self.tmp, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT_S,
                              env=None if env is None else {**os.environ, **env})

    def files(self):
        """Every file under the temporary cwd (hidden ones included), relative paths."""
        return sorted(str(p.relative_to(self.tmp)) for p in self.tmp.rglob("*") if p.is_file())

    def assert_ran(self, proc, rc=0):
        self.assertEqual(proc.returncode, rc, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")

    def load_valid_results(self, path):
        doc = json.loads((self.tmp / path).read_text())
        errors = validate(RESULTS_SCHEMA, doc)
        self.assertEqual(errors, [], f"{path} does not match {RESULTS_SCHEMA}")
        return doc

    def run_tiny(self, *extra, doc=None, out="out.json"):
        """Runs a tiny descriptor with --quiet; returns the validated results."""
        name = self.write_descriptor(doc or tiny_descriptor())
        proc = self.run_bench(name, "--out", out, "--quiet", *extra)
        self.assert_ran(proc)
        self.assertEqual((proc.stdout, proc.stderr), ("", ""))
        return self.load_valid_results(out)


class HappyPath(BenchRunnerCase):
    needs_data = True

    def test_results_file_is_complete_and_valid(self):
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out.json", "--quiet")
        self.assert_ran(proc)
        self.assertEqual(self.files(), ["descriptor.json", "out.json"], "stray or temporary files")
        doc = self.load_valid_results("out.json")

        self.assertEqual(doc["schema_version"], 2)
        self.assertEqual(doc["environment"]["argv"],
                         [str(BENCH_RUNNER), name, "--out", "out.json", "--quiet"])
        self.assertEqual(doc["dataset"], {"dir": DATA_DIR, "train_examples": TRAIN_LIMIT,
                                          "test_examples": TEST_LIMIT})
        resolved = doc["descriptor"]
        self.assertEqual(resolved["training"]["eval_batch_size"], 1000, "default not filled in")
        self.assertEqual(resolved["training"]["threads_per_device"], 1, "default not filled in")
        self.assertEqual(resolved["runs"], [{"strategy": "single"}])

        self.assertEqual(len(doc["runs"]), 1)
        run = doc["runs"][0]
        self.assertEqual((run["status"], run["reason"], run["label"]), ("ok", None, "single x1"))
        self.assertNotIn("diverged_at", run)
        # The model's description (core/model.h): the default, LeNet.
        model = run["config"].pop("model")
        self.assertEqual((model["name"], model["config"], model["parameters"]),
                         ("lenet", "lenet", 129068))
        self.assertEqual([l["name"] for l in model["layers"]], ["conv1", "conv2", "fc1", "fc2"])
        self.assertEqual(run["config"], {
            "strategy": "single", "backend": "cpu", "devices": 1, "global_batch": BATCH,
            "per_device_batch": BATCH, "lr": 0.1, "seed": 0, "epochs": 1,
            "max_iterations_per_epoch": ITERS, "warmup_iterations": WARMUP,
            "threads_per_device": 1, "eval_batch_size": 1000, "train_examples": TRAIN_LIMIT,
            "test_examples": TEST_LIMIT, "options": {"cuda_graphs": True, "read_back": "step", "steps_per_launch": 1},
            "device_list": [{"name": "cpu:0", "kind": "cpu", "threads": 1}],
            "batch_scaling": "strong", "lr_scaling": "none", "lr_scaled": 0.1,
            "lr_warmup_iterations": 0, "oversubscribed": False, "sweep": {}})
        # The only 1-device run is its own speedup baseline.
        self.assertEqual(run["scaling"], {"baseline": "single x1", "speedup": 1.0, "efficiency": 1.0})

        # Warm-up iterations are listed apart and left out of the timing statistics.
        self.assertEqual([(i["epoch"], i["iteration"]) for i in run["warmup"]], [(1, 1)])
        self.assertEqual([(i["epoch"], i["iteration"]) for i in run["iterations"]],
                         [(1, 2), (1, 3), (1, 4)])
        for it in run["warmup"] + run["iterations"]:
            self.assertEqual(it["samples"], BATCH)
            self.assertEqual(it["communication_ms"], 0.0)
            parts = it["forward_ms"] + it["backward_ms"] + it["optimizer_ms"]
            self.assertGreaterEqual(it["total_ms"], parts * (1 - 1e-9), it)

        totals = [i["total_ms"] for i in run["iterations"]]
        deciles = statistics.quantiles(totals, n=10, method="inclusive")  # linear interpolation
        timing = run["timing"]
        self.assertEqual((timing["timed_iterations"], timing["warmup_iterations"]), (3, 1))
        expected = {"median_iteration_ms": statistics.median(totals),
                    "p10_iteration_ms": deciles[0], "p90_iteration_ms": deciles[8],
                    "mean_iteration_ms": statistics.fmean(totals),
                    "samples_per_s": 3 * BATCH / (sum(totals) / 1000)}
        for key, value in expected.items():
            self.assertTrue(math.isclose(timing[key], value, rel_tol=1e-9),
                            f"timing.{key} = {timing[key]}, expected {value}")

        self.assertEqual(len(run["epochs"]), 1)
        epoch = run["epochs"][0]
        self.assertEqual((epoch["epoch"], epoch["iterations"], epoch["samples"]),
                         (1, ITERS, ITERS * BATCH))
        self.assertLess(epoch["train_loss"], 2.5, "LeNet starts near ln(10) = 2.30")
        self.assertLess(epoch["test_loss"], 2.5)

    def test_default_path_is_results_name_timestamp_and_never_reused(self):
        name = self.write_descriptor(tiny_descriptor())
        started = time.time()
        self.assert_ran(self.run_bench(name, "--quiet"))
        first = self.files()
        self.assertEqual(len(first), 2, first)
        path = first[1]
        match = re.fullmatch(r"results/clitest-(\d{8}T\d{6}Z)\.json", path)
        self.assertIsNotNone(match, f"unexpected default results path {path}")
        stamp = calendar.timegm(time.strptime(match[1], "%Y%m%dT%H%M%SZ"))
        self.assertLess(abs(stamp - started), 120, f"{match[1]} is not the current UTC time")
        self.load_valid_results(path)
        content = (self.tmp / path).read_bytes()

        self.assert_ran(self.run_bench(name, "--quiet"))  # same second or not: a new name
        second = self.files()
        self.assertEqual(len(second), 3, second)
        self.assertRegex(second[2], r"^results/clitest-\d{8}T\d{6}Z(-2)?\.json$")
        self.assertEqual((self.tmp / path).read_bytes(), content)

    def test_a_taken_default_name_moves_on_to_the_next_free_number(self):
        # The names of the next seconds taken, and their -2: the run takes -3 of its second
        # (never -2-2, which a name chosen as -2 became when another run took it meanwhile).
        name = self.write_descriptor(tiny_descriptor())
        (self.tmp / "results").mkdir()
        now = time.time()
        for t in range(int(now) - 1, int(now) + 30):
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))
            for suffix in ("", "-2"):
                (self.tmp / f"results/clitest-{stamp}{suffix}.json").write_text("{}")
        before = set(self.files())
        self.assert_ran(self.run_bench(name, "--quiet"))
        new = sorted(set(self.files()) - before)
        self.assertEqual(len(new), 1, new)
        self.assertRegex(new[0], r"^results/clitest-\d{8}T\d{6}Z-3\.json$")
        self.load_valid_results(new[0])
        self.assertEqual(sorted(p.name for p in (self.tmp / "results").iterdir()
                                if p.name.startswith(".")), [], "a temporary file was left")

    def test_existing_out_is_never_overwritten(self):
        name = self.write_descriptor(tiny_descriptor())
        self.assert_ran(self.run_bench(name, "--out", "out.json", "--quiet"))
        content = (self.tmp / "out.json").read_bytes()
        proc = self.run_bench(name, "--out", "out.json", "--quiet")
        self.assertNotEqual(proc.returncode, 0)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertTrue(lines[0].startswith("bench_runner: "), lines[0])
        self.assertIn("out.json", lines[0])
        self.assertIn("exists", lines[0])
        self.assertEqual((self.tmp / "out.json").read_bytes(), content)
        self.assertEqual(self.files(), ["descriptor.json", "out.json"], "stray or temporary files")


class Plot(BenchRunnerCase):
    """--plot: the interpreter it uses, and one line (exit 5, results kept) when none has
    matplotlib."""

    needs_data = True

    def fake_python(self, has_matplotlib):
        """An interpreter that either has matplotlib (runs /usr/bin/python3) or has none (fails
        the import probe, and would print a traceback if it were ever run on plot_all.py)."""
        path = self.tmp / ("py-with" if has_matplotlib else "py-without")
        body = ('exec /usr/bin/python3 "$@"' if has_matplotlib else
                'echo "Traceback (most recent call last):" >&2; '
                'echo "ModuleNotFoundError: No module named \'matplotlib\'" >&2; exit 1')
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)
        return str(path)

    def test_no_interpreter_with_matplotlib_is_one_line_and_exit_5(self):
        name = self.write_descriptor(tiny_descriptor())
        fake = self.fake_python(False)
        proc = self.run_bench(name, "--out", "out.json", "--quiet", "--plot",
                              env={"PARALAB_PYTHON": fake})
        self.assert_ran(proc, rc=5)
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("no Python 3 with matplotlib (tried " + fake + ")", lines[0])
        self.assertIn("python3-matplotlib", lines[0])
        self.assertIn("results are in out.json", lines[0])
        self.assertNotIn("Traceback", proc.stderr)
        self.load_valid_results("out.json")  # the results are kept, complete
        self.assertFalse((self.tmp / "out-plots").exists())

    def test_plots_with_the_interpreter_named(self):
        if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                          capture_output=True).returncode != 0:
            self.skipTest("/usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)")
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out 'q'.json", "--quiet", "--plot",
                              env={"PARALAB_PYTHON": self.fake_python(True)})
        self.assert_ran(proc)
        plots = self.tmp / "out 'q'-plots"
        self.assertTrue(any(p.suffix == ".png" for p in plots.iterdir()), self.files())


class SetOverrides(BenchRunnerCase):
    needs_data = True

    def test_overrides_reach_the_run_and_the_resolved_descriptor(self):
        doc = self.run_tiny("--set", "training.epochs=2", "--set", "runs.0.label=abc",
                            "--set", "runs.0.training.batch_size=32",  # creates runs[0].training
                            "--set", "description=bare-word")  # not JSON: taken as a string
        run = doc["runs"][0]
        self.assertEqual(run["label"], "abc")
        self.assertEqual((run["config"]["epochs"], run["config"]["global_batch"]), (2, 32))
        self.assertEqual([e["epoch"] for e in run["epochs"]], [1, 2])
        self.assertEqual([e["samples"] for e in run["epochs"]], [ITERS * 32] * 2)
        resolved = doc["descriptor"]
        self.assertEqual(resolved["training"]["epochs"], 2)
        self.assertEqual(resolved["training"]["batch_size"], BATCH)
        self.assertEqual(resolved["runs"][0],
                         {"strategy": "single", "label": "abc",
                          "training": {"batch_size": 32}})
        self.assertEqual(resolved["description"], "bare-word")


class Output(BenchRunnerCase):
    needs_data = True

    def test_quiet_prints_nothing(self):
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out.json", "--quiet")
        self.assert_ran(proc)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr, "")

    def test_pipe_gets_the_summary_but_no_progress(self):
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out.json")  # stdout is a pipe, not a terminal
        self.assert_ran(proc)
        self.assertEqual(proc.stderr, "")
        out = proc.stdout
        for progress in ("\r", "\x1b", "data:", "epoch 1/1", "ETA", "[run 1/1]"):
            self.assertNotIn(progress, out)
        lines = [line for line in out.splitlines() if line.strip()]
        self.assertEqual(len(lines), 3, out)
        self.assertEqual(lines[0].split(),
                         ["run", "status", "epochs", "test_acc", "best_acc", "median_ms",
                          "images/s", "speedup"])
        self.assertEqual(lines[1].split()[:4], ["single", "x1", "ok", "1"])
        self.assertEqual(lines[2], "results: out.json")

    def test_a_run_of_warm_up_iterations_only_says_it_has_no_step_time(self):
        # 2 iterations under a warm-up of 5: the run is ok (accuracy) but times nothing; the
        # table says why its step time is "-", and on a terminal a note says so before it runs.
        name = self.write_descriptor(with_training(max_iterations_per_epoch=2, warmup_iterations=5))
        proc = self.run_bench(name, "--out", "out.json")
        self.assert_ran(proc)
        self.assertEqual(proc.stderr, "")
        self.assertIn("\n    no step time: all 2 iterations were warm-up (training.warmup_iterations 5)\n",
                      proc.stdout)
        run = self.load_valid_results("out.json")["runs"][0]
        self.assertEqual((run["status"], run["timing"]["timed_iterations"], run["timing"]["median_iteration_ms"]),
                         ("ok", 0, None))
        master, slave = pty.openpty()
        p = subprocess.Popen([str(BENCH_RUNNER), name, "--out", "tty.json"], cwd=self.tmp,
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
        os.close(slave)
        seen = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        os.close(master)
        self.assertEqual(p.wait(timeout=TIMEOUT_S), 0)
        p.stderr.close()
        self.assertIn("note: run 1 (single x1): all 2 iterations are warm-up (training.warmup_iterations 5): "
                      "it will record accuracy but no step time", seen.decode(errors="replace"))
        # a run with timed iterations gets neither
        proc = self.run_bench(self.write_descriptor(tiny_descriptor(), "timed.json"), "--out", "timed-out.json")
        self.assert_ran(proc)
        self.assertNotIn("no step time", proc.stdout)



class BadInput(BenchRunnerCase):
    """Each mistake: exit 1, one stderr line naming the file or key, no results file."""

    def assert_rejected(self, args, mentions, doc=None, schema_rejects=True):
        """schema_rejects: True/False when the mistake is in `doc`, None when it is elsewhere."""
        if doc is not None:
            args = [self.write_descriptor(doc), *args]
            if isinstance(doc, dict) and schema_rejects is not None:
                # The schema must refuse what bench_runner refuses in the file itself.
                schema_errors = validate(DESCRIPTOR_SCHEMA, doc)
                if schema_rejects:
                    self.assertNotEqual(schema_errors, [], "descriptor schema accepts it")
                else:
                    self.assertEqual(schema_errors, [], "descriptor schema should accept it")
        before = self.files()
        for out in ([], ["--out", "out.json"]):
            with self.subTest(out=out):
                proc = self.run_bench(*args, *out)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertEqual(proc.stdout, "")
                lines = proc.stderr.splitlines()
                self.assertEqual(len(lines), 1, proc.stderr)
                self.assertTrue(lines[0].startswith("bench_runner: "), lines[0])
                for text in mentions:
                    self.assertIn(text, lines[0])
                self.assertEqual(self.files(), before, "a results or temporary file was created")
        return lines[0]

    def test_empty_paths(self):
        # `--out ""` wrote to results/<name>-<time>.json, `--resume ""` resumed nothing.
        name = self.write_descriptor(tiny_descriptor())
        before = self.files()
        for option in ("--out", "--resume", "--data-dir"):
            with self.subTest(option=option):
                proc = self.run_bench(name, option, "")
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertEqual(proc.stderr, f"bench_runner: {option}: an empty path (see --help)\n")
                self.assertEqual(self.files(), before)

    def test_missing_descriptor(self):
        self.assert_rejected(["missing.json"], ["missing.json", "cannot open"])

    def test_not_json(self):
        self.assert_rejected([], ["descriptor.json: not valid JSON"], doc='{"name": "x",')

    def test_top_level_not_an_object(self):
        self.assert_rejected([], ["descriptor.json: (top level): must be an object"], doc="[1, 2]")

    def test_unknown_top_level_key(self):
        self.assert_rejected([], ["descriptor.json: foo: unknown key"],
                             doc=tiny_descriptor(foo=1))

    def test_unknown_training_key(self):
        self.assert_rejected([], ["descriptor.json: training.xyz: unknown key"],
                             doc=with_training(xyz=1))

    def test_wrong_type(self):
        self.assert_rejected([], ["training.batch_size: must be an integer, got a string"],
                             doc=with_training(batch_size="big"))

    def test_integer_written_as_float(self):
        # JSON Schema counts 2.0 as an integer, descriptor.cpp does not: the schema says so.
        self.assert_rejected([], ["training.epochs: must be an integer"],
                             doc=with_training(epochs=2.0), schema_rejects=False)

    def test_batch_size_zero(self):
        self.assert_rejected([], ["training.batch_size: must be >= 1"],
                             doc=with_training(batch_size=0))

    def test_lr_zero(self):
        self.assert_rejected([], ["training.lr: must be > 0"], doc=with_training(lr=0))

    def test_lr_negative(self):
        self.assert_rejected([], ["training.lr: must be > 0"], doc=with_training(lr=-1))

    def test_epochs_zero(self):
        self.assert_rejected([], ["training.epochs: must be >= 1"], doc=with_training(epochs=0))

    def test_counts_too_large(self):
        # Near INT64_MAX they overflowed the counts derived from them (the iterations of an
        # epoch, the evaluation's batches, a weak-scaling global batch) and ran as `ok` with
        # nothing trained or evaluated.
        for key, most in (("batch_size", 16777216), ("eval_batch_size", 16777216),
                          ("epochs", 1000000)):
            with self.subTest(key=key):
                self.assert_rejected([], [f"training.{key}: must be <= {most}, got {most + 1}"],
                                     doc=with_training(**{key: most + 1}))
        self.assert_rejected(["--set", "training.batch_size=9223372036854775807"],
                             ["training.batch_size: must be <= 16777216"], doc=tiny_descriptor(),
                             schema_rejects=None)

    def test_threads_too_many(self):
        self.assert_rejected([], ["training.threads_per_device: must be <= 1024"],
                             doc=with_training(threads_per_device=1025))

    def test_bad_name(self):
        self.assert_rejected([], ["descriptor.json: name:"], doc=tiny_descriptor(name="a/b"))
        self.assertNotEqual(validate(DESCRIPTOR_SCHEMA, tiny_descriptor(name="ab\n")), [])

    def test_run_training_override_checked(self):
        doc = tiny_descriptor(runs=[{"strategy": "single", "training": {"epochs": "x"}}])
        self.assert_rejected([], ["runs.0.training.epochs: must be an integer"], doc=doc)

    def test_unknown_option_for_single(self):
        doc = tiny_descriptor(runs=[{"strategy": "single", "ring": True}])
        self.assert_rejected([], ["runs.0.ring: unknown option"], doc=doc)

    def test_unknown_strategy(self):
        doc = tiny_descriptor(runs=[{"strategy": "nope"}])
        # Strategy names are a registry, not a schema enum.
        self.assert_rejected([], ["runs.0.strategy", "'nope'", "single"], doc=doc,
                             schema_rejects=False)

    def test_unknown_backend(self):
        self.assert_rejected([], ["backend", "'gpu'", "cpu"], doc=tiny_descriptor(backend="gpu"),
                             schema_rejects=False)

    def test_unknown_model(self):
        # Model names are a registry, not a schema enum; the error lists the known ones.
        self.assert_rejected([], ["descriptor.json: model: unknown model 'resnet'", "lenet",
                                  "alexnet"], doc=tiny_descriptor(model="resnet"),
                             schema_rejects=False)
        self.assert_rejected(["--set", "model=vgg"], ["model: unknown model 'vgg'", "alexnet"],
                             doc=tiny_descriptor(), schema_rejects=None)

    def test_bad_layer_list(self):
        doc = tiny_descriptor(model={"layers": [{"op": "linear"}], "input": [1, 28, 28]})
        self.assert_rejected([], ["descriptor.json: model: layer linear1 (linear) on input "
                                  "(1,28,28): out must be >= 1"], doc=doc, schema_rejects=False)
        doc = tiny_descriptor(model={"name": "alexnet", "input_size": 8})
        line = self.assert_rejected([], ["descriptor.json: model: "], doc=doc,
                                    schema_rejects=False)
        self.assertNotIn("model: model", line)

    def test_layer_lists_that_ran_wrong_are_refused(self):
        # Each was taken: 1 or 5 outputs (the loss read and wrote past the logits: a double
        # free, or a run 'ok' with a garbage loss), a kernel of 2^32 + 5 (run as 5), an input
        # shape other than the images' (reshaped silently, or failed at run time), a pool whose
        # padding passes half its window (failed at run time), op and name not strings (the JSON
        # library's message, naming no key).
        linear10 = {"op": "linear", "out": 10}
        for model, said in (
                ({"layers": [{"op": "linear", "out": 1}]},
                 "model: the last layer has 1 outputs; it needs 10, one per class"),
                ({"layers": [{"op": "linear", "out": 5}]}, "model: the last layer has 5 outputs"),
                ({"layers": [{"op": "conv", "out": 4, "kernel": 4294967301}, linear10]},
                 "model.layers.0: kernel: 4294967301 is out of range"),
                ({"layers": [{"op": "conv", "out": 4, "kernel": 3,
                              "stride": 18446744073709551615}, linear10]},
                 "model.layers.0: stride: 18446744073709551615 is out of range"),
                ({"layers": [linear10], "input": [4, 14, 14]},
                 "model.input: must be [1, 28, 28]"),
                ({"layers": [linear10], "input": [1, 28.7, 28]}, "model.input: must be [1, 28, 28]"),
                ({"layers": [{"op": "pool", "kernel": 2, "padding": 5}, linear10]},
                 "model: layer pool1 (pool) on input (1,28,28): padding 5 is more than half the window 2"),
                ({"layers": [{"op": 5}]}, "model.layers.0: op: must be a string"),
                ({"name": 5, "layers": [linear10]}, "model.name: must be a string")):
            with self.subTest(model=model):
                self.assert_rejected([], ["descriptor.json: " + said],
                                     doc=tiny_descriptor(model=model), schema_rejects=None)

    def test_runs_empty(self):
        self.assert_rejected([], ["descriptor.json: runs: must hold at least one run"],
                             doc=tiny_descriptor(runs=[]))

    def test_runs_missing(self):
        doc = tiny_descriptor()
        del doc["runs"]
        self.assert_rejected([], ["descriptor.json: runs: missing"], doc=doc)

    def test_set_bad_index(self):
        self.assert_rejected(["--set", "runs.5.devices=1"],
                             ["--set runs.5.devices", "index 5 out of range"],
                             doc=tiny_descriptor(), schema_rejects=None)

    def test_set_without_equals(self):
        self.assert_rejected(["--set", "training.epochs"],
                             ["--set training.epochs", "key.path=value"],
                             doc=tiny_descriptor(), schema_rejects=None)

    def test_set_value_checked_like_the_file(self):
        self.assert_rejected(["--set", "training.lr=-1"], ["training.lr: must be > 0"],
                             doc=tiny_descriptor(), schema_rejects=None)

    def test_missing_dataset_dir(self):
        self.assert_rejected(["--data-dir", "/nonexistent"], ["/nonexistent", "no such directory"],
                             doc=tiny_descriptor(), schema_rejects=None)

    def test_corrupt_dataset(self):
        data = self.tmp / "corrupt"
        data.mkdir()
        pixels = bytes(28 * 28)
        idx_gz(data / "train-images-idx3-ubyte.gz", 0x00000802, (1, 28, 28), pixels)  # bad magic
        idx_gz(data / "train-labels-idx1-ubyte.gz", 0x00000801, (1,), b"\x00")
        idx_gz(data / "t10k-images-idx3-ubyte.gz", 0x00000803, (1, 28, 28), pixels)
        idx_gz(data / "t10k-labels-idx1-ubyte.gz", 0x00000801, (1,), b"\x00")
        self.assert_rejected(["--data-dir", str(data)],
                             [str(data / "train-images-idx3-ubyte.gz") + ": wrong magic number"],
                             doc=tiny_descriptor(), schema_rejects=None)


class Divergence(BenchRunnerCase):
    needs_data = True

    def assert_diverged(self, run):
        self.assertEqual(run["status"], "diverged")
        match = re.fullmatch(r"loss became (NaN|Inf) at epoch (\d+), iteration (\d+)",
                             run["reason"] or "")
        self.assertIsNotNone(match, run["reason"])
        at = run["diverged_at"]
        self.assertEqual((at["epoch"], at["iteration"]), (int(match[2]), int(match[3])))
        # The diverged step is not recorded; everything before it is.
        self.assertEqual(len(run["epochs"]), at["epoch"] - 1)
        self.assertEqual(len(run["warmup"]) + len(run["iterations"]),
                         (at["epoch"] - 1) * ITERS + at["iteration"] - 1)

    def test_huge_lr_diverges_and_the_next_run_still_runs(self):
        doc = tiny_descriptor(runs=[{"strategy": "single", "label": "huge"},
                                    {"strategy": "single", "label": "normal"}])
        results = self.run_tiny("--set", f"runs.0.training.lr={HUGE_LR}", doc=doc)
        huge, normal = results["runs"]
        self.assertEqual((huge["label"], huge["config"]["lr"]), ("huge", HUGE_LR))
        self.assert_diverged(huge)
        self.assertEqual((normal["label"], normal["status"], normal["reason"]),
                         ("normal", "ok", None))
        self.assertEqual(normal["config"]["lr"], 0.1)
        self.assertEqual(len(normal["epochs"]), 1)

    def test_huge_lr_from_the_command_line(self):
        results = self.run_tiny("--set", f"training.lr={HUGE_LR}", "--set", "training.epochs=2")
        self.assert_diverged(results["runs"][0])


class SpeedupBaseline(BenchRunnerCase):
    needs_data = True

    def test_baseline_trains_the_same_batch(self):
        # The nearest single run before data_parallel trains another batch: not its baseline.
        doc = tiny_descriptor(runs=[
            {"strategy": "single", "label": "single b16", "training": {"batch_size": 16}},
            {"strategy": "single", "label": "single b32", "training": {"batch_size": 32}},
            {"strategy": "data_parallel", "devices": 2, "training": {"batch_size": 16}},
            {"strategy": "single", "label": "single b32 weak",
             "training": {"batch_size": 32}},
            {"strategy": "data_parallel", "devices": 2, "label": "weak", "batch_scaling": "weak",
             "training": {"batch_size": 16}}])
        runs = self.run_tiny(doc=doc)["runs"]
        self.assertEqual(runs[2]["scaling"]["baseline"], "single b16")
        # Weak scaling: 16 per device; no single run trained 16 under weak scaling.
        self.assertIsNone(runs[4]["scaling"]["baseline"])


class ModelParallelRuns(BenchRunnerCase):
    needs_data = True

    def test_layer_and_channel_split_results_are_valid_and_complete(self):
        doc = tiny_descriptor(runs=[
            {"strategy": "single"},
            {"strategy": "layer_split", "devices": 2, "microbatches": 4},
            {"strategy": "channel_split", "devices": 2, "pairing": "megatron"}])
        results = self.run_tiny(doc=doc)
        single, layer, channel = results["runs"]
        for run in (layer, channel):
            self.assertEqual(run["status"], "ok", run["reason"])
            self.assertEqual(run["scaling"]["baseline"], "single x1")
            for it in run["iterations"]:
                self.assertEqual(it["detail"]["bytes_sent"], it["detail"]["bytes_expected"])
        self.assertEqual(layer["label"], "layer_split m4 x2")
        report = layer["strategy_report"]
        self.assertEqual(report["split_source"], "auto")
        self.assertEqual(len(report["profiled_layer_ms"]), 4)
        self.assertEqual(len(report["last_iteration_timeline"]), 2 * 2 * 4)
        self.assertAlmostEqual(report["ideal_bubble_fraction"], 1 / 5)
        self.assertGreater(layer["timing"]["detail"]["bubble_fraction"], 0)
        self.assertEqual(channel["strategy_report"]["output_channels"]["fc2"], [5, 5])
        # Same data, same initial weights: the same model after the same steps.
        self.assertAlmostEqual(layer["epochs"][0]["train_loss"], single["epochs"][0]["train_loss"],
                               places=4)
        self.assertAlmostEqual(channel["epochs"][0]["test_acc"], single["epochs"][0]["test_acc"],
                               places=2)


class NcclRun(BenchRunnerCase):
    needs_data = True

    def test_nccl_without_cuda_devices_is_skipped_with_the_reason(self):
        doc = tiny_descriptor(backend="cpu", runs=[
            {"strategy": "data_parallel", "devices": 2, "allreduce": "nccl"},
            {"strategy": "single"},
            {"strategy": "data_parallel", "devices": 2}])
        nccl, single, ring = self.run_tiny(doc=doc)["runs"]
        self.assertEqual(ring["strategy_report"],
                         {"cuda_graphs": "not used: cpu:0 cannot capture work (CUDA only)"})
        self.assertEqual(nccl["status"], "skipped")
        self.assertEqual(nccl["reason"], "nccl: needs CUDA devices, and cpu:0 is not one")
        self.assertEqual(nccl["iterations"], [])
        self.assertEqual(single["status"], "ok", "the next run still runs")


class DeviceListRun(BenchRunnerCase):
    needs_data = True

    def test_a_device_list_is_a_cuda_run_skipped_without_a_gpu(self):
        doc = tiny_descriptor(runs=[{"strategy": "data_parallel", "devices": "cuda:0*2"},
                                    {"strategy": "single"}])
        errors = validate(DESCRIPTOR_SCHEMA, doc)
        self.assertEqual(errors, [], "the schema must accept a device list")
        listed, single = self.run_tiny(doc=doc)["runs"]
        self.assertEqual(single["status"], "ok")
        self.assertEqual(listed["config"]["devices"], 2)
        self.assertEqual(listed["config"]["backend"], "cuda")
        if listed["status"] == "skipped":  # no usable GPU here (CI): it says why
            self.assertTrue(listed["reason"].startswith("cuda: "), listed["reason"])
        else:
            self.assertEqual(listed["status"], "ok", listed["reason"])
            self.assertEqual([d["gpu"] for d in listed["config"]["device_list"]], [0, 0])


class FailedRun(BenchRunnerCase):
    needs_data = True

    def test_failed_run_is_recorded_and_exits_3(self):
        # A run that fails inside (a library's error: injected here) is recorded as failed
        # with the reason, and the next run still runs.
        name = self.write_descriptor(tiny_descriptor(
            runs=[{"strategy": "single", "label": "first"}, {"strategy": "single"}]))
        proc = self.run_bench(name, "--out", "out.json", "--quiet",
                              env={"PARALAB_TEST_RUN_FAULT": "first"})
        self.assert_ran(proc, rc=3)
        self.assertEqual((proc.stdout, proc.stderr), ("", ""))
        run, after = self.load_valid_results("out.json")["runs"]
        self.assertEqual(run["status"], "failed")
        self.assertEqual(run["reason"], "PARALAB_TEST_RUN_FAULT: a fault injected into run 'first'")
        self.assertNotIn("wall_seconds", run)
        self.assertEqual((run["epochs"], run["iterations"], run["warmup"]), ([], [], []))
        self.assertEqual(after["status"], "ok")

    def test_what_a_strategy_cannot_run_is_refused_before_the_first_run(self):
        # Each of these failed its run only once it started, after the runs before it had
        # trained; the model, the devices and the data's size say so before any run.
        # 257 examples at batch 256 leave a last minibatch of 1, which 2 devices cannot split.
        first = {"strategy": "single"}
        for run, training, limit, needle in (
                ({"strategy": "data_parallel", "devices": 2}, {"batch_size": 63}, None,
                 "runs.1 (data_parallel x2): data_parallel: global batch 63 is not divisible "
                 "by 2 devices"),
                ({"strategy": "data_parallel", "devices": 2},
                 {"batch_size": 256, "max_iterations_per_epoch": None}, 257,
                 "runs.1 (data_parallel x2): data_parallel: a global batch of 1 cannot be split "
                 "over 2 devices"),
                ({"strategy": "layer_split", "devices": 5}, {}, None,
                 "runs.1 (layer_split x5): layer_split: 5 devices, but lenet has only 4 layers"),
                ({"strategy": "layer_split", "devices": 2, "microbatches": 5}, {}, None,
                 "runs.1 (layer_split m5 x2): layer_split: global batch 64 is not divisible "
                 "into 5 equal micro-batches"),
                ({"strategy": "layer_split", "devices": 2, "split": [1, 2]}, {}, None,
                 "runs.1.split: 2 boundaries make 3 stages, but the run has 2 "
                 "devices"),
                ({"strategy": "channel_split", "devices": 11, "allow_oversubscription": True},
                 {}, None, "runs.1 (channel_split x11): channel_split: 11 devices, but fc2 has "
                 "only 10 output channels to split (at most 10 devices)")):
            with self.subTest(run=run, training=training):
                doc = tiny_descriptor(runs=[first, run])
                doc["training"].update(training)
                if limit:
                    doc["dataset"]["train_limit"] = limit
                BadInput.assert_rejected(self, [], ["bench_runner: descriptor.json: " + needle], doc=doc,
                                         schema_rejects=False)


class Environment(BenchRunnerCase):
    needs_data = True

    def test_records_onednn_isa_no_gpu_and_both_commits(self):
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out.json", "--quiet",
                              env={"ONEDNN_MAX_CPU_ISA": "SSE41"})
        self.assert_ran(proc)
        env = self.load_valid_results("out.json")["environment"]
        self.assertEqual(env["onednn_cpu_isa"], "sse41")
        self.assertIsNone(env["gpu_model"], "a CPU run used no GPU")
        # The switches it ran with are recorded, and nothing else of the environment.
        self.assertEqual(env["variables"].get("ONEDNN_MAX_CPU_ISA"), "SSE41")
        self.assertNotIn("PATH", env["variables"])
        tree = env["git"]["source_tree"]
        self.assertEqual(Path(tree["path"]).resolve(), SOURCE_DIR)
        git = shutil.which("git")
        top = subprocess.run([git, "-C", str(SOURCE_DIR), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True) if git else None
        if not top or top.returncode != 0 or Path(top.stdout.strip()).resolve() != SOURCE_DIR:
            self.assertIsNone(tree["commit"], "the source directory is not its own git checkout")
            return
        head = subprocess.run([git, "-C", str(SOURCE_DIR), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        self.assertEqual(tree["commit"], head)
        # The binary was built from this repository's HEAD, or from an ancestor of it when
        # commits came after the build.
        build = env["git"]["build"]
        self.assertEqual(build["from"], "git")
        ancestor = subprocess.run([git, "-C", str(SOURCE_DIR), "merge-base", "--is-ancestor",
                                   build["commit"], head], capture_output=True)
        self.assertEqual(ancestor.returncode, 0,
                         f"build commit {build['commit']} is not HEAD {head} or an ancestor")


    def test_records_the_setting_variables_it_ran_with(self):
        name = self.write_descriptor(tiny_descriptor())
        proc = self.run_bench(name, "--out", "out.json", "--quiet",
                              env={"PARALAB_STEP_MOVES": "per_rank", "CUDA_DEVICE_MAX_CONNECTIONS": "32",
                                   "NCCL_DEBUG": "x" * 300, "PARALAB_UNRELATED_TO_ANYTHING": "",
                                   "MY_OWN_SETTING": "1", "XCUDA_FAKE": "1"})
        self.assert_ran(proc)
        got = self.load_valid_results("out.json")["environment"]["variables"]
        self.assertEqual(got["PARALAB_STEP_MOVES"], "per_rank")
        self.assertEqual(got["CUDA_DEVICE_MAX_CONNECTIONS"], "32")
        self.assertEqual(got["NCCL_DEBUG"], "x" * 256)
        self.assertEqual(got["PARALAB_UNRELATED_TO_ANYTHING"], "")
        self.assertNotIn("MY_OWN_SETTING", got)
        self.assertNotIn("XCUDA_FAKE", got)
        self.assertEqual(list(got), sorted(got))


class Schemas(unittest.TestCase):
    def test_shipped_descriptors_match_the_schema(self):
        descriptors = [p for p in sorted((SOURCE_DIR / "experiments").glob("*.json"))
                       if not p.name.endswith(".schema.json")]
        self.assertGreater(len(descriptors), 0)
        for path in descriptors:
            with self.subTest(descriptor=path.name):
                self.assertEqual(validate(DESCRIPTOR_SCHEMA, json.loads(path.read_text())), [])

    def test_schema_rejects_a_broken_results_file(self):
        broken = {"schema_version": 3, "environment": {}, "descriptor": {}, "dataset": {},
                  "runs": []}
        paths = {line.split(":")[0] for line in validate(RESULTS_SCHEMA, broken)}
        self.assertTrue({"$.schema_version", "$.environment", "$.descriptor", "$.dataset",
                         "$.runs"} <= paths, paths)


def main():
    global BENCH_RUNNER, SOURCE_DIR, DATA_DIR, RESULTS_SCHEMA, DESCRIPTOR_SCHEMA
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-runner", required=True, help="path to the bench_runner binary")
    parser.add_argument("--source-dir", required=True, help="the repository root")
    args, rest = parser.parse_known_args()
    BENCH_RUNNER = Path(args.bench_runner).resolve()
    SOURCE_DIR = Path(args.source_dir).resolve()
    if not os.access(BENCH_RUNNER, os.X_OK):
        parser.error(f"{BENCH_RUNNER}: not an executable")
    RESULTS_SCHEMA = SOURCE_DIR / "results" / "results.schema.json"
    DESCRIPTOR_SCHEMA = SOURCE_DIR / "experiments" / "descriptor.schema.json"
    DATA_DIR = find_data_dir()
    unittest_parts.main(__name__, rest)


if __name__ == "__main__":
    main()
