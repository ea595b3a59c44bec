#!/usr/bin/python3
"""Tests for the ParaLab plotting scripts, on small synthetic results files.

    /usr/bin/python3 plotting/test_plotting.py

Needs python3-matplotlib (apt-get install python3-matplotlib). The scripts are run as
subprocesses, the way a user runs them, and their data functions are also checked directly.
"""

import copy
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import paralab_results as pr  # noqa: E402
import plot_accuracy  # noqa: E402
import plot_breakdown  # noqa: E402
import plot_allreduce  # noqa: E402
import plot_speedup  # noqa: E402
import plot_timeline  # noqa: E402

SCRIPTS = ("plot_speedup.py", "plot_breakdown.py", "plot_accuracy.py", "plot_timeline.py",
           "plot_all.py")
PLOT_NAMES = {"plot_speedup.py": ["speedup"], "plot_breakdown.py": ["breakdown"],
              "plot_accuracy.py": ["accuracy"], "plot_timeline.py": ["timeline"],
              "plot_all.py": ["speedup", "breakdown", "accuracy", "timeline"]}

# Baseline throughputs: the 1-device runs of each batch scaling.
STRONG_BASE_SPS = 1000.0
WEAK_BASE_SPS = 800.0


def make_run(strategy, devices, scaling, sps, allreduce=None, status="ok", per_device=None,
             oversubscribed=False, options=None, with_scaling=True, epochs=2, label=None):
    """One run in the results format (with the data-parallel additions)."""
    global_batch = 256 if scaling == "strong" else 64 * devices
    if options is None:
        options = {} if strategy == "single" else {
            "allreduce": allreduce, "grouping": "bucketed", "bucket_bytes": 1 << 20,
            "overlap": False, "chunk_bytes": 65536, "uneven_shards": False}
    run = {
        "label": label or f"{strategy}{'/' + allreduce if allreduce else ''} x{devices} {scaling}",
        "status": status,
        "reason": None if status == "ok" else f"synthetic {status} run",
        "config": {"strategy": strategy, "backend": "cpu", "devices": devices,
                   "global_batch": global_batch, "per_device_batch": global_batch // devices,
                   "batch_scaling": scaling, "lr_scaling": "none", "lr": 0.1, "seed": 0,
                   "epochs": epochs, "max_iterations_per_epoch": 4, "warmup_iterations": 1,
                   "threads_per_device": 1, "eval_batch_size": 1000, "train_examples": 1024,
                   "test_examples": 500, "options": options, "oversubscribed": oversubscribed},
        "timing": {"timed_iterations": 0, "warmup_iterations": 0, "median_iteration_ms": None,
                   "p10_iteration_ms": None, "p90_iteration_ms": None, "mean_iteration_ms": None,
                   "samples_per_s": None},
        "iterations": [], "warmup": [], "epochs": [],
    }
    if status in ("failed", "skipped"):
        del run["config"]["options"]
        return run
    run["wall_seconds"] = 1.0
    run["timing"].update({"timed_iterations": 2, "warmup_iterations": 1,
                          "median_iteration_ms": global_batch / sps * 1000,
                          "mean_iteration_ms": global_batch / sps * 1000, "samples_per_s": sps})
    # compute = forward + backward = 12 (mean), optimizer 1, idle (timer overhead) 0.5.
    run["iterations"] = [
        {"epoch": 1, "iteration": 2, "samples": global_batch, "forward_ms": 4.0,
         "backward_ms": 6.0, "communication_ms": 0.0, "optimizer_ms": 1.0, "total_ms": 11.5},
        {"epoch": 1, "iteration": 3, "samples": global_batch, "forward_ms": 6.0,
         "backward_ms": 8.0, "communication_ms": 0.0, "optimizer_ms": 1.0, "total_ms": 15.5}]
    if per_device is not None:
        run["timing"]["per_device"] = per_device
    base = STRONG_BASE_SPS if scaling == "strong" else WEAK_BASE_SPS
    if with_scaling:
        run["scaling"] = {"baseline": f"single x1 {scaling}", "speedup": sps / base,
                          "efficiency": sps / base / devices}
    run["epochs"] = [{"epoch": e, "iterations": 4, "samples": 1024, "train_loss": 2.0 / e,
                      "train_acc": 0.3 * e, "test_loss": 2.1 / e, "test_acc": 0.25 + 0.2 * e,
                      "seconds": 0.5, "eval_seconds": 0.1} for e in range(1, epochs + 1)]
    return run


def device(compute, exposed, optimizer, idle, total, communication=None, with_idle=True):
    d = {"compute_ms": compute, "communication_ms": exposed if communication is None
         else communication, "exposed_communication_ms": exposed, "optimizer_ms": optimizer,
         "idle_ms": idle, "total_ms": total, "bytes_sent": 1000}
    if not with_idle:
        del d["idle_ms"]
    return d


