#!/usr/bin/python3
"""Plots allreduce_bench results (Google Benchmark JSON, --benchmark_out) as nccl-tests readers
expect them:

  allreduce_busbw   bus bandwidth vs message size (log x), one line per collective/algorithm
                    and device count, with the memcpy of the same run as the hardware reference;
  allreduce_latency time vs message size for small messages (<= 64 KiB), where latency rules.

It marks and prints the measured tree/ring crossover for each device count: the message size
from which ring is at least as fast as tree at every larger size.

    build/allreduce_bench --benchmark_out=results/allreduce.json --benchmark_out_format=json
    /usr/bin/python3 plotting/plot_allreduce.py results/allreduce.json [--out-dir DIR]

Counters are the benchmark's (nccl-tests definitions): algbw = bytes / time, busbw = algbw *
2(k-1)/k for allreduce, (k-1)/k for allgather and reduce-scatter, in GB/s (1e9).
"""

import json
import re
import sys

import paralab_results as pr

NAME = re.compile(r"^(?P<op>[a-z_]+)/(?P<algo>[a-z_]+)/devices:(?P<k>\d+)/bytes:(?P<bytes>\d+)")
MEMCPY = re.compile(r"^memcpy/devices:(?P<k>\d+)/bytes:(?P<bytes>\d+)")
SMALL = 64 * 1024


