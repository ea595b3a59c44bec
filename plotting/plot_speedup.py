#!/usr/bin/python3
"""Speedup against device count, from a ParaLab results file.

    /usr/bin/python3 plotting/plot_speedup.py RESULTS.json [--out-dir DIR]

One panel per batch scaling (strong, weak), one line per series (the strategy and its options,
e.g. data_parallel/ring, layer_split/m=8/1f1b, channel_split/megatron: see
paralab_results.series_name), the ideal line y = x, log2 device axis. Speedup = samples_per_s /
that of the 1-device run of the same batch scaling (the run's `scaling.speedup`; see
paralab_results.speedup). Only ok runs are drawn; oversubscribed runs (more worker threads than
cores) are hollow markers, runs on virtual devices (several sharing a GPU) squares. Writes speedup.png and speedup.svg, or nothing when no run on more
than one device has a speedup.
"""

import sys
from collections import namedtuple

import paralab_results as pr

SpeedupPoint = namedtuple("SpeedupPoint", "devices speedup oversubscribed label virtual")


def speedup_points(results):
    """{batch_scaling: {series: [SpeedupPoint, ...] sorted by devices}}: every ok run with a
    speedup."""
    runs = [r for r in results["runs"]
            if pr.is_ok(r) and pr.devices(r) is not None and pr.speedup(r) is not None]
    keys = pr.series_keys(runs)
    out = {}
    for run in runs:
        s = pr.speedup(run)
        scaling, series = keys[id(run)]
        out.setdefault(scaling, {}).setdefault(series, []).append(
            SpeedupPoint(pr.devices(run), s, pr.oversubscribed(run), pr.label(run),
                         pr.virtual_placement(run) is not None))
    for by_series in out.values():
        for points in by_series.values():
            points.sort(key=lambda p: (p.devices, p.label))
    return out


def speedup_series(results):
    """{batch_scaling: {series: [(devices, speedup), ...]}}: the points the plot draws, one per
    ok run (its line goes through the mean where a device count has several)."""
    return {scaling: {series: [(p.devices, p.speedup) for p in points]
                      for series, points in by_series.items()}
            for scaling, by_series in speedup_points(results).items()}


def make_figure(results):
    points = speedup_points(results)
    if not any(p.devices > 1 for by in points.values() for ps in by.values() for p in ps):
        return None, "no ok run on more than one device has a speedup"
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    # The runs drawn (an ok run without a speedup is not, nor is its batch in the title).
    plotted_runs = [r for r in results["runs"] if pr.is_ok(r) and pr.devices(r) is not None
                    and pr.speedup(r) is not None]
    scalings = pr.ordered_scalings(plotted_runs)
    colors = pr.series_colors(name for by in points.values() for name in by)
    fig, axes = pr.new_figure(len(scalings))
    for ax, scaling in zip(axes, scalings):
        by_series = points[scaling]
        any_oversubscribed = any_virtual = False
        counts = sorted({p.devices for ps in by_series.values() for p in ps})
        lo, hi = counts[0], max(counts[-1], 2)
        ideal, = ax.plot([lo, hi], [lo, hi], color="0.6", linestyle="--", linewidth=1,
                         label="ideal")
        handles = [ideal]
        for series in sorted(by_series, key=pr.series_order):
            ps = by_series[series]
            color = colors[series]
            # Several runs of one configuration (e.g. timing and accuracy runs) are each a
            # marker; the line goes through their mean.
            by_devices = {}
            for p in ps:
                by_devices.setdefault(p.devices, []).append(p.speedup)
            xs = sorted(by_devices)
            ax.plot(xs, [sum(by_devices[x]) / len(by_devices[x]) for x in xs], color=color)
            # Squares: virtual devices (several sharing a GPU); hollow: oversubscribed cores.
            for virtual in (False, True):
                filled = [p for p in ps if not p.oversubscribed and p.virtual == virtual]
                if not filled:
                    continue
                any_virtual |= virtual
                ax.plot([p.devices for p in filled], [p.speedup for p in filled],
                        marker="s" if virtual else "o", markersize=7, color=color,
                        linestyle="none")
            for p in ps:
                if p.oversubscribed:
                    any_oversubscribed = True
                    ax.plot([p.devices], [p.speedup], marker="s" if p.virtual else "o",
                            markersize=7, color=color, markerfacecolor="white",
                            markeredgewidth=1.5, linestyle="none")
            handles.append(Line2D([], [], color=color, marker="o", markersize=6, label=series))
        if any_virtual:
            handles.append(Line2D([], [], marker="s", color="0.3", linestyle="none",
                                  label="square: virtual devices\n(several share a GPU)"))
        if any_oversubscribed:
            handles.append(Line2D([], [], marker="o", color="0.3", markerfacecolor="white",
                                  linestyle="none",
                                  label="hollow: oversubscribed\n(more threads than cores)"))
        # Below the panel, not on it: inside, a legend of many series hides the points under it
        # (on 2 devices the one at 1 device, in the corner a legend takes).
        ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                  ncol=2, frameon=False)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(counts))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(c) for c in counts])
        ax.set_xlabel("devices")
        ax.set_ylabel("speedup (samples/s over 1 device)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if len(scalings) > 1 or scaling != pr.UNSPECIFIED_SCALING:
            ax.set_title(pr.scaling_title(scaling), fontsize=10)
    pr.suptitle(fig, "Speedup", results, plotted_runs)
    return fig, None


def main(argv=None):
    return pr.run_cli("plot_speedup.py", [("speedup", make_figure)], argv)


if __name__ == "__main__":
    sys.exit(main())
