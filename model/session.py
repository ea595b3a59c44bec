"""Validation on one self-consistent CPU measurement session alone.

A session directory (results/reference/cpu-2core-xeon/session-*/) holds rounds measured back to
back on a quiet machine, interleaved so that every round sees the same conditions:

    profile-<i>.json     bench_runner experiments/model-profile.json       (compute fit)
    allreduce-<i>.json   allreduce_bench --devices=2, the fitted sizes     (communication fit)
    strategies-<i>.json  bench_runner experiments/model-session.json       (predicted)

Hold-out as in the issue: compute is fitted on the session's profiles only (every round's single
steps and layer profiles), communication on its allreduce_bench rows (each row predicted by a fit
without any round's row of that algorithm and size), and every strategy run, `single` included, is
predicted from those fits: no run of the strategies files sets a level or enters a fit. The noise
floor is the session's own: each repeated configuration's samples (one per round) against the
median of its other samples (model/noise.py).
"""
import glob
import os
import statistics

from . import calibrate, noise


def files(directory, stem):
    return sorted(glob.glob(os.path.join(directory, stem + "-*.json")))


def validate(directory):
    """(summary per sample, summary per configuration, noise floor, points, comp, link)."""
    profiles = files(directory, "profile")
    benches = files(directory, "allreduce")
    strategies = files(directory, "strategies")
    comp = calibrate.cpu_compute(profiles)
    samples = {}
    for f in benches:
        for key, ms in calibrate.bench_samples(f).items():
            samples.setdefault(key, []).extend(ms)
    fit_rows = [(op, n, k, statistics.median(v)) for (op, n, k), v in sorted(samples.items())]
    rel = os.path.relpath(directory, calibrate.ROOT)
    link = calibrate.cpu_link_fit(fit_rows, note="fitted on %s/allreduce-*.json (%d rounds)" % (rel, len(benches)))
    points = []
    for f in strategies:
        points += calibrate.validate_runs("cpu", f, comp, link, own_level=False)
    for f in benches:  # one sample per round: the median of that round's repetitions
        points += calibrate.validate_bench("cpu", calibrate.bench_rows(f), fit_rows,
                                           os.path.relpath(f, calibrate.ROOT), fit=calibrate.cpu_link_fit)
    configs = noise.per_config(points)
    return {"directory": rel, "rounds": {"profile": len(profiles), "allreduce_bench": len(benches),
                                         "strategies": len(strategies)},
            "summary": calibrate.summarize(points), "summary_per_config": noise.summarize_configs(configs),
            "noise_floor": noise.floor(points), "misses": noise.misses(points, configs),
            "configs": configs, "points": points,
            "parameters": {"cpu_compute": comp.to_json(), "cpu_link": link.to_json()}}


def latest(root=calibrate.CPU_REF):
    """The newest session directory, or None."""
    dirs = sorted(d for d in glob.glob(os.path.join(root, "session-*")) if files(d, "strategies"))
    return dirs[-1] if dirs else None
