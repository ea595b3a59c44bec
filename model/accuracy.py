"""Accuracy versus global batch (issue 16, item 4): which learning-rate rule keeps test accuracy.

Reads the results files of experiments/lr-batch.json, lr-batch-seeds.json and lr-batch-warmup.json
(report/data/lr-batch-10ep*.json), takes each run once by (global batch, rule, seed), and
aggregates the final test accuracy over seeds per (global batch, rule): mean, min, max, standard
deviation. The baseline is batch 256 under rule `none`, as its mean over seeds. A (batch, rule) is
"within 1 point" when its mean is at least the baseline's mean minus 0.01; the answer is the
largest global batch where any rule is, and the rules there.

    from model import accuracy
    acc = accuracy.load(["report/data/lr-batch-10ep.json", "report/data/lr-batch-10ep-seed1.json"])
    print(accuracy.answer_text(acc))
"""
import json
import os
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POINT = 0.01          # one point of test accuracy
BASE_BATCH = 256
BASE_RULE = "none"
EQUIVALENCE_TEST = "DataParallel.TracksSingleDeviceFor20Steps"


def rule_of(label):
    """'B1024 lr-sqrt+warmup' -> 'sqrt+warmup' (the descriptors' label convention)."""
    return label.split("lr-", 1)[1] if "lr-" in label else BASE_RULE


def _spec_key(spec):
    return json.dumps(spec, sort_keys=True)


def runs_of(paths):
    """Every run of the files, one row each, then each (global batch, rule, seed) once.

    A run found in several files with the same run_spec (seed 0 at batch <= 1024 is in both
    lr-batch.json's and, were it rerun, lr-batch-seeds.json's results) is taken once, from the
    first file; its other copies are counted in `duplicates` and must agree on the final test
    accuracy (runs repeat to the bit on one machine) or they are listed in `disagreements`.
    Two different run_specs for one key (another lr, epochs or warm-up) are an error.
    """
    rows, seen = [], {}
    duplicates, disagreements, epochs, files = 0, [], set(), []
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        src = os.path.relpath(path, ROOT)
        files.append({"path": src, "state": d.get("state"), "runs": len(d["runs"]),
                      "description": d["descriptor"].get("name")})
        for r in d["runs"]:
            c = r["config"]
            ep = r.get("epochs") or []
            row = {"label": r["label"], "global_batch": c["global_batch"], "rule": rule_of(r["label"]),
                   "seed": c["seed"], "lr": c.get("lr_scaled", c["lr"]), "status": r["status"],
                   "strategy": c["strategy"], "devices": c["devices"], "epochs": len(ep),
                   "epochs_asked": c["epochs"], "sgd_steps": sum(e["iterations"] for e in ep),
                   "final_test_acc": ep[-1]["test_acc"] if ep else None,
                   "best_test_acc": max(e["test_acc"] for e in ep) if ep else None,
                   "final_train_loss": ep[-1]["train_loss"] if ep else None, "source": src}
            if row["status"] == "ok" and row["epochs"] != row["epochs_asked"]:
                raise ValueError("%s: %s is ok with %d of %d epochs" % (src, row["label"], row["epochs"], row["epochs_asked"]))
            key = (row["global_batch"], row["rule"], row["seed"])
            if key in seen:
                first, spec = seen[key]
                if spec != _spec_key(r["run_spec"]):
                    raise ValueError("%s: %s seed %d differs from the run in %s (run_spec); one per batch, rule and seed"
                                     % (src, row["label"], row["seed"], first["source"]))
                duplicates += 1
                if first["final_test_acc"] != row["final_test_acc"]:
                    disagreements.append({"label": row["label"], "seed": row["seed"],
                                          first["source"]: first["final_test_acc"], src: row["final_test_acc"]})
                continue
            seen[key] = (row, _spec_key(r["run_spec"]))
            epochs.add(c["epochs"])
            rows.append(row)
    if len(epochs) > 1:
        raise ValueError("accuracy files mix %s epochs: %s" % (sorted(epochs), ", ".join(p["path"] for p in files)))
    return rows, {"files": files, "duplicates": duplicates, "disagreements": disagreements,
                  "epochs": epochs.pop() if epochs else None}


