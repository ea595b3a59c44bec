"""Networks other than LeNet, read from the results that ran them.

bench_runner records the model it trained in every run's config (config.model: per layer its
name, op, output shape, parameters and forward multiply-adds) and a channel_split run records
the collectives it issued, per example (strategy_report.allgather / reduce_scatter / allreduce,
floats_per_example). A perf.Net is built from those, so the model needs no table of its own:

    nets.alexnet()                 from results/reference/cpu-2core-xeon/alexnet-strategies.json
    nets.from_results(path)        any results file whose runs name a model with layers
    nets.for_config(config)        the net a run's config names (LeNet when it names none)

Tensor sizes: a conv or linear layer's parameters are its weight then its bias of `out` floats
(core/model.h lays them out so); layers without parameters have no tensors.
"""
import json
import os

from . import perf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALEXNET_SOURCE = os.path.join(ROOT, "results", "reference", "cpu-2core-xeon", "alexnet-strategies.json")
_cache = {}


def _prod(xs):
    out = 1
    for x in xs:
        out *= int(x)
    return out


def from_model_config(model, channel_split_ops=None, source=""):
    """A perf.Net from a results run's config.model (a dict with "layers")."""
    layers = model["layers"]
    tensors = []
    for l in layers:
        p = int(l.get("parameters", 0))
        if p:
            bias = int(l["out"])
            tensors += [4 * (p - bias), 4 * bias]
    split_outputs = [int(l["out"]) for l in layers if l.get("split") in ("output", "input") and "out" in l]
    return perf.Net(model["name"], [l["name"] for l in layers], tensors,
                    [_prod(l["output"]) for l in layers], channel_split_ops or {},
                    channel_split_max=min(split_outputs) if split_outputs else 1,
                    layer_macs=[int(l.get("forward_macs", 0)) for l in layers], source=source)


def channel_split_ops(report):
    """[(collective, floats per example)] from a channel_split run's strategy_report."""
    return tuple([("allgather", x["floats_per_example"]) for x in report.get("allgather", [])] +
                 [("allreduce", x["floats_per_example"]) for x in report.get("allreduce", [])] +
                 [("reduce_scatter", x["floats_per_example"]) for x in report.get("reduce_scatter", [])])


def from_results(path):
    if path in _cache:
        return _cache[path]
    with open(path) as f:
        d = json.load(f)
    model, ops = None, {}
    for r in d["runs"]:
        c = r["config"]
        if isinstance(c.get("model"), dict) and c["model"].get("layers") and model is None:
            model = c["model"]
        rep = r.get("strategy_report") or {}
        if r["status"] == "ok" and c["strategy"] == "channel_split" and "pairing" in rep:
            ops.setdefault(rep["pairing"], channel_split_ops(rep))
    if model is None:
        raise ValueError("%s: no run records its model's layers (config.model.layers)" % path)
    net = from_model_config(model, ops, source=os.path.relpath(path, ROOT))
    _cache[path] = net
    return net


def alexnet():
    return from_results(ALEXNET_SOURCE)


def for_config(config, report=None):
    """The net a run trained: LeNet unless config.model names another with its layers; a
    channel_split run's own strategy_report supplies its collectives."""
    m = config.get("model")
    if not isinstance(m, dict) or m.get("name", "lenet") == "lenet" or not m.get("layers"):
        return perf.LENET
    ops = {}
    if m["name"] == "alexnet":
        ops = dict(alexnet().channel_split_ops)
    if report and "pairing" in report:
        ops[report["pairing"]] = channel_split_ops(report)
    return from_model_config(m, ops, source="the run's config.model")
