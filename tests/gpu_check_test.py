#!/usr/bin/python3
"""scripts/gpu-check.sh without a GPU: its plan, its time budget and what it leaves behind.

A GPU host lent for minutes gives one call that may bring back only a few files, so the check must
end within its budget, report every part it could not start, and leave exactly two files in $OUT
(summary.txt and the packed gpu-check-files.tar.gz). Bad arguments are one line and exit 2 with
nothing written. Run on any build that has bench_runner (a CPU-only one is enough: the GPU runs
then fail, and the test only asks that each goal is reported).

    tests/gpu_check_test.py --build-dir BUILD --source-dir SRC
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest

import unittest_parts

SCRIPT = BUILD = None


def lines_of(path):
    with open(path) as f:
        return f.read().splitlines()


def gpu_check(args, out, files=None, build=None, timeout=600, extra_env=None):
    env = dict(os.environ, OUT=out, **(extra_env or {}))
    env.pop("GPU_CHECK_BUDGET_S", None)
    env["GPU_CHECK_BUILD_DIR"] = build or BUILD
    if files:
        env["GPU_CHECK_FILES"] = files
    return subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


class Plan(unittest.TestCase):
    def test_list_prints_the_parts_in_order_without_running(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            proc = gpu_check(["--list"], out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            parts = [line.split(":")[0].strip() for line in proc.stdout.splitlines()[1:]]
            # speed before pytorch: the comparison takes the configuration speed found fastest.
            self.assertEqual(parts, ["determinism", "speed", "pytorch", "collectives", "main",
                                     "bench", "seeds", "sanitizers", "ncu"])
            self.assertFalse(os.path.exists(out))
            core = gpu_check(["--list", "core"], out)
            self.assertEqual([line.split(":")[0].strip() for line in core.stdout.splitlines()[1:]],
                             ["determinism", "speed", "seeds", "sanitizers", "ncu"])

    def test_bad_arguments_are_one_line_exit_2_and_write_nothing(self):
        cases = [(["bogus"], "'bogus'"), (["--wat"], "'--wat'"), (["--budget", "0"], "'0'"),
                 (["--budget", "x"], "'x'"), (["--budget"], "--budget")]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            for args, names in cases:
                with self.subTest(args=args):
                    proc = gpu_check(args, out)
                    lines = proc.stderr.splitlines()
                    self.assertEqual(proc.returncode, 2, proc.stderr)
                    self.assertEqual(len(lines), 1, proc.stderr)
                    self.assertTrue(lines[0].startswith("gpu-check.sh: ") and names in lines[0],
                                    lines[0])
            proc = gpu_check([], out, build=os.path.join(tmp, "no-build"))
            self.assertEqual(proc.returncode, 2)
            self.assertIn("GPU_CHECK_BUILD_DIR", proc.stderr)
            self.assertEqual(os.listdir(tmp), [])


    def test_build_only_stops_after_the_build_and_runs_no_test_or_part(self):
        # With a named build there is nothing to build: the call reports it built and stops,
        # before the GPU tests (whose logs would be in the packed files) and every part.
        with tempfile.TemporaryDirectory() as tmp:
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            proc = gpu_check(["--build-only", "determinism"], out, files)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            summary = lines_of(os.path.join(out, "summary.txt"))
            self.assertIn("gpu-check: PASS: built (--build-only: no GPU test or part run)", summary)
            self.assertFalse([line for line in summary if "took" in line or "test_" in line],
                             summary)
            self.assertEqual(sorted(os.listdir(out)), ["gpu-check-files.tar.gz", "summary.txt"])
            self.assertFalse(any(name.startswith("test_") for name in os.listdir(files)),
                             os.listdir(files))


    def test_build_only_refuses_a_stamp_that_does_not_name_head_before_building(self):
        # In a scratch repository with the script: a stamp of another commit fails at once, naming
        # both, and nothing is built; a fresh stamp (stamp-source.sh) passes the check (the
        # configure then fails: the scratch tree has no CMakeLists.txt).
        with tempfile.TemporaryDirectory() as tmp:
            repo = os.path.join(tmp, "repo")
            os.makedirs(os.path.join(repo, "scripts"))
            for name in ("gpu-check.sh", "stamp-source.sh"):
                with open(os.path.join(os.path.dirname(SCRIPT), name)) as src, \
                        open(os.path.join(repo, "scripts", name), "w") as dst:
                    dst.write(src.read())
                os.chmod(os.path.join(repo, "scripts", name), 0o755)
            with open(os.path.join(repo, ".gitignore"), "w") as f:
                f.write("/.paralab-source-commit\n/build-gpu/\n")
            git = ["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(["git", "init", "-q", repo], check=True)
            subprocess.run(git + ["add", "-A"], check=True)
            subprocess.run(git + ["commit", "-q", "-m", "scratch"], check=True)
            head = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                                  text=True).stdout.strip()
            with open(os.path.join(repo, ".paralab-source-commit"), "w") as f:
                f.write("commit " + "0" * 40 + "\ndirty false\n")
            env = {k: v for k, v in os.environ.items()
                   if k not in ("GPU_CHECK_BUILD_DIR", "GPU_CHECK_BUDGET_S")}
            out = os.path.join(tmp, "out")
            run = lambda: subprocess.run([os.path.join(repo, "scripts", "gpu-check.sh"),
                                          "--build-only"], env=dict(env, OUT=out),
                                         capture_output=True, text=True, timeout=300)
            proc = run()
            summary = lines_of(os.path.join(out, "summary.txt"))
            self.assertEqual(proc.returncode, 1, summary)
            self.assertIn(f"gpu-check: FAIL: .paralab-source-commit names {'0' * 40}, HEAD is "
                          f"{head}: run scripts/stamp-source.sh before the copy", summary)
            self.assertFalse(os.path.exists(os.path.join(repo, "build-gpu")))
            subprocess.run([os.path.join(repo, "scripts", "stamp-source.sh")], check=True,
                           capture_output=True)
            proc = run()
            summary = lines_of(os.path.join(out, "summary.txt"))
            self.assertFalse([line for line in summary if "paralab-source-commit" in line], summary)
            self.assertTrue(any(line.startswith("gpu-check: configure FAILED") for line in summary),
                            summary)


class Budget(unittest.TestCase):
    def test_a_hung_command_skips_the_rest_of_its_part_and_hung_tests_stop_the_tests(self):
        # Every cap divided by 60 (GPU_CHECK_CAP_DIVISOR): a bench_runner that never finishes
        # uses its cap (120 s: 2 s) once, and the part's later runs are not started; two GPU test
        # binaries that never finish use the tests' 150 s (2.5 s) between them, and the later
        # binaries are reported as not run.
        hang = "#!/bin/sh\nsleep 60\n"
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["determinism"], extra_env={"GPU_CHECK_CAP_DIVISOR": "60"},
                                      bench_runner=hang, tests__test_backends=hang,
                                      tests__test_collectives=hang)
            hung = [line for line in summary if line.startswith("gpu-check: NOTE: hung: ")]
            self.assertTrue(all(line.endswith("the rest of this part is not started") for line in hung))
            # One or both hanging test binaries (at 1-second granularity the first may take the
            # whole window), then exactly one run of the part.
            self.assertIn(len(hung), (2, 3), summary)
            self.assertTrue(all("/tests/test_" in line for line in hung[:-1]), summary)
            self.assertIn("bench_runner experiments/lenet-10epochs.json", hung[-1])
            not_run = [line for line in summary if line.endswith("not run, the GPU tests' 150 s are spent")]
            self.assertGreaterEqual(len(not_run), 1, summary)
            took = [int(line.split()[3]) for line in summary
                    if line.startswith(("gpu-check: tests took ", "gpu-check: determinism took "))]
            self.assertEqual(len(took), 2, summary)
            self.assertLess(took[0], 10, summary)
            self.assertLess(took[1], 20, summary)
            goals = [line for line in summary if line.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: "))]
            self.assertTrue(goals and all(line.startswith("gpu-check: FAIL: ") for line in goals), summary)

    def test_skip_tests_leaves_out_the_gpu_tests(self):
        with tempfile.TemporaryDirectory() as tmp:
            build = stand_in_build(tmp)
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            gpu_check(["--budget", "3", "--skip-tests", "seeds"], out, files, build=build)
            summary = lines_of(os.path.join(out, "summary.txt"))
            self.assertIn("gpu-check: GPU tests skipped (--skip-tests)", summary)
            self.assertFalse([line for line in summary if line.startswith("gpu-check: test_")], summary)

    def test_a_spent_budget_reports_every_part_not_run_and_packs_two_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            proc = gpu_check(["--budget", "3", "main", "seeds"], out, files)
            self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["gpu-check-files.tar.gz", "summary.txt"])
            summary = lines_of(os.path.join(out, "summary.txt"))
            not_run = [line for line in summary if line.startswith("gpu-check: NOT RUN: ")]
            self.assertEqual([line.split()[3] for line in not_run], ["main", "seeds"], summary)
            self.assertFalse(any(" PASS: " in line for line in summary), summary)
            self.assertTrue(summary[-1].startswith("gpu-check: FAIL after "), summary[-1])
            with tarfile.open(os.path.join(out, "gpu-check-files.tar.gz")) as tar:
                names = {os.path.normpath(n) for n in tar.getnames()}
                packed = tar.extractfile("./summary.txt").read().decode().splitlines()
            self.assertTrue({"summary.txt", "gpu.csv", "test_backends.log"} <= names, names)
            self.assertEqual(packed, summary)

    def test_a_part_that_runs_reports_each_of_its_goals_and_its_time(self):
        # Without a GPU the runs fail, so the goals are FAIL lines; on a GPU they may pass.
        with tempfile.TemporaryDirectory() as tmp:
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            proc = gpu_check(["--budget", "200", "determinism"], out, files)
            summary = lines_of(os.path.join(out, "summary.txt"))
            goals = [line.split(": ", 2)[1:] for line in summary
                     if line.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: "))]
            self.assertEqual([g[1].split(" (")[0] for g in goals],
                             ["same seed, same bits"] * 3 +  # cudnn, fused, mixed
                             ["steps read once per epoch: same bits as per step, not slower",
                              "8 steps per graph launch: same bits as 1"],
                             summary)
            self.assertTrue(any(line.startswith("gpu-check: determinism took ")
                                for line in summary), summary)
            self.assertEqual(proc.returncode, 0 if all(g[0] == "PASS" for g in goals) else 1)
            self.assertEqual(sorted(os.listdir(out)), ["gpu-check-files.tar.gz", "summary.txt"])
            self.assertTrue(os.path.isfile(os.path.join(files, "core-runs.log")))


def stand_in_build(tmp, bench_runner="#!/bin/sh\nexit 1\n", allreduce_bench="#!/bin/sh\nexit 1\n",
                   **more):
    """A build directory in tmp whose bench_runner and allreduce_bench are the given scripts (by
    default, ones that fail); `more` adds programs by path, '/' spelt '__' (tests__test_x)."""
    build = os.path.join(tmp, "build")
    os.mkdir(build)
    programs = {"bench_runner": bench_runner, "allreduce_bench": allreduce_bench}
    programs.update({name.replace("__", "/"): text for name, text in more.items()})
    for name, text in programs.items():
        path = os.path.join(build, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    return build


def run_stand_in(tmp, parts, budget=300, name="", extra_env=None, **scripts):
    """gpu-check.sh's parts on a stand_in_build of `scripts` in tmp: (summary lines, files dir)."""
    build = os.path.join(tmp, "build")
    if not os.path.isdir(build):
        stand_in_build(tmp, **scripts)
    out, files = os.path.join(tmp, "out" + name), os.path.join(tmp, "files" + name)
    gpu_check(["--budget", str(budget), *parts], out, files, build=build, extra_env=extra_env)
    return lines_of(os.path.join(out, "summary.txt")), files