def aggregate(rows):
    """Per (global batch, rule): the ok runs' final test accuracy over seeds."""
    groups = {}
    for r in rows:
        groups.setdefault((r["global_batch"], r["rule"]), []).append(r)
    out = []
    for (b, rule), rs in sorted(groups.items()):
        ok = sorted((r for r in rs if r["status"] == "ok"), key=lambda r: r["seed"])
        accs = [r["final_test_acc"] for r in ok]
        g = {"global_batch": b, "rule": rule, "lr": rs[0]["lr"], "sgd_steps": rs[0]["sgd_steps"],
             "runs": len(rs), "seeds": [r["seed"] for r in ok], "n": len(ok),
             "test_acc_by_seed": {str(r["seed"]): r["final_test_acc"] for r in ok},
             "mean": statistics.fmean(accs) if accs else None,
             "min": min(accs) if accs else None, "max": max(accs) if accs else None,
             "std": statistics.stdev(accs) if len(accs) > 1 else None,
             "mean_final_train_loss": statistics.fmean(r["final_train_loss"] for r in ok) if ok else None}
        out.append(g)
    return out


def within(g, base_mean):
    return g["mean"] is not None and g["mean"] >= base_mean - POINT - 1e-12


def decide(groups):
    """The baseline and the answer, from the per-(batch, rule) means."""
    base = next((g for g in groups if g["global_batch"] == BASE_BATCH and g["rule"] == BASE_RULE and g["n"]), None)
    if base is None:
        return {}
    ref = base["mean"]
    for g in groups:
        g["delta_vs_256"] = g["mean"] - ref if g["mean"] is not None else None
        g["within_1_point"] = within(g, ref)
        # against batch 256 of the same seed (same initial weights): the seeds both have
        paired = [v - base["test_acc_by_seed"][s] for s, v in g["test_acc_by_seed"].items()
                  if s in base["test_acc_by_seed"]]
        g["paired_delta_min"] = min(paired) if paired else None
        g["paired_delta_max"] = max(paired) if paired else None
    larger = [g for g in groups if g["global_batch"] > BASE_BATCH and g["mean"] is not None]
    ok = [g for g in larger if g["within_1_point"]]
    largest = max((g["global_batch"] for g in ok), default=None)
    per_rule = {}
    for rule in sorted({g["rule"] for g in larger}):
        mine = sorted((g for g in larger if g["rule"] == rule), key=lambda g: g["global_batch"])
        upto = None  # the largest batch up to which every measured batch of this rule stayed within
        for g in mine:
            if not g["within_1_point"]:
                break
            upto = g["global_batch"]
        per_rule[rule] = {"within_1_point_at": [g["global_batch"] for g in mine if g["within_1_point"]],
                          "holds_up_to": upto}
    closest, tied = {}, {}
    for g in larger:
        b = g["global_batch"]
        if b not in closest or g["mean"] > closest[b]["mean"]:
            closest[b], tied[b] = g, [g["rule"]]
        elif g["mean"] == closest[b]["mean"]:
            tied[b].append(g["rule"])
    return {"baseline": {k: base[k] for k in ("mean", "min", "max", "std", "n", "seeds")},
            "reference_final_test_acc": ref, "largest_batch_within_1_point": largest,
            "rules_at_largest": sorted(g["rule"] for g in ok if g["global_batch"] == largest),
            "per_rule": per_rule,
            "closest_per_batch": {str(b): {"rule": g["rule"], "tied": sorted(tied[b]), "mean": g["mean"],
                                           "min": g["min"], "max": g["max"],
                                           "n": g["n"], "delta_vs_256": g["delta_vs_256"]}
                                  for b, g in sorted(closest.items())}}


def load(paths):
    """The accuracy sweep's answer from its results files (each must exist: model.report checks
    them first), or None without any."""
    paths = [p for p in (paths or []) if p]
    if not paths:
        return None
    rows, meta = runs_of(paths)
    groups = aggregate(rows)
    answer = decide(groups)
    return {"sources": [f["path"] for f in meta["files"]], "files": meta["files"], "epochs": meta["epochs"],
            "duplicates": meta["duplicates"], "disagreements": meta["disagreements"],
            "runs": rows, "groups": groups, "answer": answer}


