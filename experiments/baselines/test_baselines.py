#!/usr/bin/python3
"""Tests for the PyTorch baselines: pytorch_lenet.py's modes and compare_pytorch.py's report.

    /usr/bin/python3 experiments/baselines/test_baselines.py      (about 10 s on 2 idle cores)

What runs where:
  * the trainer's numerics (module == book: loss, gradients, parameters after steps, epochs) need
    torch (Debian: python3-torch) and are skipped, with that reason, without it; they run on the
    CPU, so the CUDA graph's capture and replay are not exercised here, only the step it
    captures (ModuleStep._graph_body, run eagerly);
  * the command-line errors and compare_pytorch.py (driven end to end with a fake bench_runner
    and a fake interpreter that write canned results) need no torch.
The data is a small synthetic Fashion-MNIST-shaped set written to a temporary directory.
"""

import contextlib
import gzip
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pytorch_lenet  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False
NO_TORCH = "torch is not importable (apt-get install python3-torch)"

LENET = os.path.join(HERE, "pytorch_lenet.py")
COMPARE = os.path.join(HERE, "compare_pytorch.py")
NAMES = ("W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4")

# The module and the book differ only in how fp32 sums are ordered (nn.Linear's addmm on a
# transposed weight against matmul + add): a few ulps.  On this CPU they are bit-identical; the
# bound leaves room for other BLAS builds and stays far below any real difference (a wrong
# transpose, a missing 1/n, a stale gradient each move values by >= 1e-3 relative).
ATOL, RTOL = 1e-6, 1e-5


def write_idx(path, magic, array_bytes, dims):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    with gzip.open(path, "wb") as f:
        f.write(header + array_bytes)


def write_dataset(directory, n_train, n_test, seed=7):
    """Fashion-MNIST-shaped IDX .gz files of random pixels and labels."""
    rng = random.Random(seed)
    for (images, labels), n in zip((pytorch_lenet.TRAIN_FILES, pytorch_lenet.TEST_FILES),
                                   (n_train, n_test)):
        pixels = bytes(rng.randrange(256) for _ in range(n * 28 * 28))
        write_idx(os.path.join(directory, images), 0x00000803, pixels, (n, 28, 28))
        write_idx(os.path.join(directory, labels), 0x00000801,
                  bytes(rng.randrange(10) for _ in range(n)), (n,))


def assert_close(test, got, ref, what):
    """|got - ref| <= ATOL + RTOL |ref| elementwise; names the worst element on failure."""
    got, ref = got.detach().double().flatten(), ref.detach().double().flatten()
    test.assertEqual(got.shape, ref.shape, what)
    excess = (got - ref).abs() - (ATOL + RTOL * ref.abs())
    worst = int(excess.argmax())
    test.assertLessEqual(float(excess[worst]), 0.0,
                         f"{what}: element {worst}: {float(got[worst])!r} vs reference "
                         f"{float(ref[worst])!r}")


def module_view(name, tensor):
    """A module parameter in the book's layout (nn.Linear stores W3 and W4 transposed)."""
    return tensor.t() if name in ("W3", "W4") else tensor


def run_cli(*args, python=sys.executable):
    return subprocess.run([python, LENET, *args], capture_output=True, text=True, timeout=120)