def make_results():
    """single x1 + data_parallel ring/naive/tree at 2 and 4 devices, strong and weak; some with
    per-device timing, one skipped, one failed, one oversubscribed."""
    runs = [make_run("single", 1, "strong", STRONG_BASE_SPS),
            make_run("single", 1, "weak", WEAK_BASE_SPS)]
    speeds = {  # (allreduce, devices, scaling) -> samples_per_s
        ("ring", 2, "strong"): 1800.0, ("ring", 4, "strong"): 3000.0,
        ("naive", 2, "strong"): 1500.0, ("naive", 4, "strong"): 2000.0,
        ("tree", 2, "strong"): 1700.0, ("tree", 4, "strong"): 2600.0,
        ("ring", 2, "weak"): 1520.0, ("ring", 4, "weak"): 2400.0,
        ("naive", 2, "weak"): 1200.0, ("naive", 4, "weak"): 1600.0,
        ("tree", 2, "weak"): 1440.0, ("tree", 4, "weak"): 2000.0,
    }
    per_device = {
        # mean compute 9, exposed 2, optimizer 1, idle 1.5; slowest total 13.6.
        ("ring", 2, "strong"): [device(10.0, 2.0, 1.0, 0.5, 13.5, communication=3.0),
                                device(8.0, 2.0, 1.0, 2.5, 13.6, communication=3.0)],
        # idle_ms absent: derived as total - compute - exposed - optimizer = 1 and 3.
        ("naive", 2, "strong"): [device(6.0, 4.0, 1.0, None, 12.0, with_idle=False),
                                 device(5.0, 3.0, 1.0, None, 12.0, with_idle=False)],
    }
    for (allreduce, n, scaling), sps in speeds.items():
        runs.append(make_run("data_parallel", n, scaling, sps, allreduce=allreduce,
                             per_device=per_device.get((allreduce, n, scaling)),
                             oversubscribed=(allreduce, n, scaling) == ("ring", 4, "weak")))
    runs.append(make_run("data_parallel", 8, "strong", 0, allreduce="ring", status="skipped"))
    runs.append(make_run("data_parallel", 3, "strong", 0, allreduce="naive", status="failed"))
    return {
        "schema_version": 2,
        "environment": {"paralab_version": "0.1.0", "build_type": "Release",
                        "cpu_model": "Synthetic CPU 9000", "cpu_cores": 4, "gpu_model": None,
                        "hostname": "test", "compiler": "gcc 12.2.0",
                        "libraries": {"onednn": "2.6.3", "nlohmann_json": "3.11.2"},
                        "onednn_cpu_isa": "avx2",
                        "git": {"build": {"commit": None, "dirty": None, "from": "unknown"},
                                "source_tree": {"path": "/src", "commit": None, "dirty": None}},
                        "argv": ["bench_runner"],
                        "utc_time": "2026-11-30T02:12:24Z"},
        "descriptor": {"name": "synthetic"},
        "dataset": {"dir": "/nowhere", "train_examples": 1024, "test_examples": 500},
        "runs": runs,
    }


EXPECTED_STRONG = {
    "single": [(1, 1.0)],
    "data_parallel/ring": [(2, 1.8), (4, 3.0)],
    "data_parallel/naive": [(2, 1.5), (4, 2.0)],
    "data_parallel/tree": [(2, 1.7), (4, 2.6)],
}
EXPECTED_WEAK = {
    "single": [(1, 1.0)],
    "data_parallel/ring": [(2, 1.9), (4, 3.0)],
    "data_parallel/naive": [(2, 1.5), (4, 2.0)],
    "data_parallel/tree": [(2, 1.8), (4, 2.5)],
}


def gpipe_timeline(m):
    """GPipe on 2 stages with fixed pass times (stage 0: forward 1 ms, backward 2; stage 1:
    forward 2, backward 4), each pass starting when its input has arrived (transfers take no
    time) and its stage is free. m=1: busy 9 ms of a 9 ms span on 2 stages, bubble 1 - 9/18 =
    1/2. m=4: stage 0 busy 4 + 8, stage 1 8 + 16, span 27 ms: bubble 1 - 36/54 = 1/3."""
    forward, backward = (1.0, 2.0), (2.0, 4.0)
    events, free = [], [0.0, 0.0]
    arrives = {}  # (forward?, stage, micro-batch) -> when its input is there

    def run(s, fwd, mb):
        start = max(free[s], arrives.get((fwd, s, mb), 0.0))
        free[s] = start + (forward if fwd else backward)[s]
        arrives[(fwd, s + 1 if fwd else s - 1, mb)] = free[s]
        events.append({"stage": s, "pass": "forward" if fwd else "backward", "microbatch": mb,
                       "start_ms": start, "end_ms": free[s]})

    for s in (0, 1):
        for mb in range(m):
            run(s, True, mb)
    for s in (1, 0):
        for mb in reversed(range(m)):
            run(s, False, mb)
    return events


def make_layer_split_run(m, sps, schedule="gpipe", label=None):
    """A layer_split run on 2 devices (strong scaling) with its report and timeline (GPipe's
    order whatever the schedule: the plots do not check the order)."""
    run = make_run("layer_split", 2, "strong", sps,
                   options={"microbatches": m, "schedule": schedule, "split": "auto"},
                   label=label or f"layer_split m{m}{' ' + schedule if schedule != 'gpipe' else ''}"
                                  " x2")
    run["timing"]["detail"] = {"bubble_fraction": 0.52 if m == 1 else 0.36,
                               "bytes_sent": 1000.0, "bytes_expected": 1000.0}
    run["strategy_report"] = {
        "split": [2], "split_source": "auto",
        "stages": [{"device": "cpu:0", "layers": ["conv1", "conv2"], "parameters": 2572},
                   {"device": "cpu:1", "layers": ["fc1", "fc2"], "parameters": 51850}],
        "microbatches": m, "schedule": schedule, "ideal_bubble_fraction": 1 / (m + 1),
        "bytes_per_example": 1600, "last_iteration_timeline": gpipe_timeline(m)}
    return run


def make_channel_split_run(pairing, sps):
    run = make_run("channel_split", 2, "strong", sps,
                   options={"pairing": pairing, "allreduce": "ring"},
                   label=f"channel_split/{pairing} x2")
    run["timing"]["detail"] = {"bytes_sent": 1000.0, "bytes_expected": 1000.0}
    run["strategy_report"] = {"pairing": pairing, "bytes_per_example": 1000}
    return run


def make_model_parallel_results():
    """make_results() plus, on 2 devices with strong scaling, layer_split m=1 and m=4 (gpipe),
    m=4 1f1b, and channel_split without and with the megatron pairing."""
    results = make_results()
    results["runs"] += [make_layer_split_run(1, 900.0), make_layer_split_run(4, 1200.0),
                        make_layer_split_run(4, 1250.0, schedule="1f1b"),
                        make_channel_split_run("none", 1600.0),
                        make_channel_split_run("megatron", 1700.0)]
    return results


def make_timeline_results():
    """Only what the timeline needs: single x1 and layer_split m=1 and m=4 on 2 devices."""
    results = make_results()
    results["runs"] = [results["runs"][0], make_layer_split_run(1, 900.0),
                       make_layer_split_run(4, 1200.0)]
    return results


EXPECTED_MODEL_PARALLEL_STRONG = dict(EXPECTED_STRONG, **{
    "layer_split/m=1": [(2, 0.9)], "layer_split/m=4": [(2, 1.2)],
    "layer_split/m=4/1f1b": [(2, 1.25)],
    "channel_split": [(2, 1.6)], "channel_split/megatron": [(2, 1.7)]})