def _spread(g):
    if g["n"] == 0:
        return "—"
    if g["n"] == 1:
        return "%.4f (1 seed)" % g["mean"]
    return "%.4f (%.4f..%.4f)" % (g["mean"], g["min"], g["max"])


def _paired(g):
    if g.get("paired_delta_min") is None or g["global_batch"] <= BASE_BATCH:
        return "—"
    if g["n"] == 1:
        return "%+.2f" % (100 * g["paired_delta_min"])
    return "%+.2f..%+.2f" % (100 * g["paired_delta_min"], 100 * g["paired_delta_max"])


def answer_text(acc):
    a = acc["answer"]
    if not a:
        return "no batch-256 run under rule `none` finished."
    base = a["baseline"]
    parts = ["Batch 256 (lr 0.2, rule none) ends at %s, seed%s %s; within 1 point means a mean of at "
             "least %.4f." % (_spread(base), "s" if base["n"] > 1 else "", ", ".join(map(str, base["seeds"])),
                              base["mean"] - POINT)]
    largest = a["largest_batch_within_1_point"]
    by_key = {(g["global_batch"], g["rule"]): g for g in acc["groups"]}
    if largest is not None:
        rules = a["rules_at_largest"]
        parts.append("**The largest global batch where a rule keeps %d-epoch test accuracy within 1 point of "
                     "batch 256: %d, with %s** (%s)." % (
                         acc["epochs"], largest, ", ".join("`%s`" % r for r in rules),
                         "; ".join("%s %s, %+.2f points" % (r, _spread(by_key[(largest, r)]),
                                                            100 * by_key[(largest, r)]["delta_vs_256"]) for r in rules)))
        holds = [r for r, v in a["per_rule"].items() if v["holds_up_to"] is not None]
        if holds:
            parts.append("Within 1 point at every measured batch up to: " + ", ".join(
                "`%s` %d" % (r, a["per_rule"][r]["holds_up_to"]) for r in holds) + ".")
    else:
        parts.append("**No rule keeps %d-epoch test accuracy within 1 point of batch 256 at any larger "
                     "batch.**" % acc["epochs"])
    beyond = {int(b): c for b, c in a["closest_per_batch"].items() if largest is None or int(b) > largest}
    if beyond:
        parts.append("The best rule %s:" % ("at each batch" if largest is None else "beyond it") + " " + "; ".join(
            "%d: %s %s, %+.2f points (%s by %.2f)" % (
                b, "`%s`" % c["rule"] if len(c["tied"]) == 1 else "%s alike" % ", ".join("`%s`" % r for r in c["tied"]),
                _spread(c), round(100 * c["delta_vs_256"], 2),
                "misses" if c["delta_vs_256"] < -POINT else "within", abs(round(100 * c["delta_vs_256"], 2) + 100 * POINT))
            for b, c in sorted(beyond.items())) + ".")
    base_by_seed = next(g for g in acc["groups"] if g["global_batch"] == BASE_BATCH and g["rule"] == BASE_RULE)[
        "test_acc_by_seed"]
    paired = [(g["global_batch"], g["rule"], s, v - base_by_seed[s]) for g in acc["groups"]
              if g["global_batch"] > BASE_BATCH for s, v in g["test_acc_by_seed"].items() if s in base_by_seed]
    hits = [p for p in paired if p[3] >= -POINT - 1e-12]
    if paired:
        parts.append("Seed by seed (against batch 256 with the same seed), %d of %d runs above batch 256 are "
                     "within 1 point%s." % (len(hits), len(paired), ": " + ", ".join(
                         "%d `%s` seed %s %+.2f" % (b, r, s, 100 * d) for b, r, s, d in hits) if hits else ""))
    if base["n"] > 1:
        parts.append("Batch 256's own seeds span %.2f points (max - min) and the other groups' seeds up to "
                     "%.2f (excluding runs stuck at chance, 0.1): a difference of about 1 point between "
                     "means over %d seeds is within that noise." % (
                         100 * (base["max"] - base["min"]),
                         100 * max((g["max"] - g["min"] for g in acc["groups"] if g["n"] > 1 and g["min"] > 0.2),
                                   default=0.0), base["n"]))
    return " ".join(parts)