class CommandLineTest(unittest.TestCase):
    """pytorch_lenet.py's refusals: one line on stderr, the documented exit status."""

    def check_error(self, args, status, fragment):
        p = run_cli(*args)
        self.assertEqual(p.returncode, status, p.stderr)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertTrue(lines[0].startswith("pytorch_lenet.py: error: "), lines[0])
        self.assertIn(fragment, lines[0])
        self.assertEqual(p.stdout, "")

    def test_cuda_graph_on_cpu(self):
        self.check_error(["--model", "module", "--cuda-graph"], 1,
                         "--cuda-graph needs --device cuda")
        self.check_error(["--model", "module", "--cuda-graph", "--device", "cpu"], 1,
                         "--cuda-graph needs --device cuda")

    def test_cuda_graph_with_the_book(self):
        self.check_error(["--cuda-graph", "--device", "cuda"], 1, "add --model module")

    def test_bad_values(self):
        self.check_error(["--model", "keras"], 2, "--model")
        self.check_error(["--batch-size", "0"], 2, "positive integer")
        self.check_error(["--json", "/nonexistent-dir/x.json"], 2, "does not exist")

    @unittest.skipUnless(HAVE_TORCH, NO_TORCH)  # the data is looked for after torch's import
    def test_missing_data(self):
        err = io.StringIO()
        with tempfile.TemporaryDirectory() as tmp, \
                mock.patch.dict(os.environ, {"FASHION_MNIST_DIR": ""}), \
                mock.patch.object(pytorch_lenet, "DEFAULT_DIRS", ()), \
                contextlib.redirect_stderr(err):
            status = pytorch_lenet.main(["--data-dir", tmp])
        self.assertEqual(status, 1, err.getvalue())
        self.assertEqual(len(err.getvalue().splitlines()), 1, err.getvalue())
        self.assertIn("not found; looked in: " + tmp, err.getvalue())


