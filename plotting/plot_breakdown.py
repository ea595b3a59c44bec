#!/usr/bin/python3
"""Where an iteration's time goes, from a ParaLab results file.

    /usr/bin/python3 plotting/plot_breakdown.py RESULTS.json [--out-dir DIR]

Stacked bars of milliseconds per iteration: compute (forward + backward), exposed communication
(the part not hidden behind compute), optimizer, idle (waiting for peers). One bar per ok run,
grouped by series (strategy and options: paralab_results.series_name), bars within a group by
device count; one panel per batch scaling. Each bar is the mean over the run's devices
(timing.per_device); a black tick marks the slowest device's total. Runs without per-device
timing (single-device strategies, older files) are split from their iterations instead
(paralab_results.breakdown). Writes breakdown.png and breakdown.svg, or nothing when no ok run
has timed iterations.
"""

import sys
from collections import namedtuple

import paralab_results as pr

BreakdownBar = namedtuple(
    "BreakdownBar",
    "devices label compute_ms exposed_communication_ms optimizer_ms idle_ms total_ms "
    "max_total_ms oversubscribed")

STACK = (("compute_ms", "compute", "#4c72b0"),
         ("exposed_communication_ms", "exposed communication", "#dd8452"),
         ("optimizer_ms", "optimizer", "#55a868"),
         ("idle_ms", "idle", "#c7c7c7"))


def breakdown_bars(results):
    """{batch_scaling: {series: [BreakdownBar, ...] sorted by devices}}: every ok run that has
    timing to split."""
    runs = [r for r in results["runs"]
            if pr.is_ok(r) and pr.devices(r) is not None and pr.breakdown(r) is not None]
    keys = pr.series_keys(runs)
    out = {}
    for run in runs:
        b = pr.breakdown(run)
        scaling, series = keys[id(run)]
        out.setdefault(scaling, {}).setdefault(series, []).append(BreakdownBar(
            pr.devices(run), pr.label(run), b["compute_ms"], b["exposed_communication_ms"],
            b["optimizer_ms"], b["idle_ms"], b["total_ms"], b["max_total_ms"],
            pr.oversubscribed(run)))
    for by_series in out.values():
        for bars in by_series.values():
            bars.sort(key=lambda b: (b.devices, b.label))
    return out


def make_figure(results):
    bars = breakdown_bars(results)
    if not bars:
        return None, "no ok run has timed iterations split into phases (a step replayed as one CUDA graph has none)"
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    plotted_runs = [r for r in results["runs"] if pr.is_ok(r) and pr.batch_scaling(r) in bars]
    scalings = pr.ordered_scalings(plotted_runs)
    widths = [sum(len(v) for v in bars[s].values()) + len(bars[s]) for s in scalings]
    width = max(4.5, 0.55 * max(widths) + 1.5)
    # Panels side by side while that stays under a page's width; else one above the other (a
    # full sweep's 11 strong-scaling series beside the weak ones made a 33-inch-wide figure).
    stacked = len(scalings) > 1 and width * len(scalings) > 16
    fig, axes = pr.new_figure(1 if stacked else len(scalings), width_per_col=width, height=5,
                              nrows=len(scalings) if stacked else 1)
    for ax, scaling in zip(axes, scalings):
        by_series = bars[scaling]
        x, ticks, tick_labels, any_max = 0.0, [], [], False
        group_label = blended_transform_factory(ax.transData, ax.transAxes)
        for series in sorted(by_series, key=pr.series_order):
            start = x
            for bar in by_series[series]:
                bottom = 0.0
                for key, _, color in STACK:
                    value = getattr(bar, key)
                    ax.bar(x, value, bottom=bottom, width=0.8, color=color,
                           edgecolor="black" if bar.oversubscribed else color,
                           hatch="//" if bar.oversubscribed else None, linewidth=0.5)
                    bottom += value
                if bar.max_total_ms is not None:
                    any_max = True
                    ax.plot([x], [bar.max_total_ms], marker="_", markersize=14,
                            markeredgewidth=2, color="black", linestyle="none")
                ticks.append(x)
                tick_labels.append(f"×{bar.devices}")
                x += 1
            # Break after the strategy so neighbouring groups' names do not run together.
            ax.text((start + x - 1) / 2, -0.08, series.replace("/", "\n", 1),
                    transform=group_label, ha="center",
                    va="top", fontsize=8)
            x += 1  # gap between series
        tallest = max(max(b.total_ms, b.max_total_ms or 0.0,
                          sum(getattr(b, k) for k, _, _ in STACK))
                      for bs in by_series.values() for b in bs)
        ax.set_ylim(0, tallest * 1.45 or 1.0)  # headroom for the legend
        ax.set_xlim(-0.8, max(x - 1.2, 3.0))  # a lone bar should not fill the panel
        ax.set_xticks(ticks)
        ax.set_xticklabels(tick_labels, fontsize=8)
        ax.set_ylabel("ms per iteration (mean over devices)")
        if len(scalings) > 1 or scaling != pr.UNSPECIFIED_SCALING:
            ax.set_title(pr.scaling_title(scaling), fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        handles = [Patch(color=c, label=name) for _, name, c in STACK]
        if any_max:
            handles.append(Line2D([], [], marker="_", markersize=14, markeredgewidth=2,
                                  color="black", linestyle="none", label="slowest device total"))
        if any(b.oversubscribed for bs in by_series.values() for b in bs):
            handles.append(Patch(facecolor="white", edgecolor="black", hatch="//",
                                 label="oversubscribed"))
        ax.legend(handles=handles, fontsize=8, loc="upper left")
    if stacked:  # one bar width in every panel
        right = max(ax.get_xlim()[1] for ax in axes)
        for ax in axes:
            ax.set_xlim(-0.8, right)
    pr.suptitle(fig, "Time per iteration", results, plotted_runs)
    return fig, None


def main(argv=None):
    return pr.run_cli("plot_breakdown.py", [("breakdown", make_figure)], argv)


if __name__ == "__main__":
    sys.exit(main())