EQUIVALENCE_TEXT = (
    "Data parallelism on k devices at per-device batch b computes the same SGD step as one device "
    "at batch k·b: `%s` in [tests/test_data_parallel.cpp](../tests/test_data_parallel.cpp) "
    "(through `tracks_single` in tests/strategy_harness.h) takes 20 steps of data_parallel at global "
    "batch 24 and checks each against one single-device step on the whole batch from the same "
    "parameters: the loss to relative 1e-5, every gradient to 1e-4 of its tensor's largest element, "
    "the updated parameters to 1e-5, and the evaluation at the end, for naive, ring and tree "
    "allreduce on k = 2, 3, 4. The warm-up runs below use tree on 2-32 devices (the same code, "
    "beyond the tested k); their minibatches are the single device's, since the shuffle depends on "
    "the seed only, never on the device count (core/rng.h). That is why one CPU core can answer "
    "the question for any number of devices: bench_runner applies `lr_scaling` and its warm-up only "
    "to a weak-scaling growth of the batch, so the `+warmup` runs (Goyal et al. 2017: the rate "
    "rises linearly from 0.2 to the rule's rate over the first epoch) are data_parallel runs on "
    "B/256 time-shared CPU devices of 256 examples each; the other runs set lr directly on one "
    "device: `linear` 0.2·B/256, `sqrt` 0.2·√(B/256)." % EQUIVALENCE_TEST)


def markdown(acc, figures):
    """Section 4's body: the sources, the equivalence, the table over seeds, the answer, the figure."""
    L = []
    w = L.append
    w("%d epochs, LeNet on Fashion-MNIST, threads_per_device 1, from %s%s." % (
        acc["epochs"], ", ".join("`%s` (%d runs%s)" % (f["path"], f["runs"], "" if f["state"] == "complete"
                                                          else ", " + str(f["state"])) for f in acc["files"]),
        "; %d run(s) found in two files taken once" % acc["duplicates"] if acc["duplicates"] else ""))
    if acc["disagreements"]:
        w("")
        w("**Copies of one run disagree** (they should repeat to the bit): %s" % json.dumps(acc["disagreements"]))
    w("")
    w(EQUIVALENCE_TEXT)
    w("")
    w("Final test accuracy after the last epoch, per global batch and rule over the seeds run (mean, "
      "min..max, sample standard deviation); \"vs 256\" is the mean minus batch 256's mean; within "
      "1 point means that difference is at least -1.00. \"Seed by seed\" is the range of each seed's "
      "accuracy minus batch 256's with the same seed (the same initial weights).")
    w("")
    w("| global batch | rule | lr | SGD steps | seeds | test acc by seed | mean | min..max | std | vs 256 (points) | within 1 point | vs 256 seed by seed (points) | mean final train loss |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for g in acc["groups"]:
        w("| %d | %s | %.4g | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            g["global_batch"], g["rule"], g["lr"], g["sgd_steps"],
            ",".join(map(str, g["seeds"])) + ("" if g["runs"] == g["n"] else " (%d not ok)" % (g["runs"] - g["n"])),
            " / ".join("%.4f" % v for v in g["test_acc_by_seed"].values()),
            "%.4f" % g["mean"] if g["mean"] is not None else "—",
            "%.4f..%.4f" % (g["min"], g["max"]) if g["n"] > 1 else "—",
            "%.4f" % g["std"] if g["std"] is not None else "—",
            "%+.2f" % (100 * g["delta_vs_256"]) if g.get("delta_vs_256") is not None else "—",
            ("yes" if g["within_1_point"] else "no") if g.get("delta_vs_256") is not None else "—",
            _paired(g),
            "%.4f" % g["mean_final_train_loss"] if g["mean_final_train_loss"] is not None else "—"))
    w("")
    w("**Answer**: " + answer_text(acc))
    w("")
    w("Why: with the book's initial weights N(0, 0.01²) the loss sits at ln 10 ≈ 2.3026 for roughly "
      "the first 300 SGD steps at batch 256 and lr 0.2 before it falls (README, the book's run). A "
      "fixed number of epochs gives 256/B as many steps at batch B (column SGD steps), so large "
      "batches end on or near that plateau (final train loss ≈ 2.30), and a rate scaled up from the "
      "first step can keep the run there for good (compare each rule's final train loss with and "
      "without warm-up). The answer is specific to this initialisation, lr 0.2 at batch 256 and %d "
      "epoch%s.%s" % (acc["epochs"], "" if acc["epochs"] == 1 else "s", _single_seed_note(acc)))
    if "accuracy_vs_batch.png" in figures:
        w("")
        w("![accuracy vs batch](accuracy_vs_batch.png)")
    return L


