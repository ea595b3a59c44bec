#!/usr/bin/python3
"""The pipeline of each layer_split run: a Gantt chart of its last timed iteration.

    /usr/bin/python3 plotting/plot_timeline.py RESULTS.json [--out-dir DIR]

One panel per layer_split run (its label), all on one time axis; one row per pipeline stage (its
device and layers, from strategy_report.stages); one bar per forward or backward pass of a
micro-batch, labelled with the micro-batch number where the bar is wide enough. The bars are
strategy_report.last_iteration_timeline: each stage's compute, in ms since the iteration's
start, so the gaps between them are the bubble (a stage waiting for its neighbour, including
the transfers). The panel title gives the bubble three ways: the mean over the timed iterations
(timing.detail.bubble_fraction), this iteration's (the same formula on the timeline drawn:
1 - busy time / (stages x span from the first start to the last end)), and the ideal for k
stages of equal cost and m micro-batches, (k-1)/(m+k-1) for GPipe and 1F1B alike
(strategy_report.ideal_bubble_fraction).

Writes timeline.png and timeline.svg, or nothing (one line saying why, exit status 0) when no
layer_split run has a timeline. A malformed timeline is exit status 1 with one line naming the
run and the entry.
"""

import json
import sys
from collections import namedtuple

import paralab_results as pr

# One bar: stage index, forward or not, micro-batch, start and end in ms since the iteration's
# start.
Pass = namedtuple("Pass", "stage forward microbatch start_ms end_ms")
# One panel. stage_names: one y label per stage; passes: [Pass]; the bubbles are fractions or
# None when the file does not say.
Timeline = namedtuple(
    "Timeline",
    "label status stage_names passes microbatches schedule mean_bubble iteration_bubble "
    "ideal_bubble timed_iterations")

FORWARD_COLOR = "#4c72b0"
BACKWARD_COLOR = "#c44e52"


