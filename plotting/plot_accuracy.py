#!/usr/bin/python3
"""Test accuracy after each epoch, from a ParaLab results file.

    /usr/bin/python3 plotting/plot_accuracy.py RESULTS.json [--out-dir DIR]

One line per run (its label), coloured by series; one panel per batch scaling when the file has
more than one. Runs without completed epochs are left out, and so are runs of one epoch where
the file has runs of more (a sweep's timing runs beside its accuracy runs: one point, at a
truncated epoch, is not a learning curve); diverged runs are drawn dashed up to their last
completed epoch. Writes accuracy.png and accuracy.svg, or nothing when no run has a completed
epoch.
"""

import sys
from collections import namedtuple

import paralab_results as pr

# planned: the epochs the run was set to train (config.epochs; None when not recorded).
AccuracyLine = namedtuple("AccuracyLine", "label series devices status points planned")


def accuracy_lines(results):
    """{batch_scaling: [AccuracyLine(label, series, devices, status, [(epoch, test_acc), ...],
    planned)]} in file order; runs without epochs are left out."""
    out = {}
    for run in results["runs"]:
        points = []
        for e in run.get("epochs") or []:
            if not isinstance(e, dict):
                continue
            epoch, acc = e.get("epoch"), pr.number(e.get("test_acc"))
            if isinstance(epoch, int) and acc is not None:
                points.append((epoch, acc))
        if not points:
            continue
        points.sort()
        out.setdefault(pr.batch_scaling(run), []).append(
            AccuracyLine(pr.label(run), pr.series_name(run), pr.devices(run), pr.status(run),
                         points, pr.number(pr.config(run).get("epochs"))))
    return out


def curves(lines):
    """accuracy_lines' result without the one-epoch runs where any run has more epochs (a
    panel left with none is dropped). One epoch is what a run was set to train: a longer run
    stopped after its first (interrupted, diverged) stays, drawn as far as it got."""
    def epochs(line):
        return max(line.planned or 0, len(line.points))

    if max((epochs(line) for ls in lines.values() for line in ls), default=0) < 2:
        return lines
    out = {s: [line for line in ls if epochs(line) > 1] for s, ls in lines.items()}
    return {s: ls for s, ls in out.items() if ls}


def make_figure(results):
    lines = curves(accuracy_lines(results))
    if not lines:
        return None, "no run has a completed epoch"
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    scalings = pr.ordered_scalings(
        [r for r in results["runs"] if pr.batch_scaling(r) in lines])
    colors = pr.series_colors(line.series for ls in lines.values() for line in ls)
    # Colour says the series, the marker the device count: runs of one series stay apart.
    device_counts = sorted({line.devices for ls in lines.values() for line in ls} - {None})
    markers = {n: "osD^vP*X"[i % 8] for i, n in enumerate(device_counts)}
    fig, axes = pr.new_figure(len(scalings))
    for ax, scaling in zip(axes, scalings):
        for line in lines[scaling]:
            epochs = [p[0] for p in line.points]
            accs = [p[1] for p in line.points]
            ok = line.status == "ok"
            ax.plot(epochs, accs, color=colors[line.series], marker=markers.get(line.devices, "o"),
                    markersize=4,
                    linestyle="-" if ok else "--",
                    label=line.label if ok else f"{line.label} ({line.status})")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
        ax.grid(True, alpha=0.3)
        if len(scalings) > 1 or scaling != pr.UNSPECIFIED_SCALING:
            ax.set_title(pr.scaling_title(scaling), fontsize=10)
        # Below the panel: a sweep's many runs fill any corner of it.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                  frameon=False)
    fig.suptitle(f"Test accuracy on {pr.machine_description(results)}", fontsize=11)
    return fig, None


def main(argv=None):
    return pr.run_cli("plot_accuracy.py", [("accuracy", make_figure)], argv)


if __name__ == "__main__":
    sys.exit(main())