def load_benchmark(path):
    """Rows {op, algo, devices, bytes, us, busbw} from a Google Benchmark JSON file: the median
    aggregate when the run had repetitions, the plain rows otherwise; errored rows left out."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise pr.ResultsError(f"{path}: no such file")
    except IsADirectoryError:
        raise pr.ResultsError(f"{path}: a directory, not a results file")
    except OSError as e:
        raise pr.ResultsError(f"{path}: cannot read it ({e.strerror})")
    except json.JSONDecodeError as e:
        raise pr.ResultsError(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})")
    except UnicodeDecodeError:
        raise pr.ResultsError(f"{path}: not JSON (not UTF-8 text)")
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise pr.ResultsError(f"{path}: not a Google Benchmark results file (no 'benchmarks' list)")
    entries = doc["benchmarks"]
    for i, b in enumerate(entries):
        if not isinstance(b, dict):
            raise pr.ResultsError(f"{path}: benchmarks[{i}] is not an object")
    has_median = any(b.get("aggregate_name") == "median" for b in entries)
    rows = []
    for i, b in enumerate(entries):
        if b.get("error_occurred"):
            continue
        if has_median and b.get("aggregate_name") != "median":
            continue
        if not has_median and b.get("run_type") == "aggregate":
            continue
        name = b.get("run_name") or b.get("name", "")
        m = NAME.match(name)
        c = MEMCPY.match(name)
        if not m and not c:
            continue
        unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}.get(b.get("time_unit", "ns"), 1e-3)
        if pr.number(b.get("real_time")) is None:
            raise pr.ResultsError(f"{path}: benchmarks[{i}] ({name}): no real_time")
        rows.append({"op": "memcpy" if c else m["op"], "algo": "memcpy" if c else m["algo"],
                     "devices": int((c or m)["k"]), "bytes": int((c or m)["bytes"]),
                     "us": float(b["real_time"]) * unit, "busbw": pr.number(b.get("busbw")) or 0.0,
                     "time_shared": "time-shared" in str(b.get("label", ""))})
    if not rows:
        raise pr.ResultsError(f"{path}: no allreduce_bench rows in it")
    return {"rows": rows, "context": doc.get("context", {})}


def series(rows, max_bytes=None):
    """{(op, algo, devices): [(bytes, us, busbw), ...] sorted by bytes}, LeNet rows excluded."""
    out = {}
    for r in rows:
        if r["op"] == "lenet_per_tensor" or (max_bytes and r["bytes"] > max_bytes):
            continue
        out.setdefault((r["op"], r["algo"], r["devices"]), []).append(
            (r["bytes"], r["us"], r["busbw"]))
    for pts in out.values():
        pts.sort()
    return out


def crossovers(rows):
    """{devices: bytes | "ring" | "tree"}: for each device count with both tree and ring
    allreduce, the smallest measured size from which ring's time <= tree's at that size and
    every larger one; "ring" when that is the smallest size (ring never slower), "tree" when
    tree is still faster at the largest size (no crossover within the sweep). Device counts
    missing either algorithm are absent."""
    s = series(rows)
    out = {}
    for (op, algo, k) in s:
        if op != "allreduce" or algo != "ring" or ("allreduce", "tree", k) not in s:
            continue
        ring = {b: us for b, us, _ in s[("allreduce", "ring", k)]}
        tree = {b: us for b, us, _ in s[("allreduce", "tree", k)]}
        sizes = sorted(set(ring) & set(tree))
        if not sizes:
            continue
        cross = next((b for i, b in enumerate(sizes)
                      if all(ring[x] <= tree[x] for x in sizes[i:])), None)
        out[k] = "tree" if cross is None else "ring" if cross == sizes[0] else cross
    return out


def describe_crossover(k, c, largest):
    head = f"tree/ring crossover on {k} devices: "
    if c == "ring":
        return head + "none (ring at least as fast at every size)"
    if c == "tree":
        return head + f"none within the sweep (tree still faster at {human(largest)})"
    return head + human(c)


def human(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def time_shared(rows):
    """Device counts whose rows the benchmark labeled time-shared (more ranks than cores)."""
    return {r["devices"] for r in rows if r.get("time_shared")}


def _draw(ax, s, y_index, ylabel, shared=frozenset()):
    import matplotlib.ticker as ticker
    for (op, algo, k), pts in sorted(s.items()):
        style = "--" if op == "memcpy" else "-"
        label = "memcpy (2 devices)" if op == "memcpy" else (
            f"{algo} x{k}" if op == "allreduce" else f"{op} x{k}")
        if k in shared and op != "memcpy":
            label += " (time-shared)"
        ax.plot([p[0] for p in pts], [p[y_index] for p in pts], style, marker="o", markersize=3,
                label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: human(int(v))))
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def busbw_figure(bench):
    s = series(bench["rows"])
    if not s:
        return None, "no rows"
    fig, ax = pr.new_figure(1, width_per_col=9, height=5.5)
    ax = ax[0]
    _draw(ax, s, 2, "busbw (GB/s)", time_shared(bench["rows"]))
    largest = max(r["bytes"] for r in bench["rows"])
    for k, c in sorted(crossovers(bench["rows"]).items()):
        print(describe_crossover(k, c, largest))
        if isinstance(c, int):
            ax.axvline(c, color="gray", linestyle=":")
            ax.annotate(f"tree/ring crossover x{k}: {human(c)}", (c, ax.get_ylim()[1] * 0.9),
                        fontsize=8, rotation=90, va="top")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle("Collectives on CPU devices: bus bandwidth (nccl-tests busbw)", fontsize=11)
    return fig, None


def latency_figure(bench):
    s = series(bench["rows"], max_bytes=SMALL)
    s = {key: pts for key, pts in s.items() if key[0] in ("allreduce", "memcpy")}
    if not s:
        return None, "no message of 64 KiB or less"
    fig, ax = pr.new_figure(1, width_per_col=9, height=5.5)
    ax = ax[0]
    _draw(ax, s, 1, "time (µs)", time_shared(bench["rows"]))
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle("Allreduce latency for small messages", fontsize=11)
    return fig, None


def main(argv=None):
    return pr.run_cli("plot_allreduce.py", [("allreduce_busbw", busbw_figure),
                                            ("allreduce_latency", latency_figure)],
                      argv, loader=load_benchmark, what="an allreduce_bench JSON file")


if __name__ == "__main__":
    sys.exit(main())
