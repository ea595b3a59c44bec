"""Validation on one self-consistent CPU measurement session alone.

A session directory (results/reference/cpu-2core-xeon/session-*/) holds rounds measured back to
back on a quiet machine, interleaved so that every round sees the same conditions:

    profile-<i>.json     bench_runner experiments/model-profile.json       (compute fit)
    concurrent-<i>.json  bench_runner experiments/model-profile-concurrent.json, beside a second
                         process computing (two devices at once; absent in older sessions)
    allreduce-<i>.json   allreduce_bench --devices=2, the fitted sizes     (communication fit)
    strategies-<i>.json  bench_runner experiments/model-session.json       (predicted)

Hold-out as in the issue: compute is fitted on the session's profiles only (every round's single
steps and layer profiles), communication on its allreduce_bench rows (each row predicted by a fit
without any round's row of that algorithm and size), and every strategy run, `single` included, is
predicted from those fits: no run of the strategies files sets a level or enters a fit. The noise
floor is the session's own: each repeated configuration's samples (one per round) against the
median of its other samples (model/noise.py).
"""
import argparse
import functools
import glob
import os
import statistics
import sys

from . import calibrate, noise


def files(directory, stem):
    return sorted(glob.glob(os.path.join(directory, stem + "-*.json")))


def validate(directory):
    """(summary per sample, summary per configuration, noise floor, points, comp, link)."""
    profiles = files(directory, "profile")
    benches = files(directory, "allreduce")
    strategies = files(directory, "strategies")
    concurrent = files(directory, "concurrent")  # sessions from before they were measured have none
    comp = calibrate.cpu_compute(profiles, concurrent)
    samples = {}
    for f in benches:
        for key, ms in calibrate.bench_samples(f).items():
            samples.setdefault(key, []).extend(ms)
    fit_rows = [(op, n, k, statistics.median(v)) for (op, n, k), v in sorted(samples.items())]
    rel = os.path.relpath(directory, calibrate.ROOT)
    if rel.startswith(".."):
        rel = os.path.abspath(directory)
    threshold = calibrate.memcpy_threshold(benches)
    fit = functools.partial(calibrate.cpu_link_fit, non_temporal=threshold)
    link = fit(fit_rows, note="fitted on %s/allreduce-*.json (%d rounds)%s" % (
        rel, len(benches), "; memcpy's non-temporal threshold %d B" % threshold if threshold else ""))
    points, not_predicted = [], []
    for f in strategies:
        points += calibrate.validate_runs("cpu", f, comp, link, own_level=False, not_predicted=not_predicted)
    for f in benches:  # one sample per round: the median of that round's repetitions
        points += calibrate.validate_bench("cpu", calibrate.bench_rows(f), fit_rows,
                                           os.path.relpath(f, calibrate.ROOT), fit=fit,
                                           not_predicted=not_predicted)
    configs = noise.per_config(points)
    return {"directory": rel, "rounds": {"profile": len(profiles), "allreduce_bench": len(benches),
                                         "strategies": len(strategies), "concurrent": len(concurrent)},
            "summary": calibrate.summarize(points), "summary_per_config": noise.summarize_configs(configs),
            "noise_floor": noise.floor(points), "misses": noise.misses(points, configs),
            "configs": configs, "points": points, "not_predicted": not_predicted,
            "parameters": {"cpu_compute": comp.to_json(), "cpu_link": link.to_json()}}


def check(directory):
    """None when directory holds a session's three kinds of files, else one line saying what lacks."""
    if not os.path.isdir(directory):
        return "%s: %s" % (directory, "not a directory" if os.path.exists(directory)
                           else "no such directory")
    missing = [stem + "-<i>.json" for stem in ("profile", "allreduce", "strategies") if not files(directory, stem)]
    return "%s: no %s" % (directory, ", no ".join(missing)) if missing else None


def first(root=calibrate.CPU_REF):
    """The clean session the report describes in full: the oldest complete session directory
    under root (its written reading is about that one), or None."""
    dirs = sorted(d for d in glob.glob(os.path.join(root, "session-*")) if not check(d))
    return dirs[0] if dirs else None