@unittest.skipUnless(HAVE_TORCH, NO_TORCH)
class ModuleMatchesBookTest(unittest.TestCase):
    """The nn.Module LeNet is the book's LeNet: same start, same loss, gradients and updates."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        g = torch.Generator().manual_seed(3)
        cls.x = torch.rand(300, 1, 28, 28, generator=g)   # (N,1,28,28)
        cls.y = torch.randint(0, 10, (300,), generator=g)  # (N,)
        cls.loss_fn = nn.CrossEntropyLoss(reduction="none")

    def test_initial_parameters(self):
        book = pytorch_lenet.init_params(torch, 5, "cpu")
        module = pytorch_lenet.make_lenet_module(torch, 5, "cpu")
        shapes = [tuple(p.shape) for p in module.parameters()]
        self.assertEqual(shapes, [(20, 1, 3, 3), (20,), (50, 20, 5, 5), (50,), (128, 800), (128,),
                                  (10, 128), (10,)])
        for name, b, m in zip(NAMES, book, module.parameters()):
            self.assertTrue(torch.equal(module_view(name, m), b), name)  # copies: bit-exact

    def test_loss_and_gradients(self):
        book = pytorch_lenet.init_params(torch, 0, "cpu")
        module = pytorch_lenet.make_lenet_module(torch, 0, "cpu")
        x, y = self.x[:64], self.y[:64]
        ref = self.loss_fn(pytorch_lenet.lenet(F, x, book), y).sum()
        ref.backward()
        got = self.loss_fn(module(x), y).sum()
        got.backward()
        assert_close(self, got, ref, "summed loss")
        for name, b, m in zip(NAMES, book, module.parameters()):
            assert_close(self, module_view(name, m.grad), b.grad, f"gradient of {name}")

    def test_the_update_has_the_bits_of_the_per_parameter_expression(self):
        # The multi-tensor update computes p - (lr * g) / n for every parameter, bit for bit.
        module = pytorch_lenet.make_lenet_module(torch, 0, "cpu")
        step = pytorch_lenet.ModuleStep(torch, module, self.loss_fn, self.x, self.y, 0.9, 128)
        g = torch.Generator().manual_seed(4)
        grads = [torch.randn(p.shape, generator=g) for p in step.params]
        # n = 100, not a power of two: (lr * g) / n and g * (lr / n) then differ in their bits.
        want = [p.detach() - 0.9 * d / 100 for p, d in zip(step.params, grads)]
        step._update(tuple(grads), 100, torch.zeros(4, 10), torch.zeros(4, dtype=torch.int64),
                     torch.zeros(()))
        for name, p, w in zip(NAMES, step.params, want):
            self.assertTrue(torch.equal(p.detach(), w), name)

    def test_steps_match_the_book(self):
        """The captured step's body (run eagerly) and the eager partial step against the book's
        sgd: parameters and the device-side loss/accuracy sums after 2 full steps + 1 of 44."""
        lr, bs = 0.9, 128  # a large lr so that the steps move the parameters visibly
        book = pytorch_lenet.init_params(torch, 0, "cpu")
        module = pytorch_lenet.make_lenet_module(torch, 0, "cpu")
        step = pytorch_lenet.ModuleStep(torch, module, self.loss_fn, self.x, self.y, lr, bs)
        order = torch.randperm(300, generator=torch.Generator().manual_seed(1))
        loss_sum, correct = 0.0, 0
        for start in (0, 128, 256):
            idx = order[start:start + bs]
            y_hat = pytorch_lenet.lenet(F, self.x[idx], book)
            l = self.loss_fn(y_hat, self.y[idx])
            l.sum().backward()
            pytorch_lenet.sgd(torch, book, lr, idx.shape[0])
            loss_sum += float(l.sum())
            correct += int((y_hat.argmax(dim=1) == self.y[idx]).sum())
            if idx.shape[0] == bs:
                step.static_idx = idx.clone()
                step._graph_body()
            else:
                step.step(idx)  # no graph captured: eager, as a partial minibatch always is
        self.assertEqual(step.eager_steps, 1)
        moved = max(float((b - b0).abs().max()) for b, b0 in
                    zip(book, pytorch_lenet.book_tensors(torch, 0)))
        self.assertGreater(moved, 1e-3, "the steps did not move the parameters")
        for name, b, m in zip(NAMES, book, module.parameters()):
            assert_close(self, module_view(name, m), b, f"{name} after 3 steps")
        got_loss, got_correct = step.take_epoch_metrics()
        self.assertAlmostEqual(got_loss, loss_sum, delta=ATOL + RTOL * abs(loss_sum))
        self.assertEqual(got_correct, correct)
        self.assertEqual(step.take_epoch_metrics(), (0.0, 0), "the read-back resets the sums")


@unittest.skipUnless(HAVE_TORCH, NO_TORCH)
class TrainerTest(unittest.TestCase):
    """Whole runs, in process: both modes train alike over epochs with a partial minibatch."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.tmp = tempfile.TemporaryDirectory()
        write_dataset(cls.tmp.name, n_train=150, n_test=100)
        cls.common = ["--epochs", "2", "--batch-size", "64", "--lr", "0.9",  # no --threads: its
                      # set_num_interop_threads aborts the process when called twice
                      "--warmup-iterations", "1", "--data-dir", cls.tmp.name, "--quiet"]
        cls.docs = {}
        for model in ("book", "module"):
            args = pytorch_lenet.parse_args(["--model", model] + cls.common)
            cls.docs[model] = pytorch_lenet.run(args)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_epochs_agree(self):
        book, module = self.docs["book"]["epochs"], self.docs["module"]["epochs"]
        self.assertEqual(len(book), 2)
        for b, m in zip(book, module):
            self.assertEqual(m["train_samples"], 150)  # 2 x 64 + the partial 22, kept
            self.assertEqual(m["train_samples"], b["train_samples"])
            for key in ("train_loss", "test_loss"):
                self.assertAlmostEqual(m[key], b[key], delta=ATOL + RTOL * abs(b[key]),
                                       msg=f"epoch {b['epoch']} {key}")
            for key in ("train_acc", "test_acc"):
                self.assertEqual(m[key], b[key], f"epoch {b['epoch']} {key}")

    def test_json_fields(self):
        keys = {"schema_version", "baseline", "argv", "mode", "torch_version",
                "torch_cuda_version", "cudnn_version", "cudnn_benchmark", "tf32", "threads",
                "device", "device_name", "config", "cuda_graph", "timing", "epochs"}
        timing = {"method", "median_iteration_ms", "p10_iteration_ms", "p90_iteration_ms",
                  "samples_per_s", "timed_iterations", "timed_samples", "timed_seconds"}
        for model, name in (("book", "pytorch-book-lenet"), ("module", "pytorch-module-lenet")):
            doc = self.docs[model]
            self.assertEqual(set(doc), keys, model)
            self.assertEqual(set(doc["timing"]), timing, model)
            self.assertEqual(doc["schema_version"], 2)
            self.assertEqual(doc["baseline"], name)
            self.assertEqual(doc["mode"], {"model": model, "cuda_graph": False})
            self.assertIsNone(doc["cuda_graph"])
            self.assertEqual(doc["tf32"], {"matmul": False, "cudnn": False})
            self.assertEqual(doc["device_name"], "cpu")
            self.assertEqual(doc["argv"][:3], ["pytorch_lenet.py", "--model", model])
            # 6 steps, the first one warm-up; 5 timed: 64, 22, 64, 64, 22 samples.
            self.assertEqual(doc["timing"]["timed_iterations"], 5, model)
            self.assertEqual(doc["timing"]["timed_samples"], 236, model)
            self.assertAlmostEqual(doc["timing"]["samples_per_s"],
                                   236 / doc["timing"]["timed_seconds"], msg=model)
            self.assertEqual(doc["config"]["iterations_per_epoch"], 3)

    def test_graphed_bookkeeping_emulated(self):
        """The graphed mode's logic on the CPU, torch.cuda replaced by stand-ins: capture() runs
        the warm-up and the capture eagerly, a replay runs the captured body again.  Checks that
        capture puts the parameters and sums back, that full minibatches replay and partial ones
        run eagerly, and that the run trains as the book does.  Not checked: real capture."""
        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                pass

        class Graph:
            def replay(self):
                raise AssertionError("replayed before capture() finished")

        original_capture = pytorch_lenet.ModuleStep.capture

        def capture(step):
            original_capture(step)
            step.graph.replay = step._graph_body  # what the real graph re-runs

        fakes = {"Stream": Stream, "stream": lambda s: contextlib.nullcontext(),
                 "current_stream": lambda device=None: Stream(),
                 "CUDAGraph": Graph, "graph": lambda g: contextlib.nullcontext(),
                 "synchronize": lambda device=None: None}
        with contextlib.ExitStack() as stack:
            for name, fake in fakes.items():
                stack.enter_context(mock.patch.object(torch.cuda, name, fake))
            stack.enter_context(mock.patch.object(pytorch_lenet.ModuleStep, "capture", capture))
            args = pytorch_lenet.parse_args(["--model", "module"] + self.common)
            args.cuda_graph = True  # parse_args refuses it on cpu
            doc = pytorch_lenet.run(args)
        self.assertEqual(doc["baseline"], "pytorch-module-lenet-cuda-graph")
        graph = doc["cuda_graph"]
        self.assertTrue(graph["captured"])
        self.assertEqual((graph["replays"], graph["eager_steps"]), (4, 2))  # per epoch 2 + 1
        for b, m in zip(self.docs["book"]["epochs"], doc["epochs"]):
            for key in ("train_loss", "test_loss"):
                self.assertAlmostEqual(m[key], b[key], delta=ATOL + RTOL * abs(b[key]),
                                       msg=f"epoch {b['epoch']} {key}")
            for key in ("train_acc", "test_acc"):
                self.assertEqual(m[key], b[key], f"epoch {b['epoch']} {key}")

    def test_cli_writes_the_json(self):
        with tempfile.TemporaryDirectory() as out:
            path = os.path.join(out, "r.json")
            p = run_cli("--model", "module", "--epochs", "1", "--max-iterations-per-epoch", "1",
                        "--warmup-iterations", "0", "--threads", "1", "--data-dir", self.tmp.name,
                        "--json", path, python="/usr/bin/python3")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout, "")
            with open(path) as f:
                doc = json.load(f)
            self.assertEqual(doc["baseline"], "pytorch-module-lenet")
            self.assertEqual(doc["timing"]["timed_iterations"], 1)
            self.assertEqual(os.listdir(out), ["r.json"], "no temporary file left behind")


