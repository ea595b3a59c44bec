#!/usr/bin/python3
"""All ParaLab plots of one results file: speedup, breakdown, accuracy, timeline (PNG and SVG
each).

    /usr/bin/python3 plotting/plot_all.py RESULTS.json [--out-dir DIR]

Default DIR: <results stem>-plots/ beside the results file. A plot with nothing to draw is
skipped with one line saying why (the timeline, say, for a file without layer_split runs); an
unreadable or malformed results file is exit status 1 and writes nothing.
"""

import sys

import paralab_results as pr
import plot_accuracy
import plot_breakdown
import plot_speedup
import plot_timeline


def main(argv=None):
    return pr.run_cli("plot_all.py", [("speedup", plot_speedup.make_figure),
                                      ("breakdown", plot_breakdown.make_figure),
                                      ("accuracy", plot_accuracy.make_figure),
                                      ("timeline", plot_timeline.make_figure)], argv)


if __name__ == "__main__":
    sys.exit(main())
