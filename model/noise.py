"""Run-to-run noise in the committed measurements, and the model judged against medians of repeats.

A point measured once can be off by its own noise; no model can be closer to it than the
measurement is to itself. Two numbers per device kind come from the committed data alone:

  noise floor   every configuration measured more than once (the same run config in several
                results files, or the same allreduce_bench row in several sweeps or repetitions):
                each sample against the median of the *other* samples, |x_i / median(x_j, j != i) - 1|.
                That is the error a model which predicted the other measurements exactly would
                make on this one. Its median and maximum are the floor for a per-sample error.
  per config    each distinct configuration counted once: the model's prediction (the median of
                its held-out predictions for the samples) against the median of the samples, with
                the samples' spread (min and max relative to that median) beside it.
"""
import statistics

import numpy as np


def group_key(p):
    """Points of one device kind and group (training / allreduce_bench) with the same config."""
    return (p["kind"], p["group"], p["config_key"])


def groups(points):
    """{key: [points]} over the held-out points."""
    out = {}
    for p in points:
        if p["held_out"]:
            out.setdefault(group_key(p), []).append(p)
    return out


def floor(points):
    """Per (kind, group): the noise floor over configurations measured at least twice."""
    per = {}
    for (kind, group, _), ps in groups(points).items():
        xs = [p["measured_ms"] for p in ps]
        if len(xs) < 2:
            continue
        for i, x in enumerate(xs):
            others = xs[:i] + xs[i + 1:]
            per.setdefault((kind, group), []).append(abs(x / statistics.median(others) - 1))
    out = {}
    for (kind, group), e in sorted(per.items()):
        e = np.array(e)
        out["%s/%s" % (kind, group)] = {
            "samples": int(e.size), "configs": sum(1 for (k, g, _), ps in groups(points).items()
                                                   if k == kind and g == group and len(ps) > 1),
            "median_abs_deviation": float(np.median(e)), "p90_abs_deviation": float(np.percentile(e, 90)),
            "max_abs_deviation": float(e.max()), "above_15_percent": int((e > 0.15).sum())}
    return out


def per_config(points):
    """One row per distinct configuration: measured median, spread, predicted, error."""
    rows = []
    for (kind, group, key), ps in sorted(groups(points).items()):
        xs = [p["measured_ms"] for p in ps]
        med = statistics.median(xs)
        pred = statistics.median([p["predicted_ms"] for p in ps])
        rows.append({"kind": kind, "group": group, "config": key, "label": ps[0]["label"],
                     "samples": len(xs), "sources": sorted({p["source"].split("/")[-1] for p in ps}),
                     "measured_median_ms": med, "spread_low": min(xs) / med - 1, "spread_high": max(xs) / med - 1,
                     "predicted_ms": pred, "relative_error": pred / med - 1})
    return rows


def summarize_configs(rows):
    out = {}
    for kind, group in sorted({(r["kind"], r["group"]) for r in rows}):
        sel = [r for r in rows if r["kind"] == kind and r["group"] == group]
        e = np.abs([r["relative_error"] for r in sel])
        out["%s/%s" % (kind, group)] = {
            "configs": len(sel), "repeated_configs": sum(1 for r in sel if r["samples"] > 1),
            "median_abs_error": float(np.median(e)), "max_abs_error": float(e.max()),
            "within_15_percent": int((e <= 0.15).sum()),
            "meets_goal": bool(np.median(e) <= 0.08 and e.max() <= 0.15)}
    return out


def misses(points, configs, bound=0.15):
    """Per (kind, group): are the points the model misses by more than `bound` ones whose own
    measurement disagrees with its repeats? Counts the held-out points off by more than bound, of
    those the samples more than bound from the median of their other samples, and the same per
    configuration: configs whose median is off by more than bound, of those the ones whose samples
    all lie within bound of that median (a structural miss, not noise)."""
    out = {}
    for (kind, group, _), ps in groups(points).items():
        o = out.setdefault("%s/%s" % (kind, group), {"points_off": 0, "points_off_own_sample_off": 0,
                                                     "configs_off": 0, "configs_off_samples_agree": 0})
        xs = [p["measured_ms"] for p in ps]
        for i, p in enumerate(ps):
            if abs(p["predicted_ms"] / p["measured_ms"] - 1) > bound:
                o["points_off"] += 1
                others = xs[:i] + xs[i + 1:]
                if others and abs(xs[i] / statistics.median(others) - 1) > bound:
                    o["points_off_own_sample_off"] += 1
    for r in configs:
        o = out["%s/%s" % (r["kind"], r["group"])]
        if abs(r["relative_error"]) > bound:
            o["configs_off"] += 1
            if max(-r["spread_low"], r["spread_high"]) <= bound:
                o["configs_off_samples_agree"] += 1
    return dict(sorted(out.items()))