def _count(x):
    """x if it is a non-negative integer (not a bool), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _stage_name(i, stage):
    s = stage if isinstance(stage, dict) else {}
    device = s.get("device")
    layers = s.get("layers")
    first = f"stage {i}" + (f": {device}" if isinstance(device, str) and device else "")
    if isinstance(layers, list) and layers:
        return first + "\n" + ", ".join(map(str, layers))
    return first


def _passes(run, report):
    """The timeline's passes; raises ResultsError naming the run and the entry when one is
    malformed. Stage and micro-batch numbers are checked against the report's stages and
    microbatches when it has them."""
    where = f"run '{pr.label(run)}': strategy_report.last_iteration_timeline"
    timeline = report["last_iteration_timeline"]
    if not isinstance(timeline, list):
        raise pr.ResultsError(f"{where} is a JSON {type(timeline).__name__}, not a list")
    stages = report.get("stages")
    n_stages = len(stages) if isinstance(stages, list) and stages else None
    m = _count(report.get("microbatches")) or None
    passes = []
    for i, e in enumerate(timeline):
        def bad(what):
            raise pr.ResultsError(f"{where}[{i}]: {what}")

        if not isinstance(e, dict):
            bad(f"a JSON {type(e).__name__}, not an object")
        stage, mb = _count(e.get("stage")), _count(e.get("microbatch"))
        if stage is None or (n_stages is not None and stage >= n_stages):
            bad(f"stage is {json.dumps(e.get('stage'))}, expected an integer in "
                f"0..{n_stages - 1 if n_stages else 'stages-1'}")
        if mb is None or (m is not None and mb >= m):
            bad(f"microbatch is {json.dumps(e.get('microbatch'))}, expected an integer in "
                f"0..{m - 1 if m else 'microbatches-1'}")
        if e.get("pass") not in ("forward", "backward"):
            bad(f"pass is {json.dumps(e.get('pass'))}, expected \"forward\" or \"backward\"")
        start, end = pr.number(e.get("start_ms")), pr.number(e.get("end_ms"))
        if start is None or end is None:
            bad("start_ms and end_ms must be finite numbers, got "
                f"{json.dumps(e.get('start_ms'))} and {json.dumps(e.get('end_ms'))}")
        if end < start:
            bad(f"end_ms {end:g} is before start_ms {start:g}")
        passes.append(Pass(stage, e["pass"] == "forward", mb, start, end))
    return passes


def iteration_bubble(passes, stages):
    """1 - busy / (stages x span), as measured_bubble_fraction in strategies/pipeline.cpp."""
    if not passes or stages < 1:
        return None
    span = max(p.end_ms for p in passes) - min(p.start_ms for p in passes)
    if not span > 0:
        return 0.0
    return 1.0 - sum(p.end_ms - p.start_ms for p in passes) / (stages * span)


def timelines(results):
    """(timelines, why): one Timeline per layer_split run with a non-empty
    strategy_report.last_iteration_timeline, in file order; why says what is missing when the
    list is empty. Raises ResultsError for a malformed timeline."""
    split_runs = [r for r in results["runs"] if pr.config(r).get("strategy") == "layer_split"]
    if not split_runs:
        return [], "no layer_split run in the file"
    out = []
    for run in split_runs:
        report = run.get("strategy_report")
        if not isinstance(report, dict) or report.get("last_iteration_timeline") is None:
            continue  # failed or skipped runs, and files from before the timeline existed
        passes = _passes(run, report)
        if not passes:
            continue
        stages = report.get("stages")
        n_stages = max(len(stages) if isinstance(stages, list) else 0,
                       1 + max(p.stage for p in passes))
        names = [_stage_name(i, stages[i] if isinstance(stages, list) and i < len(stages)
                             else None) for i in range(n_stages)]
        timing = run.get("timing") if isinstance(run.get("timing"), dict) else {}
        detail = timing.get("detail") if isinstance(timing.get("detail"), dict) else {}
        out.append(Timeline(
            pr.label(run), pr.status(run), names, passes, _count(report.get("microbatches")),
            report.get("schedule") if isinstance(report.get("schedule"), str) else None,
            pr.number(detail.get("bubble_fraction")), iteration_bubble(passes, n_stages),
            pr.number(report.get("ideal_bubble_fraction")),
            _count(timing.get("timed_iterations"))))
    if not out:
        return [], (f"none of the {len(split_runs)} layer_split runs has a "
                    "strategy_report.last_iteration_timeline")
    return out, None


def _percent(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def panel_title(t):
    """Two lines: the run (and its status when not ok), then the bubbles."""
    first = t.label + ("" if t.status in (None, "ok") else f" ({t.status})")
    setup = [f"{len(t.stage_names)} stages"]
    if t.microbatches is not None:
        setup.append(f"m={t.microbatches}")
    if t.schedule:
        setup.append(t.schedule)
    mean = f"mean of {t.timed_iterations} iterations" if t.timed_iterations else "mean"
    return (f"{first}    ({', '.join(setup)})\nbubble: {_percent(t.mean_bubble)} measured "
            f"({mean}), {_percent(t.iteration_bubble)} in the iteration shown, "
            f"{_percent(t.ideal_bubble)} ideal")


def make_figure(results):
    lines, why_not = timelines(results)
    if not lines:
        return None, why_not
    from matplotlib.patches import Patch

    # Inches per panel: the title's two lines and the x axis, plus a band per stage; and 0.8
    # for the suptitle.
    heights = [1.3 + 0.55 * len(t.stage_names) for t in lines]
    width = 11.0
    fig, axes = pr.new_figure(1, width_per_col=width, height=(sum(heights) + 0.8) / len(lines),
                              nrows=len(lines), height_ratios=heights)
    label_size = 7
    # One time axis for all panels, so that iterations of different lengths compare by eye.
    x_max = 1.01 * max(p.end_ms for t in lines for p in t.passes)
    # Roughly the axes' width in points (the figure less the stage labels at the left); a
    # micro-batch number is drawn inside its bar when the bar is wider than the text.
    points_per_ms = (width - 2.2) * 72 / x_max
    for ax, t in zip(axes, lines):
        for p in t.passes:
            color = FORWARD_COLOR if p.forward else BACKWARD_COLOR
            ax.barh(p.stage, p.end_ms - p.start_ms, left=p.start_ms, height=0.6, color=color,
                    edgecolor="white", linewidth=0.5)
            text = str(p.microbatch)
            if (p.end_ms - p.start_ms) * points_per_ms > 0.65 * label_size * len(text) + 3:
                ax.text((p.start_ms + p.end_ms) / 2, p.stage, text, ha="center", va="center",
                        color="white", fontsize=label_size)
        ax.set_yticks(range(len(t.stage_names)))
        ax.set_yticklabels(t.stage_names, fontsize=8)
        ax.set_ylim(len(t.stage_names) - 0.5, -0.5)  # stage 0 at the top
        ax.set_xlim(0, x_max)
        ax.set_xlabel("ms since the iteration's start", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
        ax.set_title(panel_title(t), fontsize=9, loc="left")
    axes[0].legend(handles=[Patch(color=FORWARD_COLOR, label="forward"),
                            Patch(color=BACKWARD_COLOR, label="backward")],
                   fontsize=8, loc="lower left", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2,
                   title="micro-batch pass", title_fontsize=8)
    plotted = [r for r in results["runs"] if pr.label(r) in {t.label for t in lines}]
    # A run whose iterations were all warm-up recorded its last one, which no timing counted.
    what = ("Pipeline timeline of the last timed iteration"
            if any(t.timed_iterations for t in lines)
            else "Pipeline timeline of the last iteration (all were warm-up)")
    pr.suptitle(fig, what, results, plotted)
    return fig, None


def main(argv=None):
    return pr.run_cli("plot_timeline.py", [("timeline", make_figure)], argv)


if __name__ == "__main__":
    sys.exit(main())