# The start of every stand-in bench_runner below: its arguments, and the results file it writes.
BENCH_RUNNER_HEAD = ("#!/usr/bin/python3\n"
                     "import json, os, sys\n"
                     "a = sys.argv\n"
                     "out = a[a.index('--out') + 1]\n")


class Verdicts(unittest.TestCase):
    def test_a_tool_the_host_cannot_run_is_not_available_not_failed_code(self):
        # A compute-sanitizer and an ncu that cannot work on this host (a sandboxed runtime, as
        # some lent machines have): one NOT AVAILABLE line each with the tool's words, no goal
        # line blaming the code, the other checks not attempted; the CPU emulation still runs.
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir = os.path.join(tmp, "bin")
            os.mkdir(bin_dir)
            tools = {"compute-sanitizer": "echo '========= Error: Device not supported'; exit 1\n",
                     "ncu": "echo '==ERROR== ERR_NVGPUCTRPERM - The user does not have permission' >&2; exit 1\n"}
            for name, body in tools.items():
                with open(os.path.join(bin_dir, name), "w") as f:
                    f.write("#!/bin/sh\necho called >> " + os.path.join(tmp, name + ".calls") + "\n" + body)
                os.chmod(os.path.join(bin_dir, name), 0o755)
            build = stand_in_build(tmp, tests__test_fused_kernels=(
                "#!/bin/sh\necho '[  PASSED  ] 25 tests.'\nexit 0\n"))
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            env_path = os.environ["PATH"]
            os.environ["PATH"] = bin_dir + os.pathsep + env_path
            try:
                proc = gpu_check(["--budget", "300", "sanitizers", "ncu"], out, files, build=build)
            finally:
                os.environ["PATH"] = env_path
            summary = lines_of(os.path.join(out, "summary.txt"))
            self.assertEqual(proc.returncode, 1, summary)
            unavailable = [line for line in summary if line.startswith("gpu-check: NOT AVAILABLE: ")]
            self.assertEqual(len(unavailable), 2, summary)
            self.assertIn("compute-sanitizer on this host (========= Error: Device not supported)",
                          unavailable[0])
            self.assertIn("ncu on this host (==ERROR== ERR_NVGPUCTRPERM", unavailable[1])
            self.assertFalse([line for line in summary if "compute-sanitizer" in line and
                              line.startswith(("gpu-check: PASS", "gpu-check: FAIL"))], summary)
            self.assertFalse([line for line in summary if line.startswith("gpu-check: FAIL: ncu")], summary)
            self.assertIn("gpu-check: PASS: own kernels under the CPU emulation ([  PASSED  ] 25 tests.)",
                          summary)
            for name in tools:
                self.assertEqual(lines_of(os.path.join(tmp, name + ".calls")), ["called"], name)

    def test_a_sanitizer_stopped_or_failing_says_why_in_its_goal_line(self):
        # A stand-in compute-sanitizer: memcheck finds errors (exit 9 and its summary line), the
        # racecheck run ends as a command stopped at its time limit ends (exit 124, no summary),
        # and the group-graph run passes.
        with tempfile.TemporaryDirectory() as tmp:
            bin_dir = os.path.join(tmp, "bin")
            os.mkdir(bin_dir)
            with open(os.path.join(bin_dir, "compute-sanitizer"), "w") as f:
                f.write("#!/bin/sh\n"
                        "if [ \"$PARALAB_OWN_TILES\" = narrow ]; then\n"
                        "  echo '========= ERROR SUMMARY: 0 errors, narrow tiles'; exit 0\n"
                        "fi\n"
                        "case \"$*\" in\n"
                        "  *racecheck*) exit 124 ;;\n"
                        "  *test_data_parallel*) echo '========= ERROR SUMMARY: 0 errors'; exit 0 ;;\n"
                        "  *) echo '========= ERROR SUMMARY: 3 errors'; exit 9 ;;\n"
                        "esac\n")
            os.chmod(os.path.join(bin_dir, "compute-sanitizer"), 0o755)
            out, files = os.path.join(tmp, "out"), os.path.join(tmp, "files")
            # The own kernels' CPU emulation is a stand-in too (the real one takes a minute on 2
            # cores; ctest runs it as FusedKernels.*): it fails, and its goal line says so.
            build = stand_in_build(tmp, tests__test_fused_kernels=(
                "#!/bin/sh\necho '[  FAILED  ] 2 tests, listed below:'\nexit 1\n"))
            env_path = os.environ["PATH"]
            os.environ["PATH"] = bin_dir + os.pathsep + env_path
            try:
                proc = gpu_check(["--budget", "300", "sanitizers"], out, files, build=build)
            finally:
                os.environ["PATH"] = env_path
            summary = lines_of(os.path.join(out, "summary.txt"))
            goals = [line.split(": ", 2)[1:] for line in summary
                     if line.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: "))]

            def verdict(name):
                found = [g for g in goals if g[1].startswith(name)]
                self.assertEqual(len(found), 1, (name, summary))
                return found[0]
            self.assertEqual(proc.returncode, 1, summary)
            memcheck = verdict("compute-sanitizer memcheck (conv stages")
            self.assertEqual(memcheck[0], "FAIL", summary)
            self.assertIn("exit 9: ========= ERROR SUMMARY: 3 errors", memcheck[1])
            racecheck = verdict("compute-sanitizer racecheck")
            self.assertEqual(racecheck[0], "FAIL", summary)
            self.assertIn("stopped at its time limit or the budget; no line matching", racecheck[1])
            narrow = verdict("compute-sanitizer memcheck (own conv kernels, narrow tiles)")
            self.assertEqual(narrow[0], "PASS", summary)
            self.assertIn("0 errors, narrow tiles", narrow[1])
            group = [verdict("compute-sanitizer memcheck (one graph over the group")]
            self.assertEqual(group[0][0], "PASS", summary)
            self.assertIn("ERROR SUMMARY: 0 errors", group[0][1])
            emulation = verdict("own kernels under the CPU emulation")
            self.assertEqual(emulation[0], "FAIL", summary)
            self.assertIn("exit 1: [  FAILED  ] 2 tests", emulation[1])

    def test_the_pytorch_comparison_takes_the_configuration_speed_found_fastest(self):
        # A stand-in bench_runner whose steps are fastest with "mixed" and records the tile set
        # each run used, as the real one does; compare_pytorch.py then fails here (no GPU), but
        # its summary line names the configuration it was given.
        fake = self.speed_stand_in({"cudnn": 0.6, "fused": 0.5, "mixed": 0.3})
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["speed", "pytorch"], bench_runner=fake)
            fastest = [line for line in summary if "the default kernels (cudnn) are the faster" in line]
            self.assertEqual(len(fastest), 1, summary)
            self.assertTrue(fastest[0].startswith("gpu-check: FAIL: "), fastest[0])
            self.assertIn("faster: mixed", fastest[0])
            compared = [line for line in summary if "PyTorch comparison" in line]
            self.assertEqual(len(compared), 1, summary)
            self.assertIn("(ParaLab: mixed, kernels mixed, 1 step(s) per launch)", compared[0])

    def test_the_pytorch_comparison_takes_eight_steps_per_launch_where_they_were_faster(self):
        # A stand-in bench_runner for the determinism part: the same epochs and parameters in
        # every run, epochs of 150 ms, 140 ms with 8 steps per launch (at least 1 % faster: the
        # pytorch part then passes --steps-per-launch 8), or 149 ms (not: it passes 1).
        for eight_ms, passed in ((140, "8"), (149, "1")):
            fake = (BENCH_RUNNER_HEAD +
                    "eight = 'runs.0.steps_per_launch=8' in a\n"
                    f"secs = ({eight_ms} if eight else 150) / 1000\n"
                    "epochs = [{'epoch': e, 'train_loss': 0.5, 'train_acc': 0.8, 'test_loss': 0.6,\n"
                    "           'test_acc': 0.79, 'seconds': secs} for e in (1, 2, 3)]\n"
                    "report = {'cuda_graph_replays': 84, 'cuda_graph_steps_per_launch': 8,\n"
                    "          'cuda_graph_steps_run_eagerly': 6} if eight else {}\n"
                    "run = {'status': 'ok', 'epochs': epochs, 'parameters_digest': 'fnv1a64:1',\n"
                    "       'iterations': [{'total_ms': 0.6}] * 3, 'strategy_report': report}\n"
                    "json.dump({'runs': [run]}, open(out, 'w'))\n")
            with tempfile.TemporaryDirectory() as tmp:
                summary, _ = run_stand_in(tmp, ["determinism", "pytorch"], bench_runner=fake)
                eight = [line for line in summary if "8 steps per graph launch: same bits as 1" in line]
                self.assertEqual(len(eight), 1, summary)
                self.assertTrue(eight[0].startswith("gpu-check: PASS: "), eight[0])
                self.assertIn(f"8 {eight_ms}.0 ms", eight[0])
                self.assertIn("84 launches of 8 steps, 6 held steps run eagerly", eight[0])
                compared = [line for line in summary if "PyTorch comparison" in line]
                self.assertEqual(len(compared), 1, summary)
                self.assertIn(f"{passed} step(s) per launch)", compared[0])

    def test_the_main_part_notes_the_rings_step_graph_beside_its_exposed_communication(self):
        # A stand-in bench_runner for the main command: data_parallel/ring on 2 and 4 devices,
        # ok, graphed; the x2 run's report holds its step graph's census, the x4 run's none.
        fake = (BENCH_RUNNER_HEAD +
                "census = {'nodes': 120, 'kernels': 70, 'copies': 0, 'fills': 2, 'event_records': 3,\n"
                "          'event_waits': 3, 'longest_chain': {'work_nodes': 40, 'kernels': 38}}\n"
                "def run(k, report):\n"
                "    dev = {'exposed_communication_ms': 0.1, 'communication_wait_ms': 0.02,\n"
                "           'communication_move_ms': 0.03}\n"
                "    return {'status': 'ok', 'label': 'data_parallel/ring x%d' % k,\n"
                "            'config': {'strategy': 'data_parallel', 'devices': k,\n"
                "                       'options': {'allreduce': 'ring'}},\n"
                "            'iterations': [{'total_ms': 1.0, 'devices': [dev] * k}] * 3,\n"
                "            'strategy_report': report}\n"
                "runs = [run(2, {'cuda_graphs': 'used', 'cuda_graph': {'census': census}}),\n"
                "        run(4, {'cuda_graphs': 'used'})]\n"
                "json.dump({'runs': runs}, open(out, 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["main"], bench_runner=fake)
        exposed = [line for line in summary if "data_parallel/ring x2 exposed communication" in line]
        self.assertEqual(len(exposed), 1, summary)
        self.assertTrue(exposed[0].startswith("gpu-check: PASS: "), exposed[0])
        notes = [line for line in summary if line.startswith("gpu-check: NOTE: data_parallel/ring")]
        self.assertEqual(notes, ["gpu-check: NOTE: data_parallel/ring x2 step graph: 120 nodes, 70 kernels, "
                                 "0 copies, 2 fills, 6 event nodes; longest chain 40 work nodes (38 kernels)"],
                         summary)

    def test_the_per_message_cost_is_read_where_each_message_is_its_own_operation(self):
        # A stand-in allreduce_bench: with whole collectives (the default) the ring's time does
        # not depend on its pieces; with whole steps it costs 1.5 us more a step; moved per rank
        # it costs 4 us a message on 2 and 4 devices and 7 us on 8. The goal reads the per-rank
        # fit; the whole collectives' slope is a figure, and the three ways are logged side by side.
        fake = (
            "#!/usr/bin/python3\n"
            "import json, os, re, sys\n"
            "arg = lambda key: [x.split('=', 1)[1] for x in sys.argv if x.startswith(key + '=')]\n"
            "out = arg('--benchmark_out')[0]\n"
            "# As allreduce_bench names its rows: 'chunk:N' only where several piece sizes are asked\n"
            "# for; and only the rows --benchmark_filter matches (a regex search, as Google\n"
            "# Benchmark's).\n"
            "asked = arg('--chunk-bytes')[0].split(',') if arg('--chunk-bytes') else ['auto']\n"
            "chunks = [-1 if c == 'auto' else int(c) for c in asked]\n"
            "named = lambda chunk: f'/chunk:{chunk}' if len(chunks) > 1 else ''\n"
            "keep = re.compile(arg('--benchmark_filter')[0] if arg('--benchmark_filter') else '.')\n"
            "mode = os.environ.get('PARALAB_STEP_MOVES', 'auto')\n"
            "whole, collectives = mode != 'per_rank', mode not in ('per_rank', 'whole_steps')\n"
            "rows = [{'name': f'memcpy/devices:2/bytes:{b}/iterations:1/manual_time', 'real_time': 20.0}\n"
            "        for b in (516272, 16777216, 67108864)]\n"
            "for k in (2, 4, 8):\n"
            "    for chunk in chunks:\n"
            "        used = max(chunk, 0)\n"
            "        msgs = 2 * (k - 1) * (1 if used == 0 else -(-(16777216 // k) // used))\n"
            "        us = 100.0 if collectives else 100.0 + 1.5 * 2 * (k - 1) if whole else \\\n"
            "            100.0 + (7.0 if k == 8 else 4.0) * msgs\n"
            "        rows.append({'name': f'allreduce/ring/devices:{k}/bytes:16777216{named(chunk)}/iterations:1/manual_time',\n"
            "                     'real_time': us, 'chunk_bytes': used, 'whole_steps': int(whole),\n"
            "                     'whole_collectives': int(collectives)})\n"
            "        if chunk >= 0:  # the tree: 0.5 us a step of its schedule, 2 (pieces + depth - 1)\n"
            "            steps = 2 * ((1 if used == 0 else 16777216 // used) + {2: 1, 4: 2, 8: 3}[k] - 1)\n"
            "            rows.append({'name': f'allreduce/tree/devices:{k}/bytes:16777216{named(chunk)}/iterations:1/manual_time',\n"
            "                         'real_time': 50.0 + 0.5 * steps, 'chunk_bytes': used,\n"
            "                         'whole_steps': int(whole), 'whole_collectives': int(collectives)})\n"
            "rows = [r for r in rows if keep.search(r['name'])]\n"
            "json.dump({'benchmarks': rows}, open(out, 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["collectives"], allreduce_bench=fake)
        cost = [line for line in summary if "per-message cost" in line]
        self.assertEqual(len(cost), 3, summary)
        for k, line in zip((2, 4, 8), cost):
            self.assertTrue(line.startswith(("gpu-check: FAIL: " if k == 8 else "gpu-check: PASS: ") +
                                            f"per-message cost x{k} <= 5 us (messages per rank: fitted "
                                            f"{7.0 if k == 8 else 4.0:.2f} us over 4 chunk sizes; "
                                            "whole collectives: 0.00 us"), line)
        side = [line for line in summary if "ring x2 16777216 B (whole_steps/whole_collectives)" in line]
        self.assertEqual(len(side), 1, summary)
        self.assertIn("default 100.0 us (1/1, 5.00x memcpy), whole steps 103.0 us (1/0, 5.15x memcpy), "
                      "per rank 108.0 us (0/0, 5.40x memcpy); per rank / default 1.08x", side[0])
        tree = [line for line in summary if "tree x" in line and "per step" in line]
        self.assertEqual(len(tree), 3, summary)
        self.assertIn("tree x8 16 MiB in pieces (whole collectives): 0.50 us per step over 4 piece sizes "
                      "(6..516 steps, 53.0..308.0 us)", tree[2])

    def test_an_unfinished_results_file_is_resumed_per_rank_too(self):
        # A stand-in bench_runner that stops half-way (as one killed at its time limit or crashed
        # leaves its file: state "interrupted", no failed run): the runs are resumed per rank.
        fake = (
            BENCH_RUNNER_HEAD +
            "state = 'complete' if '--resume' in a else 'interrupted'\n"
            "runs = [{'status': 'ok', 'label': 'single x1', 'config': {'devices': 1}, 'iterations': []}]\n"
            "json.dump({'state': state, 'runs': runs}, open(out, 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            summary, files = run_stand_in(tmp, ["bench"], 200, bench_runner=fake)
            self.assert_resumed_per_rank(summary, "(the results file is interrupted, not complete: "
                                                  "its unfinished runs)")

    def test_the_bench_part_checks_one_capture_per_run(self):
        # A stand-in bench_runner: single's 2-epoch run captured twice, data_parallel's once,
        # layer_split's failed, channel_split's without graphs: one verdict each, the epoch
        # times beside it.
        def run(label, status="ok", caps=1, graphs="used"):
            return {"status": status, "label": label, "reason": None if status == "ok" else "boom",
                    "config": {"devices": 2}, "iterations": [],
                    "epochs": [{"seconds": 0.5}, {"seconds": 0.15}],
                    "strategy_report": {"cuda_graphs": graphs, "cuda_graph_captures": caps,
                                        "cuda_graph_replays": 466}}
        runs = [run("single gpu epoch", caps=2),
                run("data_parallel/ring x2, 2 epochs (one capture per run) [virtual]"),
                run("layer_split m8 x2, 2 epochs (one capture per run) [virtual]", status="failed"),
                run("channel_split x2, 2 epochs (one capture per run) [virtual]", caps=None,
                    graphs="not used: cuda_graphs is false")]
        fake = BENCH_RUNNER_HEAD + f"json.dump({{'state': 'complete', 'runs': {runs!r}}}, open(out, 'w'))\n"
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["bench"], 200, bench_runner=fake)
        lines = [line for line in summary if "one capture per run (" in line]
        self.assertEqual(lines, [
            "gpu-check: FAIL: single gpu epoch: one capture per run (2 capture(s), 466 launches; used; "
            "epochs 500.0, 150.0 ms)",
            "gpu-check: PASS: data_parallel/ring x2, 2 epochs (one capture per run) [virtual]: one "
            "capture per run (1 capture(s), 466 launches; used; epochs 500.0, 150.0 ms)",
            "gpu-check: FAIL: layer_split m8 x2, 2 epochs (one capture per run) [virtual]: one "
            "capture per run (failed: boom)",
            "gpu-check: FAIL: channel_split x2, 2 epochs (one capture per run) [virtual]: one capture "
            "per run (None capture(s), 466 launches; not used: cuda_graphs is false; epochs 500.0, "
            "150.0 ms)"], summary)

    def assert_resumed_per_rank(self, summary, why):
        # gpu-check's bench part named why it reruns, and reran per rank once, successfully.
        self.assertIn("gpu-check: failed with whole steps: " + why, summary)
        again = [line for line in summary if "the failed runs again with PARALAB_STEP_MOVES=per_rank" in line]
        self.assertEqual(len(again), 1, summary)
        self.assertIn("exit 0", again[0])
        return again[0]

    @staticmethod
    def speed_stand_in(ms, status="ok", config=True):
        # A stand-in bench_runner for the speed part: median step ms[kernels], + 0.1 without
        # split-K, + 0.2 under PARALAB_CUDNN_RULE=gemm; the tile set it ran with recorded.
        return (
            BENCH_RUNNER_HEAD +
            "kernels = [x.split('=', 1)[1] for x in a if x.startswith('kernels=')][0]\n"
            f"ms = {ms!r}[kernels]\n"
            "tiles = os.environ.get('PARALAB_OWN_TILES', 'wide')\n"
            "ms += 0.1 if os.environ.get('PARALAB_CUBLASLT_SPLIT_K') == 'off' else 0\n"
            "ms += 0.2 if os.environ.get('PARALAB_CUDNN_RULE') == 'gemm' else 0\n"
            f"run = {{'status': {status!r}, 'iterations': [{{'total_ms': ms}}] * 3,\n"
            "       'parameters_digest': 'fnv1a64:' + kernels}\n"
            # The step graph's census (strategy_report.cuda_graph.census): cudnn's with copies
            # and fills, the others' none of it readable.
            "if kernels == 'cudnn':\n"
            "    run['strategy_report'] = {'cuda_graph': {'census': {\n"
            "        'nodes': 48, 'kernels': 41, 'copies': 4, 'copy_bytes': 160, 'fills': 2,\n"
            "        'fill_bytes': 1048576, 'event_records': 1, 'event_waits': 0,\n"
            "        'longest_chain': {'work_nodes': 47, 'kernels': 41, 'copies': 4, 'fills': 2}}}}\n"
            "elif kernels == 'mixed':\n"
            "    run['strategy_report'] = {'cuda_graph': {'census': {'unknown': 'cudaGraphGetEdges failed'}}}\n"
            # The own kernels' capture failed: their steps ran eagerly.
            "else:\n"
            "    run['strategy_report'] = {'cuda_graphs': 'not used: capture failed: cuda: (simulated)'}\n"
            # The step trace where PARALAB_STEP_TRACE asks for one (the first repeat): plain
            # cuDNN's traced, the own kernels' not (no CUPTI); a second ask of one file fails.
            "trace = os.environ.get('PARALAB_STEP_TRACE')\n"
            "if trace:\n"
            "    assert not os.path.exists(trace), trace + ' asked for twice'\n"
            "    if kernels == 'cudnn' and not os.environ.get('PARALAB_CUDNN_RULE') \\\n"
            "            and not os.environ.get('PARALAB_CUBLASLT_SPLIT_K'):\n"
            "        json.dump({'launches': 4, 'summary': {'records': 160, 'launches': 4,\n"
            "            'span_per_launch_us': 520.0, 'busy_per_launch_us': 430.5, 'idle_per_launch_us': 89.5,\n"
            "            'gaps': [{'us': 21.0, 'after': 'kernel sgd_at_k', 'before': 'copy 1024 B'}],\n"
            "            'by_name': [{'name': 'fft2d_r2c', 'us_per_launch': 120.25},\n"
            "                        {'name': 'gemm', 'us_per_launch': 80.0}]}}, open(trace, 'w'))\n"
            "    elif kernels == 'fused':\n"
            "        json.dump({'launches': 4, 'error': 'cannot load libcupti.so.13'}, open(trace, 'w'))\n"
            + ("run['config'] = {'device_list': [{'ops': {'choices': {'c': {'tiles': tiles}}}}]}\n"
               if config else "")
            + "json.dump({'runs': [run]}, open(out, 'w'))\n")

    def speed_verdicts(self, fake):
        with tempfile.TemporaryDirectory() as tmp:
            summary, _ = run_stand_in(tmp, ["speed"], bench_runner=fake)
        return summary, [line for line in summary if line.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: "))]

    def test_speed_takes_each_configuration_alone_and_fails_without_runs_or_a_verdict(self):
        # cudnn fastest alone (0.3), its variants slower (0.4 without split-K, 0.5 with the gemm
        # rule): pooled with them, as a prefix match of file names did, cudnn read 0.4 and fused
        # took fused-narrow's tiles too.
        summary, goals = self.speed_verdicts(self.speed_stand_in({"cudnn": 0.3, "fused": 0.5, "mixed": 0.45}))
        self.assertEqual(len(goals), 2, summary)
        self.assertTrue(goals[0].startswith("gpu-check: PASS: the default kernels (cudnn) are the faster"), goals[0])
        self.assertIn("cudnn 0.3000 ms; fused 0.5000 ms; fused-narrow 0.5000 ms; mixed 0.4500 ms; "
                      "cudnn-nosplitk 0.4000 ms; cudnn-gemm 0.5000 ms; mixed-gemm 0.6500 ms", goals[0])
        self.assertTrue(goals[1].startswith("gpu-check: PASS: the own kernels' tile sets give the same bits"), goals[1])
        # Each configuration's step graph beside its time, where its results have a census.
        notes = [line for line in summary if line.startswith("gpu-check: NOTE: step graph")]
        cudnn = ("48 nodes, 41 kernels, 4 copies (160 B), 2 fills (1048576 B), 1 event nodes; "
                 "longest chain 47 work nodes (41 kernels, 4 copies, 2 fills)")
        # Where the step graph could not be made, that the steps ran eagerly and why.
        eager = "none, its steps ran eagerly: not used: capture failed: cuda: (simulated)"
        self.assertEqual(notes, ["gpu-check: NOTE: step graph (%s): %s" % kc for kc in (
            ("cudnn", cudnn), ("fused", eager), ("fused-narrow", eager),
            ("mixed", "unknown: cudaGraphGetEdges failed"), ("cudnn-nosplitk", cudnn),
            ("cudnn-gemm", cudnn), ("mixed-gemm", "unknown: cudaGraphGetEdges failed"))], summary)
        # The first repeat's step traces, where they were written.
        traces = [line for line in summary if line.startswith("gpu-check: NOTE: step trace")]
        self.assertEqual(traces, [
            "gpu-check: NOTE: step trace (cudnn): 520.0 us a launch end to end, 430.5 busy, 89.5 idle "
            "(longest gap 21.0 us, after kernel sgd_at_k, before copy 1024 B); most time (us a launch): "
            "fft2d_r2c 120.2, gemm 80.0",
            "gpu-check: NOTE: step trace (fused): none: cannot load libcupti.so.13",
            "gpu-check: NOTE: step trace (fused-narrow): none: cannot load libcupti.so.13"], summary)
        # No run ok: a failure that names them, not a pass by default.
        summary, goals = self.speed_verdicts(self.speed_stand_in({"cudnn": 0.3, "fused": 0.5, "mixed": 0.45}, status="failed"))
        self.assertTrue(goals[0].startswith("gpu-check: FAIL: the default kernels"), summary)
        self.assertIn("no ok run: cudnn, fused, fused-narrow, mixed, cudnn-nosplitk, cudnn-gemm, mixed-gemm", goals[0])
        # Results the checker cannot read (no config): it prints no verdict, and the part fails by name.
        summary, goals = self.speed_verdicts(self.speed_stand_in({"cudnn": 0.3, "fused": 0.5, "mixed": 0.45}, config=False))
        self.assertEqual(goals, ["gpu-check: FAIL: speed: the default kernels are the faster; the tile sets' bits "
                                 "(its checker printed no verdict)"], summary)

    def test_the_bench_part_reruns_failed_runs_per_rank_and_eight_devices_with_32_queues(self):
        # A stand-in bench_runner. Its two-device run fails (as a step mover that broke under
        # capture would) except in the --resume call, which records the PARALAB_STEP_MOVES it ran
        # with; its 8 devices compute unequally with the default hardware queues and equally with
        # CUDA_DEVICE_MAX_CONNECTIONS=32, as the A/B asks; its ring x8 and layer_split m8 x2 read
        # once per epoch are noted beside the same runs read per step. One gpu-check call for
        # both, and one where the caller set both variables: then neither runs.
        fake = (
            BENCH_RUNNER_HEAD +
            "wide = os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS') == '32'\n"
            "runs = [{'status': 'failed', 'label': 'data_parallel/ring x2 [virtual]',\n"
            "         'config': {'devices': 2}, 'reason': 'cuda: capture\\n invalidated', 'iterations': []}]\n"
            "if '--resume' in a:\n"
            "    runs[0] = dict(runs[0], status='ok', reason=None, resumed=a[a.index('--resume') + 1],\n"
            "                   moves=os.environ.get('PARALAB_STEP_MOVES', 'unset'))\n"
            "for algo in ('naive', 'ring', 'tree'):\n"
            "    comp = [0.7] * 7 + [0.7 if wide else 1.015]\n"
            "    runs.append({'status': 'ok', 'label': algo + ' x8', 'iterations': [],\n"
            "                 'config': {'strategy': 'data_parallel', 'devices': 8,\n"
            "                            'options': {'allreduce': algo, 'cuda_graphs': True}},\n"
            "                 'timing': {'median_iteration_ms': 1.0 if wide else 1.5,\n"
            "                            'per_device': [{'compute_ms': c} for c in comp]}})\n"
            # ring again with its launches read once per epoch: no per-device times.
            "runs.append({'status': 'ok', 'label': 'ring read once per epoch x8', 'iterations': [],\n"
            "             'config': {'strategy': 'data_parallel', 'devices': 8,\n"
            "                        'options': {'allreduce': 'ring', 'cuda_graphs': True, 'read_back': 'epoch'}},\n"
            "             'timing': {'median_iteration_ms': 0.8 if wide else 1.2, 'per_device': None}})\n"
            # layer_split m8 x2 both ways, and a channel_split read once alone (no pair: no note).
            "for rb, ms in (('step', 2.0), ('epoch', 1.5)):\n"
            "    runs.append({'status': 'ok', 'label': 'layer_split ' + rb, 'iterations': [],\n"
            "                 'config': {'strategy': 'layer_split', 'devices': 2,\n"
            "                            'options': {'microbatches': 8, 'cuda_graphs': True, 'read_back': rb}},\n"
            "                 'timing': {'median_iteration_ms': ms, 'per_device': None},\n"
            "                 'strategy_report': {'split': [2]}})\n"
            # ... and on 3 devices, where the two profiles chose different splits: not compared.
            "for rb, split in (('step', [1, 2]), ('epoch', [2, 3])):\n"
            "    runs.append({'status': 'ok', 'label': 'layer_split x3 ' + rb, 'iterations': [],\n"
            "                 'config': {'strategy': 'layer_split', 'devices': 3,\n"
            "                            'options': {'microbatches': 8, 'cuda_graphs': True, 'read_back': rb}},\n"
            "                 'timing': {'median_iteration_ms': 2.0, 'per_device': None},\n"
            "                 'strategy_report': {'split': split}})\n"
            "runs.append({'status': 'ok', 'label': 'channel_split read once', 'iterations': [],\n"
            "             'config': {'strategy': 'channel_split', 'devices': 4,\n"
            "                        'options': {'pairing': 'none', 'cuda_graphs': True, 'read_back': 'epoch'}},\n"
            "             'timing': {'median_iteration_ms': 1.0, 'per_device': None}})\n"
            "json.dump({'runs': runs}, open(out, 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            summary, files = run_stand_in(tmp, ["bench"], 200, bench_runner=fake)
            again = self.assert_resumed_per_rank(
                summary, "data_parallel/ring x2 [virtual]: cuda: capture invalidated")
            self.assertIn("gpu-check-per-rank.json", again)
            with open(os.path.join(files, "gpu-check-per-rank.json")) as f:
                rerun = json.load(f)["runs"][0]
            self.assertEqual(rerun["moves"], "per_rank")
            self.assertEqual(rerun["resumed"], os.path.join(files, "gpu-check.json"))
            ran = [line for line in summary if "with CUDA_DEVICE_MAX_CONNECTIONS=32: exit 0" in line]
            self.assertEqual(len(ran), 1, summary)
            self.assertIn("gpu-check: data_parallel/ring x8: step 1.500 ms with 8 hardware queues, "
                          "1.000 ms with 32; slowest device's compute over the fastest's 1.45 and 1.00",
                          summary)
            self.assertTrue(os.path.isfile(os.path.join(files, "gpu-check-connections32.json")))
            # The ring read per step against read once per epoch (which the A/B above leaves out).
            self.assertIn("gpu-check: NOTE: data_parallel/ring x8: step 1.500 ms read per step, 1.200 ms "
                          "read once per epoch (20.0 % less)", summary)
            self.assertIn("gpu-check: NOTE: layer_split m8 x2: step 2.000 ms read per step, 1.500 ms "
                          "read once per epoch (25.0 % less)", summary)
            self.assertEqual(len([line for line in summary if "read once per epoch (" in line]), 2, summary)
            self.assertIn("gpu-check: NOTE: layer_split m8 x3: read per step and read once per epoch not "
                          "compared: their profiles chose different splits ([1, 2] and [2, 3])", summary)
            # Asked per rank and with the queues set from the start: nothing to run again.
            os.environ.update(PARALAB_STEP_MOVES="per_rank", CUDA_DEVICE_MAX_CONNECTIONS="16")
            try:
                summary, files2 = run_stand_in(tmp, ["bench"], 200, name="2")
            finally:
                del os.environ["PARALAB_STEP_MOVES"], os.environ["CUDA_DEVICE_MAX_CONNECTIONS"]
            self.assertFalse(any("whole steps" in line or "per_rank" in line or
                                 "CUDA_DEVICE_MAX_CONNECTIONS" in line for line in summary), summary)
            self.assertEqual(sorted(f for f in os.listdir(files2) if f.startswith("gpu-check")),
                             ["gpu-check.json"])

    def test_the_model_sweep_passes_when_complete_and_names_what_it_misses(self):
        # A stand-in build: its allreduce_bench writes the sweep's rows (all of them and the GPU's
        # name, or without all-gather on 8 devices, with one failed row and no GPU named), as the
        # GPU run would.
        fake = (
            "#!/usr/bin/python3\n"
            "import json, os, sys\n"
            "out = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--benchmark_out=')][0]\n"
            "short = os.environ.get('FAKE_SWEEP_SHORT') == '1'\n"
            "sizes = [4 ** i for i in range(1, 16)] + [516272]\n"
            "rows = []\n"
            "for k in (2, 4, 8):\n"
            "    for a in ('allreduce/naive', 'allreduce/ring', 'allreduce/tree', 'allgather/ring',\n"
            "              'reduce_scatter/ring') + (('memcpy',) if k == 2 else ()):\n"
            "        if short and a == 'allgather/ring' and k == 8:\n"
            "            continue\n"
            "        for b in sizes:\n"
            "            r = {'name': f'{a}/devices:{k}/bytes:{b}/iterations:1/manual_time',\n"
            "                 'real_time': 1.0 + b / 1e6, 'time_unit': 'us'}\n"
            "            if short and a == 'allreduce/tree' and k == 4 and b == 1024:\n"
            "                r = dict(r, error_occurred=True, error_message='tree broke')\n"
            "            rows.append(r)\n"
            "context = {} if short else {'paralab_gpu_model': 'NVIDIA H100 80GB HBM3'}\n"
            "json.dump({'context': context, 'benchmarks': rows}, open(out, 'w'))\n")
        with tempfile.TemporaryDirectory() as tmp:
            build = stand_in_build(tmp, allreduce_bench=fake)
            # nvidia-smi names the GPU: the directory its files go to is said at the start.
            bin_dir = os.path.join(tmp, "bin")
            os.mkdir(bin_dir)
            with open(os.path.join(bin_dir, "nvidia-smi"), "w") as f:
                f.write("#!/bin/sh\necho 'name, driver_version, memory.total [MiB]'\n"
                        "echo 'NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB'\n")
            os.chmod(os.path.join(bin_dir, "nvidia-smi"), 0o755)
            verdicts = []
            env_path = os.environ["PATH"]
            for short in ("0", "1"):
                out, files = os.path.join(tmp, "out" + short), os.path.join(tmp, "files" + short)
                os.environ["FAKE_SWEEP_SHORT"] = short
                os.environ["PATH"] = bin_dir + os.pathsep + env_path
                try:
                    gpu_check(["--budget", "200", "sweep"], out, files, build=build)
                finally:
                    del os.environ["FAKE_SWEEP_SHORT"]
                    os.environ["PATH"] = env_path
                summary = lines_of(os.path.join(out, "summary.txt"))
                self.assertEqual(len([line for line in summary if re.match(
                    r"gpu-check: results: commit this call's files under "
                    r"results/reference/h100-\d{4}-\d\d-\d\d/ \(", line)]), 1, summary)
                found = [line for line in summary if "the model's collective sweep" in line
                         and line.startswith(("gpu-check: PASS: ", "gpu-check: FAIL: "))]
                self.assertEqual(len(found), 1, summary)
                verdicts.append(found[0])
                self.assertTrue(os.path.isfile(os.path.join(files, "allreduce-cuda-sweep.json")))
            self.assertTrue(verdicts[0].startswith("gpu-check: PASS: "), verdicts[0])
            self.assertIn("(exit 0, 256 rows; on an NVIDIA H100 80GB HBM3: commit it with this call's "
                          "gpu-check.json under results/reference/h100-<date>/)", verdicts[0])
            self.assertTrue(verdicts[1].startswith("gpu-check: FAIL: "), verdicts[1])
            self.assertIn("missing: allreduce/tree x4 (15/16 sizes), allgather/ring x8 (0/16 sizes)",
                          verdicts[1])
            self.assertIn("1 failed, e.g. allreduce/tree/devices:4/bytes:1024", verdicts[1])
            self.assertIn("the GPU it ran on is not recorded as NVIDIA's (context paralab_gpu_model '')",
                          verdicts[1])


def main():
    global SCRIPT, BUILD
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    args, rest = ap.parse_known_args()
    SCRIPT = os.path.join(args.source_dir, "scripts", "gpu-check.sh")
    BUILD = os.path.abspath(args.build_dir)
    unittest_parts.main(__name__, rest, verbosity=2)


if __name__ == "__main__":
    main()