def assert_png(test, path):
    with open(path, "rb") as f:
        data = f.read()
    test.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG")
    test.assertEqual(data[12:16], b"IHDR", f"{path}: no IHDR chunk")
    width, height = struct.unpack(">II", data[16:24])
    test.assertGreater(width, 100, path)
    test.assertGreater(height, 100, path)


def assert_svg(test, path):
    test.assertGreater(os.path.getsize(path), 1000, f"{path}: suspiciously small")
    root = ET.parse(path).getroot()  # raises on anything that is not well-formed XML
    test.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg", path)


def assert_close_series(test, got, expected):
    test.assertEqual(sorted(got), sorted(expected))
    for series, points in expected.items():
        test.assertEqual([d for d, _ in got[series]], [d for d, _ in points], series)
        for (_, s), (_, want) in zip(got[series], points):
            test.assertAlmostEqual(s, want, places=9, msg=series)


class PlotTestCase(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="paralab-plot-test-")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, content):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def run_script(self, script, *args):
        return subprocess.run([sys.executable, os.path.join(HERE, script), *args],
                              capture_output=True, text=True, timeout=120)


class DataTest(unittest.TestCase):
    """The numbers the plots draw."""

    def test_speedup_series_from_scaling_field(self):
        got = plot_speedup.speedup_series(make_results())
        self.assertEqual(sorted(got), ["strong", "weak"])
        assert_close_series(self, got["strong"], EXPECTED_STRONG)
        assert_close_series(self, got["weak"], EXPECTED_WEAK)

    def test_runs_without_a_scaling_field_are_not_plotted(self):
        results = make_results()
        ring4 = next(r for r in results["runs"] if r["label"] == "data_parallel/ring x4 strong")
        ring4.pop("scaling")
        got = plot_speedup.speedup_series(results)["strong"]
        self.assertEqual(got["data_parallel/ring"], [(2, 1.8)])

    def test_speedup_null_means_not_plotted(self):
        results = make_results()
        ring4 = next(r for r in results["runs"] if r["label"] == "data_parallel/ring x4 strong")
        ring4["scaling"]["speedup"] = None
        got = plot_speedup.speedup_series(results)["strong"]
        self.assertEqual(got["data_parallel/ring"], [(2, 1.8)])

    def test_only_ok_runs_and_oversubscribed_flag(self):
        results = make_results()
        naive4 = next(r for r in results["runs"] if r["label"] == "data_parallel/naive x4 weak")
        naive4["status"] = "diverged"
        points = plot_speedup.speedup_points(results)
        all_points = [p for by in points.values() for ps in by.values() for p in ps]
        self.assertNotIn(8, [p.devices for p in all_points])  # skipped
        self.assertNotIn(3, [p.devices for p in all_points])  # failed
        self.assertEqual([p.devices for p in points["weak"]["data_parallel/naive"]], [2])
        hollow = [(p.label) for p in all_points if p.oversubscribed]
        self.assertEqual(hollow, ["data_parallel/ring x4 weak"])

    def test_speedup_figure_draws_oversubscribed_hollow(self):
        fig, why = plot_speedup.make_figure(make_results())
        self.assertIsNone(why)
        self.assertEqual(len(fig.axes), 2)
        weak = fig.axes[1]
        hollow = [line for line in weak.get_lines()
                  if line.get_marker() == "o" and line.get_markerfacecolor() == "white"
                  and list(line.get_xdata()) == [4]]
        self.assertEqual(len(hollow), 1, "one hollow point, at 4 devices")
        notes = [[t.get_text() for t in ax.get_legend().get_texts()
                  if "oversubscribed" in t.get_text()] for ax in fig.axes]
        self.assertEqual([len(n) for n in notes], [0, 1], "legend note only where one is hollow")
        self.assertEqual(list(fig.axes[0].get_xticks()), [1, 2, 4])

    def test_speedup_figure_draws_virtual_devices_as_squares(self):
        results = make_results()
        for run in results["runs"]:
            if run["config"]["devices"] > 1 and run["config"]["batch_scaling"] == "strong":
                run["config"]["placement"] = f"{run['config']['devices']} virtual devices on 1 GPU"
        fig, why = plot_speedup.make_figure(results)
        self.assertIsNone(why)
        strong, weak = fig.axes
        squares = sorted(x for line in strong.get_lines() if line.get_marker() == "s"
                         for x in line.get_xdata())
        self.assertTrue(squares and all(x > 1 for x in squares), squares)
        self.assertFalse([line for line in weak.get_lines() if line.get_marker() == "s"])
        notes = [[t.get_text() for t in ax.get_legend().get_texts()
                  if "virtual devices" in t.get_text()] for ax in fig.axes]
        self.assertEqual([len(n) for n in notes], [1, 0], "legend note only where squares are")

    def test_runs_of_other_batches_or_without_graphs_are_other_series(self):
        # AlexNet's comparison at global batch 32 and 128 drew one line through both (the
        # speedup their mean), and eager GPU runs shared the graphed runs' line.
        runs = []
        for batch in (32, 128):
            for devices in (1, 2):
                run = make_run("single" if devices == 1 else "layer_split", devices, "strong",
                               1000.0 * devices, options=None if devices == 1 else
                               {"microbatches": 4, "schedule": "gpipe", "split": "auto"})
                run["config"]["global_batch"] = batch
                run["config"]["per_device_batch"] = batch // devices
                runs.append(run)
        keys = pr.series_keys(runs)
        self.assertEqual([keys[id(r)] for r in runs],
                         [("strong", "single b32"), ("strong", "layer_split/m=4 b32"),
                          ("strong", "single b128"), ("strong", "layer_split/m=4 b128")])
        self.assertEqual(sorted({k[1] for k in keys.values()}, key=pr.series_order),
                         ["single b32", "single b128", "layer_split/m=4 b32",
                          "layer_split/m=4 b128"])
        points = plot_speedup.speedup_points({"runs": runs})["strong"]
        self.assertEqual(sorted(points), ["layer_split/m=4 b128", "layer_split/m=4 b32",
                                          "single b128", "single b32"])
        bars = plot_breakdown.breakdown_bars({"runs": runs})["strong"]
        self.assertEqual(len(bars), 4)
        # One batch in the file: the names as they were.
        one = [r for r in runs if r["config"]["global_batch"] == 32]
        self.assertEqual([pr.series_keys(one)[id(r)][1] for r in one], ["single", "layer_split/m=4"])
        graphed = make_run("data_parallel", 2, "strong", 1900.0, allreduce="ring")
        eager = copy.deepcopy(graphed)
        eager["config"]["options"]["cuda_graphs"] = False
        graphed["config"]["options"]["cuda_graphs"] = True
        self.assertEqual((pr.series_name(graphed), pr.series_name(eager)),
                         ("data_parallel/ring", "data_parallel/ring eager"))

    def test_every_series_of_a_full_sweep_has_its_own_colour(self):
        names = ["single"] + [f"data_parallel/{a}{o}" for a in ("naive", "ring", "tree")
                              for o in ("", "/per_tensor", "+overlap")] + ["layer_split/m=8",
                                                                          "channel_split"]
        self.assertEqual(len(names), 12)
        self.assertEqual(len(set(pr.series_colors(names).values())), 12)

    def test_series_names(self):
        run = make_run("data_parallel", 2, "strong", 1.0, allreduce="tree")
        self.assertEqual(pr.series_name(run), "data_parallel/tree")
        run["config"]["options"].update(grouping="per_tensor", overlap=True)
        self.assertEqual(pr.series_name(run), "data_parallel/tree/per_tensor+overlap")
        self.assertEqual(pr.series_key(run), ("strong", "data_parallel/tree/per_tensor+overlap"))
        self.assertEqual(pr.series_name(make_run("single", 1, "weak", 1.0)), "single")
        del run["config"]["batch_scaling"]
        self.assertEqual(pr.batch_scaling(run), pr.UNSPECIFIED_SCALING)

    def test_series_names_model_parallel(self):
        def name(strategy, **options):
            return pr.series_name(make_run(strategy, 2, "strong", 1.0, options=options))

        self.assertEqual(name("layer_split", microbatches=8, schedule="gpipe", split="auto"),
                         "layer_split/m=8")
        self.assertEqual(name("layer_split", microbatches=8, schedule="1f1b", split="auto"),
                         "layer_split/m=8/1f1b")
        self.assertEqual(name("layer_split", microbatches=1, schedule="gpipe", split=[1, 3]),
                         "layer_split/m=1/split=1,3")
        self.assertEqual(name("channel_split", pairing="none", allreduce="ring"),
                         "channel_split")
        self.assertEqual(name("channel_split", pairing="megatron", allreduce="ring"),
                         "channel_split/megatron")
        self.assertEqual(name("channel_split", pairing="megatron", allreduce="tree"),
                         "channel_split/megatron/tree")
        # channel_split's allreduce option is not data_parallel's series axis.
        self.assertNotIn("ring", name("channel_split", pairing="none", allreduce="ring"))
        names = ["layer_split/m=16", "data_parallel/ring", "layer_split/m=2", "single",
                 "channel_split", "layer_split/m=2/1f1b"]
        self.assertEqual(sorted(names, key=pr.series_order),
                         ["single", "channel_split", "data_parallel/ring", "layer_split/m=2",
                          "layer_split/m=2/1f1b", "layer_split/m=16"])

    def test_speedup_series_all_strategies(self):
        results = make_model_parallel_results()
        got = plot_speedup.speedup_series(results)
        assert_close_series(self, got["strong"], EXPECTED_MODEL_PARALLEL_STRONG)
        assert_close_series(self, got["weak"], EXPECTED_WEAK)
        fig, why = plot_speedup.make_figure(results)
        self.assertIsNone(why)
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        self.assertEqual(legend, ["ideal", "single", "channel_split", "channel_split/megatron",
                                  "data_parallel/naive", "data_parallel/ring",
                                  "data_parallel/tree", "layer_split/m=1", "layer_split/m=4",
                                  "layer_split/m=4/1f1b"])

    def test_breakdown_of_a_full_sweep_stays_within_a_page_width(self):
        # Many strong-scaling bars beside the weak ones: the panels go one above the other, at
        # one bar width, rather than side by side at twice the width.
        results = make_model_parallel_results()
        for i in range(6):
            results["runs"].append(make_run("data_parallel", 2, "strong", 1900.0, allreduce="ring",
                                            label=f"extra {i}"))
        fig, why = plot_breakdown.make_figure(results)
        self.assertIsNone(why)
        self.assertLessEqual(fig.get_size_inches()[0], 17.0)
        self.assertEqual(len(fig.axes), 2)
        self.assertEqual(fig.axes[0].get_xlim(), fig.axes[1].get_xlim())
        self.assertEqual([ax.get_title() for ax in fig.axes],
                         [pr.scaling_title("strong"), pr.scaling_title("weak")])

    def test_speedup_legend_hides_no_point(self):
        # Ten series on at most 2 devices (a 2-core machine's sweep): a legend inside the panel
        # covered the 1-device point.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        results = make_model_parallel_results()
        results["runs"] = [r for r in results["runs"] if pr.devices(r) is not None and pr.devices(r) <= 2]
        base = {"allreduce": "ring", "grouping": "bucketed", "bucket_bytes": 1 << 20,
                "overlap": False, "chunk_bytes": 65536, "uneven_shards": False}
        for i, extra in enumerate(({"overlap": True}, {"grouping": "per_tensor"})):
            results["runs"].append(make_run("data_parallel", 2, "strong", 1000.0 * (1.95 + 0.03 * i),
                                            options=dict(base, **extra), label=f"variant {i}"))
        self.assertEqual(len(plot_speedup.speedup_points(results)["strong"]), 11)
        fig, why = plot_speedup.make_figure(results)
        self.assertIsNone(why)
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        for ax in fig.axes:
            box = ax.get_legend().get_window_extent(renderer)
            for line in ax.lines:
                if line.get_marker() in (None, "None", ""):
                    continue
                for x, y in ax.transData.transform(line.get_xydata()):
                    self.assertFalse(box.contains(x, y), f"{ax.get_title()}: a point of "
                                     f"{line.get_label()} at {x:.0f},{y:.0f} under the legend")

    def test_timeline_data(self):
        lines, why = plot_timeline.timelines(make_model_parallel_results())
        self.assertIsNone(why)
        self.assertEqual([t.label for t in lines],
                         ["layer_split m1 x2", "layer_split m4 x2", "layer_split m4 1f1b x2"])
        m1, m4 = lines[0], lines[1]
        self.assertEqual(m1.stage_names, ["stage 0: cpu:0\nconv1, conv2",
                                          "stage 1: cpu:1\nfc1, fc2"])
        self.assertEqual(len(m1.passes), 4)
        self.assertEqual(len(m4.passes), 16)
        self.assertEqual(m4.passes[0], plot_timeline.Pass(0, True, 0, 0.0, 1.0))
        self.assertEqual((m1.microbatches, m4.microbatches, m4.schedule), (1, 4, "gpipe"))
        self.assertAlmostEqual(m1.iteration_bubble, 1 / 2)  # see gpipe_timeline
        self.assertAlmostEqual(m4.iteration_bubble, 1 / 3)
        self.assertEqual((m1.mean_bubble, m4.mean_bubble), (0.52, 0.36))
        self.assertAlmostEqual(m4.ideal_bubble, 1 / 5)
        self.assertEqual(m4.timed_iterations, 2)

    def test_timeline_figure(self):
        results = make_timeline_results()
        fig, why = plot_timeline.make_figure(results)
        self.assertIsNone(why)
        self.assertEqual(len(fig.axes), 2, "one panel per layer_split run")
        m1, m4 = fig.axes
        self.assertEqual(len(m4.patches), 16, "one bar per pass")
        colors = {tuple(p.get_facecolor()) for p in m4.patches}
        self.assertEqual(len(colors), 2, "forward and backward in two colours")
        self.assertEqual(sorted(t.get_text() for t in m4.texts), sorted("0123" * 4))
        self.assertEqual(m1.get_xlim(), m4.get_xlim(), "one time axis")
        self.assertEqual([t.get_text() for t in m4.get_yticklabels()],
                         ["stage 0: cpu:0\nconv1, conv2", "stage 1: cpu:1\nfc1, fc2"])
        title = m4.get_title(loc="left")
        self.assertIn("layer_split m4 x2", title)
        self.assertIn("36.0% measured (mean of 2 iterations)", title)
        self.assertIn("33.3% in the iteration shown", title)
        self.assertIn("20.0% ideal", title)
        # Stretch m=1's iteration 100 times: on the common axis m=4's bars are too narrow for a
        # label, m=1's are not.
        for e in results["runs"][1]["strategy_report"]["last_iteration_timeline"]:
            e["start_ms"] *= 100
            e["end_ms"] *= 100
        fig, _ = plot_timeline.make_figure(results)
        self.assertEqual(len(fig.axes[1].texts), 0)
        self.assertEqual(len(fig.axes[0].texts), 4)
        self.assertTrue(fig._suptitle.get_text().startswith(
            "Pipeline timeline of the last timed iteration"))
        # Runs whose every iteration was warm-up: the iteration shown was not timed.
        for run in results["runs"]:
            run["timing"]["timed_iterations"] = 0
        fig, _ = plot_timeline.make_figure(results)
        self.assertTrue(fig._suptitle.get_text().startswith(
            "Pipeline timeline of the last iteration (all were warm-up)"))

    def test_timeline_malformed_entries(self):
        cases = {  # what is done to entry 2 of the m=4 run -> what the message says
            "end before start": (lambda e: e.update(end_ms=e["start_ms"] - 1),
                                 "[2]: end_ms 1 is before start_ms 2"),
            "unknown pass": (lambda e: e.update({"pass": "sideways"}),
                             '[2]: pass is "sideways", expected "forward" or "backward"'),
            "stage out of range": (lambda e: e.update(stage=2),
                                   "[2]: stage is 2, expected an integer in 0..1"),
            "micro-batch out of range": (lambda e: e.update(microbatch=4),
                                         "[2]: microbatch is 4, expected an integer in 0..3"),
            "start not a number": (lambda e: e.update(start_ms="2"),
                                   '[2]: start_ms and end_ms must be finite numbers, got "2"'),
            "missing end": (lambda e: e.pop("end_ms"), "[2]: start_ms and end_ms must be"),
        }
        for case, (damage, message) in cases.items():
            results = make_timeline_results()
            damage(results["runs"][2]["strategy_report"]["last_iteration_timeline"][2])
            with self.assertRaises(pr.ResultsError, msg=case) as cm:
                plot_timeline.make_figure(results)
            text = str(cm.exception)
            self.assertTrue(text.startswith(
                "run 'layer_split m4 x2': strategy_report.last_iteration_timeline" + message),
                f"{case}: {text}")
            self.assertNotIn("\n", text)
        results = make_timeline_results()
        results["runs"][1]["strategy_report"]["last_iteration_timeline"] = {"stage": 0}
        with self.assertRaises(pr.ResultsError) as cm:
            plot_timeline.make_figure(results)
        self.assertEqual(str(cm.exception), "run 'layer_split m1 x2': "
                         "strategy_report.last_iteration_timeline is a JSON dict, not a list")

    def test_breakdown_per_device_means_and_max(self):
        bars = plot_breakdown.breakdown_bars(make_results())
        ring2 = bars["strong"]["data_parallel/ring"][0]
        self.assertEqual(ring2.devices, 2)
        self.assertAlmostEqual(ring2.compute_ms, 9.0)
        self.assertAlmostEqual(ring2.exposed_communication_ms, 2.0)
        self.assertAlmostEqual(ring2.optimizer_ms, 1.0)
        self.assertAlmostEqual(ring2.idle_ms, 1.5)
        self.assertAlmostEqual(ring2.max_total_ms, 13.6)
        naive2 = bars["strong"]["data_parallel/naive"][0]
        self.assertAlmostEqual(naive2.idle_ms, 2.0)  # derived: (1 + 3) / 2
        self.assertAlmostEqual(naive2.exposed_communication_ms, 3.5)

    def test_breakdown_without_per_device(self):
        bars = plot_breakdown.breakdown_bars(make_results())
        single = bars["strong"]["single"][0]
        self.assertAlmostEqual(single.compute_ms, 12.0)  # forward + backward
        self.assertAlmostEqual(single.exposed_communication_ms, 0.0)
        self.assertAlmostEqual(single.optimizer_ms, 1.0)
        self.assertAlmostEqual(single.idle_ms, 0.5)  # total - the rest
        self.assertIsNone(single.max_total_ms)
        self.assertEqual([b.devices for b in bars["weak"]["data_parallel/tree"]], [2, 4])
        labels = [b.label for by in bars.values() for bs in by.values() for b in bs]
        self.assertEqual(len(labels), 14)  # 2 single + 12 data_parallel; skipped/failed left out

    def test_a_step_replayed_as_one_cuda_graph_is_not_split_into_idle_time(self):
        # Its phases read 0 (not measured): the H200's graphed single step came out 98 % idle.
        results = make_results()
        single = results["runs"][0]
        for it in single["iterations"]:
            it.update(forward_ms=0.0, backward_ms=0.0, optimizer_ms=0.0,
                      detail={"cuda_graph_replay": 1})
        self.assertIsNone(pr.breakdown(single))
        self.assertNotIn("single", plot_breakdown.breakdown_bars(results)["strong"])
        single["iterations"][0]["detail"] = {}  # one eager step among them: that one is split
        self.assertAlmostEqual(pr.breakdown(single)["idle_ms"],
                               single["iterations"][0]["total_ms"])

    def test_accuracy_lines(self):
        results = make_results()
        results["runs"][2]["epochs"] = []
        lines = plot_accuracy.accuracy_lines(results)
        self.assertEqual(sorted(lines), ["strong", "weak"])
        labels = [line.label for ls in lines.values() for line in ls]
        self.assertEqual(len(labels), 13)  # 14 ok runs, one without epochs
        self.assertNotIn(results["runs"][2]["label"], labels)
        single = lines["strong"][0]
        self.assertEqual(single.label, "single x1 strong")
        self.assertEqual(single.points, [(1, 0.45), (2, 0.65)])
        fig, _ = plot_accuracy.make_figure(results)
        self.assertEqual(len(fig.axes), 2)

    def test_one_epoch_runs_are_left_out_beside_longer_ones(self):
        # A sweep's timing runs (one truncated epoch) beside its accuracy runs: only the curves.
        results = make_results()
        for run in results["runs"]:
            if run["config"]["batch_scaling"] == "weak" or run["config"]["devices"] == 4:
                run["epochs"] = run.get("epochs", [])[:1]
                run["config"]["epochs"] = 1
        got = plot_accuracy.curves(plot_accuracy.accuracy_lines(results))
        self.assertEqual(sorted(got), ["strong"])
        self.assertTrue(got["strong"])
        self.assertTrue(all(len(line.points) == 2 for line in got["strong"]))
        fig, _ = plot_accuracy.make_figure(results)
        self.assertEqual(len(fig.axes), 1)
        # A run set to train longer and stopped after its first epoch is drawn, as far as it
        # got (it was dropped as a one-epoch run).
        stopped = next(r for r in results["runs"] if r["config"]["batch_scaling"] == "weak")
        stopped["config"]["epochs"] = 10
        stopped["status"] = "interrupted"
        got = plot_accuracy.curves(plot_accuracy.accuracy_lines(results))
        self.assertEqual([line.label for line in got["weak"]], [stopped["label"]])
        # Where every run has one epoch, they are all drawn.
        for run in results["runs"]:
            run["epochs"] = run.get("epochs", [])[:1]
            run["config"]["epochs"] = 1
        got = plot_accuracy.curves(plot_accuracy.accuracy_lines(results))
        self.assertEqual(sorted(got), ["strong", "weak"])

    def test_a_partial_file_is_plotted_with_a_warning(self):
        with tempfile.TemporaryDirectory() as d:
            doc = make_results()
            doc["state"] = "interrupted"
            path = os.path.join(d, "partial.json")
            with open(path, "w") as f:
                json.dump(doc, f)
            err = io.StringIO()
            with redirect_stderr(err):
                results = pr.load_results(path)
            self.assertEqual(len(results["runs"]), len(doc["runs"]))
            self.assertIn("state is interrupted", err.getvalue())

    def test_machine_description_names_every_gpu_model(self):
        env = {"cpu_model": "Xeon", "cpu_cores": 2, "gpu_model": ["NVIDIA H200", "NVIDIA A100"]}
        self.assertEqual(pr.machine_description({"environment": env}),
                         "Xeon, 2 cores; NVIDIA H200; NVIDIA A100")
        env["gpu_model"] = "NVIDIA H200"  # schema 1 files
        self.assertEqual(pr.machine_description({"environment": env}), "Xeon, 2 cores; NVIDIA H200")
        env["gpu_model"] = None
        self.assertEqual(pr.machine_description({"environment": env}), "Xeon, 2 cores")

    def test_load_results_errors_name_the_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            cases = {"missing.json": None, "bad.json": "{not json",
                     "norun.json": json.dumps({"schema_version": 1}),
                     "list.json": "[1, 2]",
                     "empty.json": json.dumps({"schema_version": 1, "runs": []})}
            for name, content in cases.items():
                path = os.path.join(tmp, name)
                if content is not None:
                    with open(path, "w") as f:
                        f.write(content)
                with self.assertRaises(pr.ResultsError, msg=name) as cm:
                    pr.load_results(path)
                message = str(cm.exception)
                self.assertTrue(message.startswith(path + ": "), message)
                self.assertNotIn("\n", message)