def _single_seed_note(acc):
    by_batch = {}
    for g in acc["groups"]:
        by_batch[g["global_batch"]] = max(by_batch.get(g["global_batch"], 0), g["n"])
    one = sorted(b for b, n in by_batch.items() if n == 1)
    if not one or len(one) == len(by_batch):
        return ""
    seeds = sorted({s for g in acc["groups"] if g["global_batch"] in one for s in g["seeds"]})
    return (" Batches %s were run with seed %s only: the seeds were spent where a rule could still "
            "come within 1 point." % (", ".join(map(str, one)), ", ".join(map(str, seeds))))


def plot(plt, acc):
    """Mean final test accuracy per rule against global batch, min..max over seeds as bars; the right
    panel zooms on the batches repeated over seeds."""
    groups = acc["groups"]
    rules = sorted({g["rule"] for g in groups if g["global_batch"] > BASE_BATCH})
    base = next((g for g in groups if g["global_batch"] == BASE_BATCH and g["rule"] == BASE_RULE and g["n"]), None)
    repeated = [g["global_batch"] for g in groups if g["n"] > 1]
    zoom_to = max(repeated, default=1024)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, zoom in zip(axes, (False, True)):
        for i, rule in enumerate(rules):
            sel = sorted((g for g in groups if g["rule"] == rule and g["n"] and g["global_batch"] > BASE_BATCH
                          and (not zoom or g["global_batch"] <= zoom_to)), key=lambda g: g["global_batch"])
            shift = 2 ** ((i - (len(rules) - 1) / 2) * 0.04)  # spread the rules' bars apart
            xs = [g["global_batch"] * shift for g in sel]
            ys = [g["mean"] for g in sel]
            line = ax.errorbar(xs, ys, yerr=[[g["mean"] - g["min"] for g in sel], [g["max"] - g["mean"] for g in sel]],
                               marker="o", ms=4, capsize=3, label=rule)
            if base and sel:  # from the baseline
                ax.plot([BASE_BATCH, xs[0]], [base["mean"], ys[0]], color=line[0].get_color(), lw=0.8, ls=":")
        if base:
            ax.errorbar([BASE_BATCH], [base["mean"]], yerr=[[base["mean"] - base["min"]], [base["max"] - base["mean"]]],
                        color="k", marker="s", ms=5, capsize=3, label="batch 256, lr 0.2")
            ax.axhspan(base["mean"] - POINT, base["mean"] + POINT, color="g", alpha=0.15,
                       label="batch 256 mean ± 1 point")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch (one device, or B/256 time-shared devices for +warmup)")
        ax.set_ylabel("final test accuracy, %d epochs" % acc["epochs"])
        if zoom:
            near = [g["min"] for g in groups if g["n"] and g["global_batch"] <= zoom_to and g["min"] > 0.5]
            ax.set_ylim(min(near, default=0.5) - 0.02, (base["max"] if base else max(near, default=0.85)) + 0.02)
            ax.set_title("batch <= %d (means below 0.5 off the scale)" % zoom_to, fontsize=9)
        else:
            ax.set_title("mean over seeds, bars min..max;%s" % (
                " batch > %d: one seed" % zoom_to if any(g["global_batch"] > zoom_to for g in groups) else ""),
                fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