def others(reference=os.path.dirname(calibrate.CPU_REF), skip=None):
    """Every complete session under results/reference/ but skip (default: first()):
    scripts/model-session.sh writes them to results/reference/<machine>/session-<date>/. Machines
    in name order, each machine's sessions oldest first: a machine measured on several days shows
    each day's state, the clean session's machine included."""
    skip = first() if skip is None else skip
    out = []
    for machine in sorted(glob.glob(os.path.join(reference, "cpu-*"))):
        out += sorted(d for d in glob.glob(os.path.join(machine, "session-*"))
                      if not check(d) and (not skip or os.path.abspath(d) != os.path.abspath(skip)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="Validate the performance model on one measuring session alone "
                                             "(scripts/model-session.sh writes one).")
    ap.add_argument("directory", help="a session directory: profile-<i>.json, allreduce-<i>.json, strategies-<i>.json")
    ap.add_argument("--json", help="also write the whole validation (points, fits) to this file")
    args = ap.parse_args(argv)
    problem = check(args.directory)
    if not problem:  # each file readable and of its kind: the line names the one that is not
        for stem in ("profile", "allreduce", "strategies", "concurrent"):
            for path in files(args.directory, stem):
                why = calibrate.results_file_problem(
                    path, "allreduce_bench" if stem == "allreduce" else "bench_runner")
                if why:
                    problem = "%s: %s" % (path, why)
                    break
            if problem:
                break
    if problem:
        print("model.session: " + problem, file=sys.stderr)
        return 1
    try:
        s = validate(args.directory)
    except calibrate.INPUT_ERRORS as e:
        print("model.session: %s: not a usable session (%s: %s)" % (args.directory, type(e).__name__, e),
              file=sys.stderr)
        return 1
    print("model.session: %s, %d round(s)" % (s["directory"], s["rounds"]["strategies"]))
    both = s["parameters"]["cpu_compute"]["concurrent_step_factor"].get(2)
    print("  two devices computing at once: " + ("x%.3f per device (from %d concurrent-<i>.json)" % (
        both, s["rounds"]["concurrent"]) if both else "not measured (no concurrent-<i>.json): x1"))
    for k, v in s["summary"].items():
        f = s["noise_floor"].get(k)
        print("  %-20s %3d held-out samples, median |error| %5.1f %%, max %5.1f %%, %s%s" % (
            k, v["points"], 100 * v["median_abs_error"], 100 * v["max_abs_error"],
            "goal met" if v["meets_goal"] else "goal NOT met (median <= 8 %, max <= 15 %)",
            "; rounds' own spread median %.1f %%, max %.1f %%" % (
                100 * f["median_abs_deviation"], 100 * f["max_abs_deviation"]) if f else ""))
    for k, v in s["summary_per_config"].items():
        print("  %-20s %3d configurations (medians of the rounds), median |error| %5.1f %%, max %5.1f %%" % (
            k, v["configs"], 100 * v["median_abs_error"], 100 * v["max_abs_error"]))
    if s["not_predicted"]:
        print("  not predicted (%d): %s" % (len(s["not_predicted"]), "; ".join(s["not_predicted"])))
    worst = sorted(s["configs"], key=lambda c: -abs(c["relative_error"]))[:5]
    print("  worst configurations: " + "; ".join("%s %+.0f %%" % (c["label"], 100 * c["relative_error"])
                                                 for c in worst))
    if args.json:
        import json
        import tempfile
        # Beside it, then renamed: a failure leaves neither a cut file nor the temporary one.
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.json)),
                                       prefix="." + os.path.basename(args.json) + ".")
        except OSError as e:
            print("model.session: --json %s: cannot write beside it (%s)" % (args.json, e.strerror),
                  file=sys.stderr)
            return 1
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(s, f, indent=1, default=float)
            os.replace(tmp, args.json)
        except OSError as e:
            os.unlink(tmp)
            print("model.session: --json %s: %s" % (args.json, e.strerror), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