class ScriptTest(PlotTestCase):
    """The scripts as a user runs them."""

    def check_written(self, out_dir, names, stdout):
        expected = sorted(f"{n}.{ext}" for n in names for ext in ("png", "svg"))
        self.assertEqual(sorted(os.listdir(out_dir)), expected, "and no temporary files left")
        for n in names:
            assert_png(self, os.path.join(out_dir, f"{n}.png"))
            assert_svg(self, os.path.join(out_dir, f"{n}.svg"))
            for ext in ("png", "svg"):
                self.assertIn(os.path.join(out_dir, f"{n}.{ext}"), stdout.splitlines())

    def test_without_matplotlib_each_script_says_so_in_one_line(self):
        # An interpreter without matplotlib (a GPU host's PyTorch Python, say): a fake package
        # that fails to import stands in for the missing one.
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        self.write(os.path.join("fake", "matplotlib", "__init__.py"),
                   "raise ImportError(\"No module named 'matplotlib'\")\n")
        path = self.write("results.json", make_results())
        for script in (*SCRIPTS, "plot_allreduce.py"):
            p = subprocess.run([sys.executable, os.path.join(HERE, script), path],
                               capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": fake})
            self.assertEqual(p.returncode, 1, script)
            self.assertNotIn("Traceback", p.stderr, script)
            lines = p.stderr.splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn(f"{script}: matplotlib is missing for {sys.executable}", lines[0])
            self.assertIn("python3-matplotlib", lines[0])
            self.assertEqual(sorted(os.listdir(self.tmp)), ["fake", "results.json"],
                             "nothing written")

    def test_each_script_writes_png_and_svg(self):
        path = self.write("results.json", make_model_parallel_results())
        for script in SCRIPTS:
            out_dir = os.path.join(self.tmp, script + "-out")
            p = self.run_script(script, path, "--out-dir", out_dir)
            self.assertEqual(p.returncode, 0, f"{script}: {p.stderr}")
            self.assertEqual(p.stderr, "", script)
            self.check_written(out_dir, PLOT_NAMES[script], p.stdout)

    def test_default_out_dir_beside_results(self):
        path = self.write("lenet-run.json", make_results())
        p = self.run_script("plot_speedup.py", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_written(os.path.join(self.tmp, "lenet-run-plots"), ["speedup"], p.stdout)

    def test_rewrite_replaces_existing_plots(self):
        path = self.write("results.json", make_results())
        out_dir = os.path.join(self.tmp, "out")
        os.makedirs(out_dir)
        for ext in ("png", "svg"):
            self.write(os.path.join("out", f"accuracy.{ext}"), "stale")
        p = self.run_script("plot_accuracy.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_written(out_dir, ["accuracy"], p.stdout)

    def test_bad_results_files(self):
        bad = {"missing.json": None,
               "notjson.json": "this is not json {",
               "noruns.json": {"schema_version": 1, "environment": {}},
               "other-json.json": {"benchmark": "compare-pytorch", "rows": []}}
        for name, content in bad.items():
            path = os.path.join(self.tmp, name) if content is None else self.write(name, content)
            for script in SCRIPTS:
                out_dir = os.path.join(self.tmp, f"out-{name}-{script}")
                p = self.run_script(script, path, "--out-dir", out_dir)
                where = f"{script} {name}"
                self.assertEqual(p.returncode, 1, where)
                lines = p.stderr.splitlines()
                self.assertEqual(len(lines), 1, f"{where}: {p.stderr!r}")
                self.assertTrue(lines[0].startswith(f"{script}: {path}: "), f"{where}: {lines[0]}")
                self.assertEqual(p.stdout, "", where)
                self.assertFalse(os.path.exists(out_dir), f"{where}: wrote {out_dir}")
            default_dir = os.path.join(self.tmp, f"{os.path.splitext(name)[0]}-plots")
            self.assertFalse(os.path.exists(default_dir), default_dir)

    def test_only_single_device_runs_no_speedup(self):
        results = make_results()
        results["runs"] = [r for r in results["runs"] if r["config"]["devices"] == 1]
        path = self.write("single.json", results)
        out_dir = os.path.join(self.tmp, "out")
        p = self.run_script("plot_all.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        said = [line for line in p.stdout.splitlines() if line.startswith("speedup:")]
        self.assertEqual(len(said), 1, p.stdout)
        self.check_written(out_dir, ["breakdown", "accuracy"], p.stdout)

        alone = os.path.join(self.tmp, "alone")
        p = self.run_script("plot_speedup.py", path, "--out-dir", alone)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1, p.stdout)
        self.assertFalse(os.path.exists(alone), "nothing written, not even the directory")

    def test_results_without_data_parallel_fields(self):
        """A file as bench_runner writes it before the data-parallel additions."""
        results = make_results()
        old = copy.deepcopy(results)
        old["runs"] = [r for r in old["runs"] if r["config"]["strategy"] == "single"][:1]
        for run in old["runs"]:
            run.pop("scaling", None)
            for key in ("batch_scaling", "lr_scaling", "oversubscribed"):
                run["config"].pop(key)
        path = self.write("old.json", old)
        out_dir = os.path.join(self.tmp, "out")
        p = self.run_script("plot_all.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.check_written(out_dir, ["breakdown", "accuracy"], p.stdout)


class TimelineScriptTest(PlotTestCase):
    """plot_timeline.py as a user runs it."""

    check_written = ScriptTest.check_written

    def test_two_layer_split_runs(self):
        path = self.write("mp.json", make_timeline_results())
        out_dir = os.path.join(self.tmp, "out")
        p = self.run_script("plot_timeline.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        self.check_written(out_dir, ["timeline"], p.stdout)

    def test_no_layer_split_run_writes_nothing(self):
        path = self.write("dp.json", make_results())
        out_dir = os.path.join(self.tmp, "out")
        p = self.run_script("plot_timeline.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        self.assertEqual(p.stdout, "timeline: not written: no layer_split run in the file\n")
        self.assertFalse(os.path.exists(out_dir), "nothing written, not even the directory")

        p = self.run_script("plot_all.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("timeline: not written: no layer_split run in the file", p.stdout)
        self.check_written(out_dir, ["speedup", "breakdown", "accuracy"], p.stdout)

    def test_layer_split_runs_without_timeline(self):
        """Failed runs, or a file written before the timeline existed."""
        results = make_timeline_results()
        del results["runs"][1]["strategy_report"]
        results["runs"][2]["strategy_report"].pop("last_iteration_timeline")
        path = self.write("old.json", results)
        out_dir = os.path.join(self.tmp, "out")
        p = self.run_script("plot_timeline.py", path, "--out-dir", out_dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "timeline: not written: none of the 2 layer_split runs has a "
                                   "strategy_report.last_iteration_timeline\n")
        self.assertFalse(os.path.exists(out_dir))

    def test_malformed_timeline_is_one_line_naming_the_run(self):
        results = make_timeline_results()
        results["runs"][2]["strategy_report"]["last_iteration_timeline"][5]["pass"] = "sideways"
        path = self.write("bad.json", results)
        for script in ("plot_timeline.py", "plot_all.py"):
            out_dir = os.path.join(self.tmp, f"out-{script}")
            p = self.run_script(script, path, "--out-dir", out_dir)
            self.assertEqual(p.returncode, 1, script)
            self.assertEqual(p.stderr.splitlines(), [
                f"{script}: {path}: run 'layer_split m4 x2': "
                'strategy_report.last_iteration_timeline[5]: pass is "sideways", expected '
                '"forward" or "backward"'], script)
            self.assertEqual(p.stdout, "", script)
            self.assertFalse(os.path.exists(out_dir), f"{script}: wrote {out_dir}")


class InProcessTest(PlotTestCase):
    def test_main_returns_status(self):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = plot_speedup.main([os.path.join(self.tmp, "absent.json")])
        self.assertEqual(status, 1)
        self.assertIn("absent.json: no such file", err.getvalue())


def bench_row(name, us, busbw):
    return {"name": name + "/manual_time", "run_name": name + "/manual_time",
            "run_type": "iteration", "real_time": us, "time_unit": "us", "busbw": busbw}


def make_bench():
    """allreduce_bench JSON: on 4 devices tree is faster up to 1 KiB and ring from 16 KiB on; on
    2 devices ring is never slower; on 8 (time-shared) devices tree is faster at every size;
    plus a memcpy row, a LeNet row and an errored row."""
    rows = []
    for b in (4, 1024, 16384, 65536, 1 << 20):
        rows.append(bench_row(f"allreduce/ring/devices:4/bytes:{b}", 10.0 + b / 1000, 1.0))
        rows.append(bench_row(f"allreduce/tree/devices:4/bytes:{b}", 5.0 + b / 500, 0.5))
        rows.append(bench_row(f"allreduce/ring/devices:2/bytes:{b}", 5.0 + b / 2000, 2.0))
        rows.append(bench_row(f"allreduce/tree/devices:2/bytes:{b}", 6.0 + b / 1000, 1.0))
        for algo, us in (("ring", 50.0 + b / 100), ("tree", 20.0 + b / 200)):
            rows.append(dict(bench_row(f"allreduce/{algo}/devices:8/bytes:{b}", us, 0.1),
                             label=f"{algo} time-shared (8 ranks on 2 cores)"))
        rows.append(bench_row(f"memcpy/devices:2/bytes:{b}", 1.0 + b / 10000, 9.0))
    rows.append(bench_row("lenet_per_tensor/ring/devices:2/bytes:516272", 100.0, 1.0))
    rows.append({"name": "allreduce/devices:8", "run_name": "allreduce/devices:8",
                 "error_occurred": True, "error_message": "skipped"})
    return {"context": {}, "benchmarks": rows}


class AllreducePlots(PlotTestCase):
    def test_crossover_is_the_size_from_which_ring_wins(self):
        bench = plot_allreduce.load_benchmark(self.write("b.json", make_bench()))
        # 4 devices: tree (5 + b/500 us) beats ring (10 + b/1000 us) while b < 5000 bytes, so
        # at 1 KiB it wins and at 16 KiB it no longer does.
        # 8 devices: tree (20 + b/200) stays faster than ring (50 + b/100) up to the largest.
        self.assertEqual(plot_allreduce.crossovers(bench["rows"]),
                         {2: "ring", 4: 16384, 8: "tree"})
        self.assertEqual(plot_allreduce.time_shared(bench["rows"]), {8})

    def test_writes_both_plots_and_reports_the_crossover(self):
        path = self.write("b.json", make_bench())
        out = os.path.join(self.tmp, "plots")
        proc = self.run_script("plot_allreduce.py", path, "--out-dir", out)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for name in ("allreduce_busbw", "allreduce_latency"):
            assert_png(self, os.path.join(out, name + ".png"))
            assert_svg(self, os.path.join(out, name + ".svg"))
        self.assertIn("tree/ring crossover on 4 devices: 16 KiB", proc.stdout)
        self.assertIn("tree/ring crossover on 2 devices: none (ring at least as fast at every "
                      "size)", proc.stdout)
        self.assertIn("tree/ring crossover on 8 devices: none within the sweep (tree still "
                      "faster at 1 MiB)", proc.stdout)

    def test_median_aggregates_win_over_repetitions(self):
        doc = make_bench()
        rep = bench_row("allreduce/ring/devices:4/bytes:4", 999.0, 1.0)
        med = dict(bench_row("allreduce/ring/devices:4/bytes:4", 3.0, 1.0),
                   run_type="aggregate", aggregate_name="median")
        doc["benchmarks"] = [rep, med]
        rows = plot_allreduce.load_benchmark(self.write("b.json", doc))["rows"]
        self.assertEqual([(r["algo"], r["us"]) for r in rows], [("ring", 3.0)])

    def test_bad_files_fail_with_one_line_and_write_nothing(self):
        out = os.path.join(self.tmp, "plots")
        row = bench_row("allreduce/ring/devices:4/bytes:4", 3.0, 1.0)
        del row["real_time"]
        for content, what in (("{", "not JSON"), ({"runs": []}, "not a Google Benchmark"),
                              ({"benchmarks": []}, "no allreduce_bench rows"),
                              # each of these was a traceback:
                              ({"benchmarks": [1]}, "benchmarks[0] is not an object"),
                              ({"benchmarks": [row]}, "benchmarks[0] (allreduce/ring/devices:4/"
                                                      "bytes:4/manual_time): no real_time"),
                              (b"\xff\xfe\x00garbage", "not JSON (not UTF-8 text)")):
            path = os.path.join(self.tmp, "bad.json")
            if isinstance(content, bytes):
                with open(path, "wb") as f:
                    f.write(content)
            else:
                path = self.write("bad.json", content)
            proc = self.run_script("plot_allreduce.py", path, "--out-dir", out)
            self.assertEqual(proc.returncode, 1)
            self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
            self.assertIn(what, proc.stderr)
            self.assertIn("bad.json", proc.stderr)
            self.assertFalse(os.path.exists(out))
        proc = self.run_script("plot_allreduce.py", self.tmp, "--out-dir", out)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("a directory, not a results file", proc.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