FAKE_BENCH_RUNNER = r'''#!/usr/bin/python3
import json, os, sys
argv = sys.argv[1:]
out = argv[argv.index("--out") + 1]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["paralab"] + argv) + "\n")
json.dump({"environment": {"fake": True},
           "runs": [{"status": "ok", "reason": None,
                     "timing": {"samples_per_s": float(os.environ["FAKE_PARALAB_SPS"])}}]},
          open(out, "w"))
'''

FAKE_PYTHON = r'''#!/usr/bin/python3
import json, os, sys
argv = sys.argv[1:]
if argv[0] == "-c":
    sys.exit(0)  # the probe: torch (with CUDA) is there
key = "graphed" if "--cuda-graph" in argv else "book"
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps([key] + argv) + "\n")
sps = float(os.environ["FAKE_GRAPHED_SPS" if key == "graphed" else "FAKE_BOOK_SPS"])
json.dump({"baseline": "fake-" + key, "torch_version": "0.fake", "torch_cuda_version": "12.fake",
           "cudnn_version": 90000, "device_name": "Fake GPU",
           "tf32": {"matmul": False, "cudnn": False},
           "cuda_graph": {"captured": True} if key == "graphed" else None,
           "timing": {"samples_per_s": sps, "method": "fake"}},
          open(argv[argv.index("--json") + 1], "w"))
'''


class CompareTest(unittest.TestCase):
    """compare_pytorch.py end to end, its programs replaced by fakes with known throughputs."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.runner = self.script("bench_runner", FAKE_BENCH_RUNNER)
        self.python = self.script("python", FAKE_PYTHON)
        self.log = os.path.join(self.tmp.name, "log")

    def script(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
        return path

    def compare(self, device, paralab, graphed, book, *extra):
        out = os.path.join(self.tmp.name, f"out-{len(os.listdir(self.tmp.name))}.json")
        env = dict(os.environ, FAKE_LOG=self.log, FAKE_PARALAB_SPS=str(paralab),
                   FAKE_GRAPHED_SPS=str(graphed), FAKE_BOOK_SPS=str(book))
        p = subprocess.run([sys.executable, COMPARE, "--device", device, "--bench-runner",
                            self.runner, "--python", self.python, "--out", out, *extra],
                           capture_output=True, text=True, env=env, timeout=60)
        doc = None
        if os.path.exists(out):
            with open(out) as f:
                doc = json.load(f)
        return p, doc, out

    def calls(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def test_cuda_pass(self):
        # ParaLab 1.5M images/s: 40 ms per epoch, 3x the graphed baseline's 500k.
        p, doc, out = self.compare("cuda", 1.5e6, 5e5, 1.5e5, "--repeats", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[-2:], [
            "PASS: ParaLab 3.00x the graphed PyTorch baseline's throughput (goal >= 2.5x)",
            "PASS: ParaLab full epoch 40.0 ms (goal <= 50 ms)"])
        self.assertIn(f"results: {out}", lines)
        self.assertTrue(any("CUDA graph" in l and "120.0" in l and "3.00x" in l for l in lines),
                        p.stdout)
        # Alternation: ParaLab, graphed, book, per repeat; the modes and run lengths passed.
        calls = self.calls()
        self.assertEqual([c[0] for c in calls], ["paralab", "graphed", "book"] * 2)
        self.assertIn("backend=cuda", calls[0])
        self.assertIn("kernels=cudnn", calls[0])  # the default; --kernels fused passes fused
        self.assertFalse([a for a in calls[0] if "steps_per_launch" in a])  # 1: the default
        self.assertIn("training.max_iterations_per_epoch=230", calls[0])
        graphed, book = calls[1], calls[2]
        for flag in ("--model", "module", "--cuda-graph"):
            self.assertIn(flag, graphed)
        self.assertEqual(book[book.index("--model") + 1], "book")
        self.assertNotIn("--cuda-graph", book)
        for call in (graphed, book):
            self.assertEqual(call[call.index("--device") + 1], "cuda")
            self.assertEqual(call[call.index("--max-iterations-per-epoch") + 1], "230")
        # The JSON: the fields it always had, then the new ones.
        for key in ("benchmark", "command", "environment", "config", "goal_ratio", "rows",
                    "goal_met", "goals"):
            self.assertIn(key, doc)
        row = doc["rows"][0]
        self.assertEqual(row["threads"], 1)
        self.assertEqual(row["paralab_samples_per_s"], [1.5e6, 1.5e6])
        self.assertEqual(row["pytorch_samples_per_s"], [1.5e5, 1.5e5])  # the book's trainer
        self.assertEqual(row["graphed_samples_per_s"], [5e5, 5e5])
        self.assertAlmostEqual(row["ratio"], 10.0)
        self.assertAlmostEqual(row["ratio_vs_graphed"], 3.0)
        self.assertEqual({k: round(v, 6) for k, v in row["epoch_ms"].items()},
                         {"paralab": 40.0, "graphed": 120.0, "book": 400.0})
        self.assertEqual(doc["goal_ratio"], 2.5)
        self.assertTrue(doc["goal_met"])
        self.assertEqual([g["name"] for g in doc["goals"]],
                         ["throughput_vs_graphed", "paralab_epoch_ms"])
        self.assertEqual(doc["config"]["order"], ["paralab", "graphed", "book"])
        self.assertEqual(doc["config"]["iterations"], 225)
        self.assertEqual(doc["environment"]["torch_device_name"], "Fake GPU")
        self.assertEqual(doc["config"]["baselines"]["graphed"]["cuda_graph"], {"captured": True})

    def test_cuda_fail(self):
        # The figures measured on an H200: ParaLab 164 ms per epoch, the graphed step 145 ms.
        p, doc, _ = self.compare("cuda", 60000 / 0.164, 60000 / 0.145, 60000 / 0.42,
                                 "--repeats", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines()[-2:], [
            "FAIL: ParaLab 0.88x the graphed PyTorch baseline's throughput (goal >= 2.5x)",
            "FAIL: ParaLab full epoch 164.0 ms (goal <= 50 ms)"])
        self.assertFalse(doc["goal_met"])
        self.assertEqual([g["met"] for g in doc["goals"]], [False, False])

    def test_cpu(self):
        p, doc, _ = self.compare("cpu", 5000, 1, 2000, "--threads", "1", "2", "--repeats", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([c[0] for c in self.calls()], ["paralab", "book"] * 2)
        self.assertEqual(p.stdout.splitlines()[-1],
                         "PASS: ParaLab / the book's PyTorch trainer at threads 1: 2.50x, "
                         "2: 2.50x (goal >= 2x at each)")
        self.assertEqual([r["threads"] for r in doc["rows"]], [1, 2])
        self.assertNotIn("graphed_median", doc["rows"][0])
        self.assertEqual(doc["goal_ratio"], 2.0)
        self.assertEqual(doc["config"]["iterations"], 60)
        self.assertTrue(doc["goal_met"])

    def test_never_overwrites_and_reports_failed_runs(self):
        p, _, out = self.compare("cpu", 5000, 1, 2000, "--threads", "1", "--repeats", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([sys.executable, COMPARE, "--bench-runner", self.runner, "--python",
                            self.python, "--out", out], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("exists (results are never overwritten)", p.stderr)
        # A program that fails: the others are still measured, the failure is listed, the goal
        # it needed FAILs naming it, the file is written, the exit status is 1.
        p, doc, _ = self.compare("cpu", "not-a-number", 1, 2000, "--threads", "1")
        self.assertEqual(p.returncode, 1)
        self.assertEqual([c[0] for c in self.calls()][-2:], ["paralab", "book"])
        self.assertEqual([(f["program"], f["threads"], f["repeat"]) for f in doc["failures"]],
                         [("paralab", 1, r) for r in (1, 2, 3)])
        self.assertIsNone(doc["rows"][0]["paralab_median"])
        self.assertEqual(doc["rows"][0]["pytorch_median"], 2000)
        self.assertFalse(doc["goal_met"])
        last = p.stdout.splitlines()[-1]
        self.assertTrue(last.startswith("FAIL: ParaLab / the book's PyTorch trainer at threads 1: "
                                        "not measured (paralab failed: "), last)
        self.assertIn("compare_pytorch.py: 3 run(s) failed (all in ", p.stderr)
        self.assertIn("the first, paralab at threads 1, repeat 1: bench_runner exited 1: "
                      "ValueError: could not convert", p.stderr)

    def test_a_failed_baseline_keeps_the_other_figures(self):
        # On cuda, the graphed baseline fails every time: ParaLab and the book's trainer are
        # still measured, the epoch goal is judged, the graphed goal FAILs naming the failure.
        p, doc, _ = self.compare("cuda", 1.5e6, "capture failed", 1.5e5, "--repeats", "2",
                                 "--kernels", "fused", "--steps-per-launch", "8")
        self.assertEqual(p.returncode, 1)
        self.assertEqual([c[0] for c in self.calls()], ["paralab", "graphed", "book"] * 2)
        self.assertIn("kernels=fused", self.calls()[0])
        self.assertIn("runs.0.steps_per_launch=8", self.calls()[0])
        self.assertEqual(doc["config"]["paralab_steps_per_launch"], 8)
        lines = p.stdout.splitlines()
        self.assertTrue(lines[-2].startswith(
            "FAIL: ParaLab against the graphed PyTorch baseline's throughput: not measured "
            "(graphed failed: "), lines[-2])
        self.assertTrue(lines[-2].endswith(" (goal >= 2.5x)"), lines[-2])
        self.assertEqual(lines[-1], "PASS: ParaLab full epoch 40.0 ms (goal <= 50 ms)")
        self.assertTrue(any("CUDA graph" in l and "failed" in l for l in lines), p.stdout)
        row = doc["rows"][0]
        self.assertIsNone(row["graphed_median"])
        self.assertIsNone(row["ratio_vs_graphed"])
        self.assertAlmostEqual(row["ratio"], 10.0)
        self.assertEqual([g["met"] for g in doc["goals"]], [False, True])
        self.assertEqual({f["program"] for f in doc["failures"]}, {"graphed"})
        self.assertIn("threads 1, repeat 1/2: graphed FAILED: ", p.stderr)
        self.assertIn("threads 1, repeat 2/2: book 150000 images/s", p.stderr)

    def test_paths_it_cannot_use_are_refused_before_any_run(self):
        # Each used to fail with a traceback: --out only after every run had been measured.
        file = self.script("a-file", "")
        for bad, said in ((["--out", os.path.join(file, "x.json")], f": {file} is not a directory"),
                          (["--out", "/proc/x.json"], ": cannot write in /proc ("),
                          (["--python", "/nonexistent/python"],
                           "/nonexistent/python: cannot run it (No such file or directory)"),
                          (["--bench-runner", self.tmp.name], ": not built (run scripts/build.sh)")):
            with self.subTest(bad=bad):
                args = {"--bench-runner": self.runner, "--python": self.python,
                        "--out": os.path.join(self.tmp.name, "new", "out.json")}
                args.update(dict(zip(bad[::2], bad[1::2])))
                if os.path.exists(self.log):
                    os.remove(self.log)
                p = subprocess.run([sys.executable, COMPARE, *sum(args.items(), ())],
                                   capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, FAKE_LOG=self.log))
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
                self.assertTrue(p.stderr.startswith("compare_pytorch.py: "), p.stderr)
                self.assertIn(said, p.stderr)
                self.assertFalse(os.path.exists(self.log), "a program ran")
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "new")))

    def test_argument_errors(self):
        for bad in (["--repeats", "0"], ["--iterations", "-3"], ["--goal", "0"],
                    ["--epoch-goal-ms", "nan"], ["--warmup", "x"]):
            p = subprocess.run([sys.executable, COMPARE, *bad], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("compare_pytorch.py: error: argument", p.stderr)
        for bad, said in ((["--steps-per-launch", "65", "--device", "cuda"],
                           "--steps-per-launch is 65: at most 64"),
                          (["--steps-per-launch", "8"], "--steps-per-launch is for --device cuda"),
                          (["--steps-per-launch", "0"], "argument --steps-per-launch")):
            p = subprocess.run([sys.executable, COMPARE, *bad], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, bad)
            self.assertIn("compare_pytorch.py: error: " + said, p.stderr)
        # The timed steps must all be full minibatches of one epoch (234 of 256 images).
        p = subprocess.run([sys.executable, COMPARE, "--iterations", "230", "--warmup", "5"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("compare_pytorch.py: error: --iterations + --warmup is 235: at most 234",
                      p.stderr)


if __name__ == "__main__":
    unittest.main()
