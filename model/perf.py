"""The performance model: compute per layer, collectives as alpha-beta-gamma, strategies on top.

Plain numpy, no fitting framework. Times are milliseconds; sizes are bytes.

    compute   t_l(b, w) = scale(b) * (a_l + c_l * b * w)      layer l, per-device batch b,
              step(b)   = A + C * b                           width share w (channel_split: 1/k)
              scale(b)  = step(b) / sum_l (a_l + c_l * b)     per-layer shape from a layer profile,
                                                              whole-step level from a step profile
    collective t(n, k)  = alpha_k * msgs + beta_k * bytes + gamma_k * reduced
              msgs, bytes, reduced: the critical path's messages, bytes moved and bytes added, from
              the algorithms in strategies/collectives/collectives.cpp (naive: 2(k-1) whole-buffer
              transfers through rank 0; ring: 2(k-1) steps of n/k cut into chunk_bytes pieces; tree:
              binary tree rooted at 0, pipelined over chunk_bytes pieces). Links: one (alpha, beta,
              gamma) per algorithm. Virtual devices on one GPU: one per algorithm and k, because the
              hand-offs are host calls whose cost depends on how many host threads issue them at
              once, and that differs by algorithm (allreduce-cuda.json, small sizes, 2 -> 4 devices:
              ring 29 -> 65 us per message, all ranks send in every step; naive 17 -> 17 us and
              tree 15 -> 16 us, where mostly rank 0 and one peer are at work); FINDINGS.md's
              emulated call sequence: 6, 36, 74, 156 us per message with 1, 2, 4, 8 threads.
              Host-bound links (virtual devices): t = max(start_k + alpha_k * msgs, beta * bytes +
              gamma_k * reduced): one host thread per rank queues the messages while the GPU runs
              the copies and adds queued before, so the slower of the two sets the time. beta is
              the copy primitive's per-byte time (allreduce_bench's memcpy rows, fitted as
              max(latency, beta * n)); start_k, alpha_k and gamma_k / beta (adds per byte, in copies) per
              algorithm and k on its other sizes.
              Size-dependent links (the CPU): naive, ring and tree move data the peer has just
              written, through the same caches, and each adds half a byte per byte moved (naive
              (k-1)n of 2(k-1)n, ring and tree likewise), so at size n they share one per-byte cost
              beta(n) of the machine (allreduce-sweep.json, ring: 0.15 ns/B at 1 MiB, 0.08 at
              4-16 MiB, 0.17 at 256 MiB); t = alpha_op * steps + beta(n) * bytes, steps the
              critical path's messages of a one-piece message, beta(n) the median over those
              algorithms at n of (t - alpha * steps) / bytes, interpolated in log n. Past the
              caches that sharing fails (one AMD EPYC VM at 256 MiB: ring 0.134 ns/B, tree 0.102,
              naive 0.081: ring's ranks stream through memory at once, naive's take turns), so
              where an algorithm's own rows sample its curve finely around n (sizes at most 4x
              apart across n: a sweep by 2x, --sizes=fine), its own per-byte cost there, log-log
              between them, prices it instead (own_beta_at).
              All-gather and reduce-scatter (the CPU): each at the other's time at n (log-log
              between measured sizes), less or plus the adds, a + gamma * reduced bytes (PAIR);
              where its own sizes lie at most OWN_SPAN apart around n, the geometric mean of that
              and its own time there (log-log).
              One-thread copies (the CPU, "p2p": allreduce_bench's memcpy rows, layer_split's
              hand-offs): the copy's own measured time at n, log-log between its measured sizes
              (_loglog). Its per-byte cost follows the cache the buffers fit in (one AMD EPYC VM:
              0.026 ns/B up to 1 MiB, 0.052 at 4 MiB, 0.075 from 16 MiB), which one alpha + beta
              fitted to relative error over every size cannot: the many in-cache sizes set beta,
              and every copy out of cache came out 47-64 % short (that VM, from 4 MiB up). From
              the C library's non-temporal threshold up (glibc's x86_non_temporal_threshold, which
              allreduce_bench records in its context), a copy stores past the caches and moves 2
              bytes of memory traffic per byte instead of 3 (NON_TEMPORAL_TRAFFIC): where the
              threshold is recorded and the copy's rows do not contradict it (non_temporal_step),
              the curve is kept in cache-allocating terms and converted.
"""
import math

import numpy as np

LAYERS = ("conv1", "conv2", "fc1", "fc2")
GRADIENT_BYTES = 516272  # LeNet's 129,068 fp32 parameters
TENSOR_BYTES = (720, 80, 100000, 200, 409600, 512, 5120, 40)  # its 8 tensors (per_tensor grouping)
# Floats per example crossing each layer boundary (the activation after layer l).
ACTIVATION_FLOATS = (3380, 800, 128, 10)
CHUNK_BYTES = 262144  # data_parallel's and the collectives' default chunk_bytes
# A copy out of cache with non-temporal stores moves 2 bytes of memory traffic per byte (read the
# source, write the destination) where a cache-allocating one moves 3 (the destination is read
# for ownership first, then written back). Measured on a 2-core AMD EPYC VM (glibc threshold 192
# MiB; allreduce_bench memcpy, GLIBC_TUNABLES moving it): 0.080 against 0.127 ns/B at 256 MiB,
# 0.072-0.085 against 0.127-0.131 at 64 MiB; the clean Xeon session's 256 / 64 MiB: 0.093 / 0.148.
NON_TEMPORAL_TRAFFIC = 2.0 / 3.0
# Not every machine shows that drop, and not in every algorithm: on the AVX-512 AMD EPYC VM
# (threshold 127 MiB) memcpy cost 0.063, 0.066 and 0.066 ns/B at 64, 128 and 256 MiB in the
# morning session of 2026-12-04, already at the other VMs' non-temporal level below the threshold,
# and 0.058, 0.062, 0.061 in the afternoon's, while naive's cost per byte fell from 0.199 to 0.130
# between 64 and 128 MiB that afternoon (its copies and adds share the memory). So the drop is
# taken for an algorithm only where its own rows allow it: where they lie on both sides of the
# threshold, the nearest size at or above it must cost at most STEP_SEEN of the nearest size
# below it per byte (halfway between no drop and the full 2/3; the AVX2 EPYC VM's memcpy: 0.58),
# the size below being within NEAR_THRESHOLD of it (farther down, the caches make a copy cheaper
# per byte).
STEP_SEEN = (1.0 + NON_TEMPORAL_TRAFFIC) / 2.0
NEAR_THRESHOLD = 4.0


def non_temporal_step(rows, threshold, op="p2p"):
    """The threshold (bytes) where allreduce_bench rows [(op, n, k, ms)] leave the drop in op's
    cost per byte at it possible (default: the copy, "p2p"): op's rows show the drop, or have no
    measured size near it on one side (the C library's documented behaviour then stands); None
    where they show no drop (the median over k of the ratio), or where no threshold is known."""
    if not threshold:
        return None
    ratios = []
    for k in sorted({r[2] for r in rows if r[0] == op}):
        t = {n: ms for o, n, kk, ms in rows if o == op and kk == k}
        below = [n for n in t if threshold / NEAR_THRESHOLD <= n < threshold]
        above = [n for n in t if n >= threshold]
        if below and above:
            lo, hi = max(below), min(above)
            ratios.append((t[hi] / hi) / (t[lo] / lo))
    return int(threshold) if not ratios or float(np.median(ratios)) <= STEP_SEEN else None


def traffic_bytes(op, n, k, chunk=CHUNK_BYTES, non_temporal=None):
    """The critical path's bytes moved of an allreduce (collective_features), each copy that the C
    library does with non-temporal stores counted at NON_TEMPORAL_TRAFFIC of a byte: half of
    every allreduce's bytes are plain copies (naive's sum sent back to the peers, ring's
    all-gather, tree's broadcast), the other half adds, and a copy of at least `non_temporal`
    bytes is non-temporal. Naive copies whole messages, ring and tree their pieces (at most
    chunk, a ring segment n/k), so at the default 256 KiB pieces only naive's copies cross a
    threshold of 192 MiB (one AMD EPYC VM at 256 MiB: naive's cost per byte fell 23 % from 128
    MiB, ring's and tree's did not)."""
    nb = collective_features(op, n, k, chunk)[1]
    if not non_temporal or op not in ("naive", "ring", "tree"):
        return nb
    whole = n / k if op == "ring" else n
    copy = whole if op == "naive" else min(chunk, whole)
    return nb * (0.5 + 0.5 * NON_TEMPORAL_TRAFFIC) if copy >= non_temporal else nb


class Net:
    """What the strategies need to know of a network: its layers (as layer_split profiles and cuts
    them), its parameter tensors' sizes (data_parallel's allreduce, DDP buckets), the floats per
    example after each layer (layer_split's hand-offs) and channel_split's collectives per example
    for each pairing ([(collective, floats per example)], "allreduce" standing for the run's
    algorithm). channel_split_max: the fewest output units of a split layer (at most that many
    devices). layer_macs: forward multiply-adds per example per layer (None where not known)."""

    def __init__(self, name, layers, tensor_bytes, activation_floats, channel_split_ops,
                 channel_split_max, layer_macs=None, source=""):
        self.name = name
        self.layers = tuple(layers)
        self.tensor_bytes = tuple(int(x) for x in tensor_bytes)
        self.gradient_bytes = sum(self.tensor_bytes)
        self.activation_floats = tuple(activation_floats)
        self.channel_split_ops = {k: tuple(v) for k, v in channel_split_ops.items()}
        self.channel_split_max = channel_split_max
        self.layer_macs = tuple(layer_macs) if layer_macs else None
        self.source = source

    def to_json(self):
        return {"name": self.name, "layers": list(self.layers), "gradient_bytes": self.gradient_bytes,
                "tensor_bytes": list(self.tensor_bytes), "activation_floats_per_example": list(self.activation_floats),
                "channel_split_collectives": {k: [list(x) for x in v] for k, v in self.channel_split_ops.items()},
                "channel_split_max_devices": self.channel_split_max, "source": self.source}


# LeNet as ParaLab runs it (README's table; channel_split's lists as gpu-check.json's runs report).
LENET = Net("lenet", LAYERS, TENSOR_BYTES, ACTIVATION_FLOATS,
            {"none": (("allgather", 3380), ("allgather", 800), ("allgather", 128), ("allgather", 10),
                      ("reduce_scatter", 128), ("reduce_scatter", 800), ("reduce_scatter", 3380)),
             "megatron": (("allgather", 3380), ("allgather", 10), ("allreduce", 128), ("allreduce", 128),
                          ("reduce_scatter", 3380))},
            channel_split_max=10, source="model/perf.py constants (README's Models table)")


def nnls(a, y):
    """Non-negative least squares min |a x - y|, x >= 0 (Lawson-Hanson; a few columns only)."""
    a, y = np.asarray(a, float), np.asarray(y, float)
    n = a.shape[1]
    passive = np.zeros(n, bool)
    x = np.zeros(n)
    for _ in range(3 * n + 10):
        w = a.T @ (y - a @ x)
        if passive.all() or w[~passive].max(initial=-1) <= 1e-12 * max(1.0, abs(y).max()):
            break
        j = np.argmax(np.where(passive, -np.inf, w))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], y, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            t = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + t * (z - x)
            passive &= x > 1e-15
    return x


def relative_fit(features, measured):
    """Non-negative coefficients minimising the relative error (rows weighted by 1/measured)."""
    f = np.asarray(features, float)
    m = np.asarray(measured, float)
    return nnls(f / m[:, None], np.ones_like(m))


# ---------------------------------------------------------------------------------------------
# Compute


class Compute:
    """One device kind's training-step time as a function of per-device batch (and width share).

    line:   (A, C) of the whole step, ms = A + C * b (gather, forward, backward, SGD)
    layers: per layer (a_l, c_l), fitted on the profiling pass's forward+backward times
    backward_fraction: backward / (forward + backward), for overlap
    """

    def __init__(self, line, layers, backward_fraction, note="", host=None, width_efficiency=None,
                 graph_factor=1.0, group_overhead=0.0, names=None, concurrency=None, kernels=None,
                 group_overhead_read_once=None):
        self.names = tuple(names) if names else LAYERS[:len(layers)] if len(layers) == len(LAYERS) else \
            tuple("layer%d" % i for i in range(len(layers)))
        # width_efficiency: {k: measured channel_split compute / the layer model's at 1/k of the
        # channels} from a profile (kernels run less efficiently at fewer channels); graph_factor:
        # a single step captured as one CUDA graph against the eager step.
        # group_overhead: ms a strategy's step adds over the single step when it runs as a
        # group (barriers that open and close the step, waking one host thread per rank).
        self.group_overhead = group_overhead
        # group_overhead_read_once: the same for steps queued and read once per epoch
        # (read_back "epoch"), where measured; None: group_overhead stands in.
        self.group_overhead_read_once = group_overhead_read_once
        # concurrency: {k: a device's compute time when k devices compute at once / alone}, from
        # a profile timed beside other processes computing (CPU cores share caches and memory
        # bandwidth, and a hypervisor may place two vCPUs on one physical core). Interpolated in
        # k, the largest measured k's factor beyond it; 1 where nothing was measured.
        self.concurrency = dict(concurrency or {})
        self.width_efficiency = dict(width_efficiency or {})
        self.graph_factor = graph_factor
        self.line = tuple(line)
        self.layers = [tuple(l) for l in layers]
        self.backward_fraction = backward_fraction
        self.note = note
        # host: None, or (ms of host work per step with one host thread, [launch cost with
        # 1, 2, 4, 8 host threads]) for devices whose step is bounded by the host's launches
        # (virtual devices, one host thread each; interpolated linearly in threads, flat beyond).
        self.host = host
        # kernels: the CUDA kernel set the profile was measured with ("cudnn", ...; None off CUDA)
        self.kernels = kernels

    def scaled(self, level):
        return Compute((self.line[0] * level, self.line[1] * level), self.layers,
                       self.backward_fraction, self.note, self.host, self.width_efficiency,
                       self.graph_factor, self.group_overhead, self.names, self.concurrency,
                       self.kernels, self.group_overhead_read_once)

    def width_factor(self, k):
        if not self.width_efficiency or k <= 1:
            return 1.0
        ks = sorted(self.width_efficiency)
        return float(np.interp(k, ks, [self.width_efficiency[x] for x in ks]))

    def sharing(self, k):
        """A device's compute time when k devices compute at once, relative to alone."""
        if not self.concurrency or k <= 1:
            return 1.0
        ks = [1] + sorted(self.concurrency)
        return float(np.interp(k, ks, [1.0] + [self.concurrency[x] for x in ks[1:]]))

    def contention(self, ranks):
        """Launch cost with `ranks` host threads relative to one thread (1 without a host term)."""
        if not self.host:
            return 1.0
        costs = self.host[1]
        threads = [1, 2, 4, 8][:len(costs)]
        return float(np.interp(ranks, threads, costs)) / costs[0]

    def step(self, b, ranks=1):
        """A step at per-device batch b when `ranks` devices run at once (host contention, or the
        devices' shared resources)."""
        t = (self.line[0] + self.line[1] * b) * self.sharing(ranks)
        if self.host:
            t = max(t, self.host[0] * self.contention(ranks))
        return t

    def layer_ms(self, b, width=1.0):
        """Per-layer forward+backward ms at per-device batch b and channel share `width`."""
        raw_full = [a + c * b for a, c in self.layers]
        scale = self.step(b) / sum(raw_full)
        return [scale * (a + c * b * width) for a, c in self.layers]

    def to_json(self):
        return {"step_ms": {"fixed": self.line[0], "per_example": self.line[1]},
                "host_bound": None if not self.host else {"host_ms_one_thread": self.host[0],
                                                          "launch_cost_us_1_2_4_8_threads": self.host[1]},
                "layers": {n: {"fixed": a, "per_example": c} for n, (a, c) in zip(self.names, self.layers)},
                "channel_split_width_efficiency": self.width_efficiency, "cuda_graph_factor": self.graph_factor,
                "group_step_overhead_ms": self.group_overhead,
                "group_step_overhead_read_once_ms": self.group_overhead_read_once,
                "concurrent_step_factor": self.concurrency,
                "backward_fraction": self.backward_fraction, "note": self.note}

    @staticmethod
    def fit(step_points, layer_points, backward_fraction, note="", names=None):
        """step_points: [(b, ms)]; layer_points: [(b, [ms per layer])], every point the same layers."""
        b = np.array([p[0] for p in step_points], float)
        line = relative_fit(np.c_[np.ones_like(b), b], [p[1] for p in step_points])
        lb = np.array([p[0] for p in layer_points], float)
        layers = []
        for l in range(len(layer_points[0][1])):
            y = [max(p[1][l], 1e-6) for p in layer_points]  # a layer measured at 0 ms weighs 1e-6
            layers.append(tuple(relative_fit(np.c_[np.ones_like(lb), lb], y)))
        return Compute(line, layers, backward_fraction, note, names=names)


# ---------------------------------------------------------------------------------------------
# Collectives


def _pieces(nbytes, chunk):
    """Pieces of a message of nbytes cut at chunk bytes; chunk 0 sends whole messages (the
    collectives' auto piece size between devices of one memory domain, virtual devices of a GPU)."""
    return 1 if chunk <= 0 else max(1, math.ceil(nbytes / chunk))


def collective_features(op, n, k, chunk=CHUNK_BYTES, whole=False):
    """(messages, bytes, reduced bytes) on the critical path of one collective of n bytes.

    whole: the collective ran in whole steps (LocalFabric over virtual devices of one GPU,
    PARALAB_STEP_MOVES; allreduce_bench's whole_steps counter): every rank's moves of a step are
    one kernel, so "messages" counts steps. naive: k-1 gather steps and one broadcast step; the
    ring family: its steps, the pieces of a step's segment merged into one move; tree: its
    lock-step schedule, chunks + depth - 1 steps each way, a parent's two adds one move. Where the
    steps moved as one kernel for the whole collective (the whole_collectives counter, the default
    since whole steps), they are counted the same way: a step is then a phase of that kernel,
    whose cost (a block barrier and its data's latency, not a launch) is what alpha fits."""
    if k <= 1:
        return (0.0, 0.0, 0.0)
    if op == "naive":
        return (float(k) if whole else 2.0 * (k - 1), 2.0 * (k - 1) * n, (k - 1.0) * n)
    ring_pieces = 1 if whole else _pieces(n / k, chunk)
    if op in ("ring", "nccl"):
        return (2.0 * (k - 1) * ring_pieces, 2.0 * (k - 1) / k * n, (k - 1.0) / k * n)
    if op == "tree":
        depth = math.floor(math.log2(k))
        children = min(2, k - 1)
        per_step = 1 if whole else children
        return (2.0 * (per_step * _pieces(n, chunk) + depth - 1), 2.0 * children * n, children * float(n))
    if op == "allgather":
        return ((k - 1.0) * ring_pieces, (k - 1.0) / k * n, 0.0)
    if op == "reduce_scatter":
        return ((k - 1.0) * ring_pieces, (k - 1.0) / k * n, (k - 1.0) / k * n)
    if op == "p2p":
        return (1.0, float(n), 0.0)
    raise ValueError("unknown collective " + op)


# All-gather and reduce-scatter run the same ring schedule over the same pieces; reduce-scatter
# also adds each piece it receives. On the CPU their per-byte cost follows the machine's caches in
# the same way at each size (session 2026-12-01, Xeon: 0.079 / 0.083 ns/B at 16 MiB, 0.080 / 0.091
# at 64 MiB, 0.151 / 0.167 at 256 MiB), which one alpha-beta-gamma per algorithm cannot follow; so
# each is priced by the other's time at the same size, the adds (a + gamma * reduced bytes) fitted
# on the sizes where both are measured. That fails where one of the two alone steps at a size (the
# AVX-512 EPYC VM, 2026-12-04: reduce-scatter at 32 MiB 2.0x all-gather, 1.8x and 1.4x at 16 and
# 64 MiB; all-gather 32 MiB, priced so, +42 %), and an algorithm's own curve fails at a cache step
# between its neighbouring sizes; so where its own sizes sample the curve finely around n (at
# most OWN_SPAN apart: a sweep by 2x), it is priced at the geometric mean of the two, which halves
# either's error in log terms (that session's configurations: max 42.1 -> 21.4 %; every other
# session's median and max the same or lower).
PAIR = {"allgather": "reduce_scatter", "reduce_scatter": "allgather"}


def _loglog(times, n):
    """A time at n bytes from {bytes: ms}: log-log interpolation between measured sizes, the
    smallest size's time below them (latency), the largest's time per byte above them."""
    xs = sorted(times)
    if n <= xs[0]:
        return times[xs[0]]
    if n >= xs[-1]:
        return times[xs[-1]] * n / xs[-1]
    return float(np.exp(np.interp(math.log(n), np.log(xs), np.log([times[x] for x in xs]))))


def fit_pair(rows):
    """The pair's data from allreduce_bench rows [(op, n, k, ms)]: each algorithm's times per k,
    and per k (a, gamma) of reduce_scatter - allgather = a + gamma * reduced bytes, least squares
    relative to the all-gather's time, over the sizes where both are measured (at least two)."""
    times, adds = {}, {}
    for op, n, k, t in rows:
        if op in PAIR:
            times.setdefault((op, k), {})[n] = t
    for k in sorted({k for _, k in times}):
        ag, rs = times.get(("allgather", k), {}), times.get(("reduce_scatter", k), {})
        both = sorted(set(ag) & set(rs))
        if len(both) < 2:
            continue
        red = np.array([collective_features("reduce_scatter", n, k)[2] for n in both])
        w = 1.0 / np.array([ag[n] for n in both])
        a = np.stack([np.ones_like(red), red], axis=1)
        y = np.array([rs[n] - ag[n] for n in both])
        adds[k] = tuple(float(x) for x in np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0])
    return {"times": times, "adds": adds} if adds else None


def latency_steps(op, k):
    """Messages on the critical path when every message is one piece (a small collective)."""
    return collective_features(op, 4 * k, k)[0]


class Link:
    """alpha (ms per message), beta (ms per byte), gamma (ms per byte reduced) per algorithm.

    params: {algorithm: (alpha, beta, gamma)} for every k, or {algorithm: {k: (alpha, beta, gamma)}}
    fitted per device count. allgather and reduce_scatter use ring's unless given; p2p uses its own
    (fitted on allreduce_bench's memcpy rows) or ring's. Between and beyond the measured k each
    coefficient is extrapolated geometrically in k from the two nearest measured k (see _at).
    contention: per-message host cost in us with 1, 2, 4, 8 host threads (host-bound virtual
    devices, FINDINGS.md: 6, 36, 74, 156); it scales alpha when `ranks` host threads are at work
    while a collective spans fewer devices (layer_split's two-device hand-offs among k stages).
    """

    def __init__(self, params, contention=None, chunk=CHUNK_BYTES, note="", host_bound=False,
                 size_beta=None, step_alpha=None, pair=None, copy=None, non_temporal=None,
                 own_beta=None, non_temporal_for=None, non_temporal_recorded=None, op_chunk=None,
                 whole_steps=()):
        self.params = {op: ({int(k): tuple(x) for k, x in v.items()} if isinstance(v, dict) else {0: tuple(v)})
                       for op, v in params.items()}
        self.contention = list(contention) if contention else None
        self.chunk = chunk
        # op_chunk: {op: piece size} for algorithms timed (and run) with pieces of another size than
        # `chunk`: all-gather and reduce-scatter cut into 256 KiB pieces on one GPU too until they
        # took the automatic size (their allreduce_bench rows record it: chunk_bytes).
        self.op_chunk = {op: int(c) for op, c in (op_chunk or {}).items()}
        # whole_steps: the algorithms timed (and run) in whole steps (collective_features' whole).
        self.whole_steps = frozenset(whole_steps)
        self.note = note
        # host_bound: the host's message calls overlap the device's copies (see the module doc)
        self.host_bound = host_bound
        # size_beta: {n: ms per byte} shared by the algorithms in step_alpha ({op: ms per latency
        # step}), which are timed as step_alpha * steps + beta(n) * bytes (fit_size_dependent).
        self.size_beta = {int(n): float(b) for n, b in (size_beta or {}).items()}
        self.step_alpha = dict(step_alpha or {})
        # pair: all-gather and reduce-scatter priced by each other (fit_size_dependent):
        # {"times": {(op, k): {n: ms}}, "adds": {k: (a, gamma)}}, reduce_scatter - allgather = a +
        # gamma * reduced bytes.
        self.pair = pair
        # copy: {k: {n: ms}} of the one-thread copy (p2p) per device count (fit_size_dependent).
        self.copy = {int(k): {int(n): float(t) for n, t in v.items()} for k, v in (copy or {}).items()}
        # non_temporal: the C library's memcpy threshold in bytes (allreduce_bench's context), from
        # which a copy stores past the caches: `copy` then holds each time at or above it as the
        # cache-allocating copy's equivalent (divided by NON_TEMPORAL_TRAFFIC), and time() converts
        # back (fit_size_dependent, copy_time).
        self.non_temporal = int(non_temporal) if non_temporal else None
        # non_temporal_for: {op: threshold or None} per algorithm whose own rows decided it
        # (fit_size_dependent, non_temporal_step); an algorithm not in it takes non_temporal.
        # non_temporal_recorded: the threshold the files recorded, for the record.
        self.non_temporal_for = dict(non_temporal_for or {})
        self.non_temporal_recorded = int(non_temporal_recorded) if non_temporal_recorded else None
        # own_beta: {(op, k): {n: ms per byte}} of each algorithm in step_alpha at its own measured
        # sizes on k devices (fit_size_dependent): where they sample its curve finely around n
        # (own_beta_at), time() prices op at n by its own per-byte cost instead of the shared beta(n).
        self.own_beta = {(op, int(k)): {int(n): float(b) for n, b in v.items()}
                         for (op, k), v in (own_beta or {}).items()}

    def _p(self, op, k):
        if op not in self.params:
            if op in ("allgather", "reduce_scatter", "p2p", "nccl") and "ring" in self.params:
                op = "ring"
            else:
                raise KeyError(op)
        return self._at(self.params[op], k)

    @staticmethod
    def _at(per_k, k):
        """Coefficients at k from those fitted per measured k. On the H200 the ring's per-message
        cost grew 2.1x from 2 to 4 devices in allreduce_bench and the emulated call sequence 2.05x
        and 2.1x per doubling from 2 to 8 threads (FINDINGS.md), so a coefficient is taken to grow
        by the same factor per doubling of k beyond the measured k (geometric in log2 k)."""
        if k in per_k:
            return per_k[k]
        ks = sorted(per_k)
        if len(ks) == 1:
            return per_k[ks[0]]
        lo, hi = (ks[0], ks[1]) if k < ks[0] else (ks[-2], ks[-1])
        for a, b in zip(ks, ks[1:]):
            if a < k < b:
                lo, hi = a, b
        t = math.log2(k / lo) / math.log2(hi / lo)
        out = []
        for c0, c1 in zip(per_k[lo], per_k[hi]):
            out.append(c0 * (c1 / c0) ** t if c0 > 0 and c1 > 0 else max(0.0, c0 + (c1 - c0) * t))
        return tuple(out)

    def _threads(self, n):
        return float(np.interp(n, [1, 2, 4, 8][:len(self.contention)], self.contention))

    def time(self, op, n, k, ranks=None):
        """ms of one collective of n bytes over k ranks; `ranks` (default k) host threads at work
        at once (a point-to-point hand-off is k = 2 between two of them)."""
        if k <= 1 or n <= 0:
            return 0.0
        m, nb, r = collective_features(op, n, k, self.chunk_of(op), op in self.whole_steps)
        if op in self.step_alpha and self.size_beta:
            beta = self.own_beta_at(op, n, k)
            if beta is None:
                beta = self.beta_at(n)
            return self.step_alpha[op] * latency_steps(op, k) + beta * traffic_bytes(
                op, n, k, self.chunk_of(op), self.non_temporal_for.get(op, self.non_temporal))
        if op == "p2p" and len(self.copy.get(k, {})) >= 2:
            return self.copy_time(k, n)
        if self.pair and op in PAIR and (PAIR[op], k) in self.pair["times"] and k in self.pair["adds"]:
            a, gamma = self.pair["adds"][k]
            adds = a + gamma * collective_features("reduce_scatter", n, k)[2]
            partner = _loglog(self.pair["times"][(PAIR[op], k)], n)
            # The partner's time less (all-gather) or plus (reduce-scatter) the adds; never below
            # half the partner's time (the adds are a part of reduce-scatter, not all of it).
            paired = max(partner - adds, 0.5 * partner) if op == "allgather" else partner + adds
            # Where its own sizes sample the curve finely around n (OWN_SPAN, as own_beta_at),
            # also its own time there, log-log between them: the geometric mean of the two.
            own = self.pair["times"].get((op, k)) or {}
            return math.sqrt(paired * _loglog(own, n)) if self._spanned(own, n) else paired
        alpha, beta, gamma, *start = self._p(op, k)
        if ranks and ranks != k and self.contention:
            alpha *= self._threads(ranks) / self._threads(k)
        if self.host_bound:
            return max(sum(start) + alpha * m, beta * nb + gamma * r)
        return sum(start) + alpha * m + beta * nb + gamma * r

    def chunk_of(self, op):
        """The piece size op runs with (op_chunk, else chunk)."""
        return self.op_chunk.get(op, self.chunk)

    def copy_time(self, k, n):
        """The one-thread copy's ms at n bytes: its measured times, log-log between measured sizes
        (_loglog), where at or above the non-temporal threshold the copy moves NON_TEMPORAL_TRAFFIC
        of the bytes a cache-allocating copy does."""
        t = _loglog(self.copy[k], n)
        return t * NON_TEMPORAL_TRAFFIC if self.non_temporal and n >= self.non_temporal else t

    @staticmethod
    def _per_byte(table, n):
        """A per-byte cost at n bytes from {bytes: cost}: log-log interpolation between the
        measured sizes, the nearest measured one's outside them."""
        xs = sorted(table)
        return float(np.exp(np.interp(math.log(n), np.log(xs), np.log([table[x] for x in xs]))))

    def beta_at(self, n):
        """The shared per-byte cost at n bytes (_per_byte of size_beta)."""
        return self._per_byte(self.size_beta, n)

    # An algorithm's own curve is trusted between measured sizes at most this far apart (4:
    # neighbours at n/2 and 2n, a sweep by 2x with n itself left out); a sweep by 4x leaves n/4
    # and 4n, too coarse for the caches' steps, and the shared beta(n) prices it instead.
    OWN_SPAN = 4.0

    @classmethod
    def _spanned(cls, sizes, n):
        """Whether measured sizes lie on both sides of n (or at n) at most OWN_SPAN apart."""
        lo = max((x for x in sizes if x <= n), default=None)
        hi = min((x for x in sizes if x >= n), default=None)
        return lo is not None and hi is not None and hi / lo <= cls.OWN_SPAN * 1.001

    def own_beta_at(self, op, n, k):
        """op's own per-byte cost at n bytes on k devices: its measured value at n, log-log between its
        measured sizes on either side of n when they are at most OWN_SPAN apart, or beyond its
        smallest or largest size the nearest one's within sqrt(OWN_SPAN); None otherwise."""
        own = self.own_beta.get((op, k)) or {}
        lo = max((x for x in own if x <= n), default=None)
        hi = min((x for x in own if x >= n), default=None)
        # Between sizes at most OWN_SPAN apart (or at one of them); at the sweep's ends (n held
        # out at its largest size, say) the nearest size within half the span, held flat.
        half = math.sqrt(self.OWN_SPAN) * 1.001
        near = self._spanned(own, n) or \
            (hi is None and lo is not None and n / lo <= half) or \
            (lo is None and hi is not None and hi / n <= half)
        return self._per_byte(own, n) if near else None

    def to_json(self):
        return {"pair": None if not self.pair else {
                    "rule": "reduce_scatter(n) - allgather(n) = a + gamma * reduced bytes; each priced by "
                            "the other's measured time at n (log-log between measured sizes)",
                    "a_ms_gamma_ms_per_byte_per_k": {"k=%d" % k: list(v) for k, v in sorted(self.pair["adds"].items())},
                    "sizes_per_algorithm": {"%s k=%d" % ok: len(v) for ok, v in sorted(self.pair["times"].items())}},
                "copy_ms_at_bytes": None if not self.copy else {
                    "k=%d" % k: {str(n): self.copy_time(k, n) for n in sorted(v)} for k, v in sorted(self.copy.items())},
                "copy_non_temporal_threshold_bytes": self.non_temporal,
                **({"non_temporal_threshold_recorded_bytes": self.non_temporal_recorded,
                    "non_temporal_threshold_per_algorithm": self.non_temporal_for}
                   if self.non_temporal_recorded else {}),
                "size_dependent": None if not self.size_beta else {
                    "algorithms_ms_per_latency_step": self.step_alpha,
                    "beta_ms_per_byte_at_bytes": {str(n): b for n, b in sorted(self.size_beta.items())},
                    "own_beta_ms_per_byte_at_bytes": {"%s k=%d" % ok: {str(n): b for n, b in sorted(v.items())}
                                                      for ok, v in sorted(self.own_beta.items())},
                    "own_beta_rule": "an algorithm's own per-byte cost where its measured sizes "
                                     "around n are at most %gx apart; else beta(n)" % self.OWN_SPAN},
                "params_ms": {op: {("any k" if k == 0 else "k=%d" % k):
                                   dict(zip(("alpha", "beta_per_byte", "gamma_per_byte",
                                             "start"), x))
                                   for k, x in v.items()} for op, v in self.params.items()},
                "host_contention_us_1_2_4_8_threads": self.contention, "chunk_bytes": self.chunk,
                "chunk_bytes_per_algorithm": dict(sorted(self.op_chunk.items())),
                **({"whole_steps": sorted(self.whole_steps)} if self.whole_steps else {}),
                "host_bound_max_of_host_and_device": self.host_bound, "note": self.note}

    @staticmethod
    def fit(rows, per_k=False, contention=None, note="", chunk=CHUNK_BYTES, op_chunk=None,
            whole_steps=(), start=False):
        """rows: [(op, n, k, measured_ms)] from allreduce_bench; one fit per op, or per (op, k);
        chunk: the piece size the rows were timed with (0: whole messages); op_chunk: {op: piece
        size} where an algorithm's rows were timed with another; whole_steps: the algorithms
        whose rows were timed in whole steps (collective_features). start: also a fixed cost per
        collective, whatever its messages (a GPU's collective, one graph of kernels: its first
        kernel's launch latency, which a cost per piece cannot hold where the pieces grow with
        the size); time() adds it, also within a step's graph, where it stands for the
        collective's first kernel there."""
        op_chunk = dict(op_chunk or {})
        whole_steps = frozenset(whole_steps)
        params = {}
        for op in sorted({r[0] for r in rows}):
            ks = sorted({r[2] for r in rows if r[0] == op}) if per_k else [None]
            params[op] = {}
            for k in ks:
                sel = [r for r in rows if r[0] == op and (k is None or r[2] == k)]
                f = np.array([collective_features(o, n, kk, op_chunk.get(o, chunk), o in whole_steps)
                              for o, n, kk, _ in sel])
                if start:
                    f = np.column_stack([f, np.ones(len(sel))])
                y = np.array([r[3] for r in sel])
                used = f.any(axis=0)
                x = np.zeros(f.shape[1])
                x[used] = relative_fit(f[:, used], y)
                params[op][k or 0] = tuple(x)
        return Link(params, contention, chunk=chunk, note=note, op_chunk=op_chunk,
                    whole_steps=whole_steps)

    @staticmethod
    def fit_size_dependent(rows, group=("naive", "ring", "tree"), small=4096, note="", non_temporal=None):
        """rows as for fit. The group's algorithms (module doc: size-dependent links) get a latency
        per step, the median over their rows of at most `small` bytes (where the bytes are under a
        tenth of the time) of t / steps, and share beta(n): at each measured n above `small`, the
        median over the group's rows at n of (t - latency) / bytes. The other algorithms
        (memcpy, all-gather, reduce-scatter alone: their sources are not rewritten between
        repetitions, or are written by the producer outside the timed part) keep their own fit;
        memcpy ("p2p") also its measured time per size, which time() interpolates (module doc);
        non_temporal: the memcpy threshold of the files' machine (Link), None where not recorded;
        each algorithm's own rows decide whether its drop at the threshold applies
        (non_temporal_step)."""
        base = Link.fit(rows, note=note)
        recorded = non_temporal
        nt_for = {op: non_temporal_step(rows, recorded, op) for op in ("p2p",) + tuple(group)}
        non_temporal = nt_for["p2p"]
        alpha = {}
        for op in group:
            xs = [t / latency_steps(op, k) for o, n, k, t in rows if o == op and n <= small]
            if xs:
                alpha[op] = float(np.median(xs))
        # Each row's per-byte cost above `small`, gathered by size (shared) and by algorithm, k and
        # size (each algorithm's own); the medians of each.
        shared, mine = {}, {}
        for o, n, k, t in sorted(rows):
            if o in alpha and n > small:
                b = (t - alpha[o] * latency_steps(o, k)) / traffic_bytes(o, n, k, non_temporal=nt_for[o])
                shared.setdefault(n, []).append(b)
                mine.setdefault((o, k), {}).setdefault(n, []).append(b)
        beta = {n: max(float(np.median(v)), 1e-15) for n, v in shared.items()}
        if not beta:
            return base
        own = {ok: {n: max(float(np.median(v)), 1e-15) for n, v in per_n.items()}
               for ok, per_n in mine.items()}
        copy = {}
        for o, n, k, t in rows:
            if o == "p2p":
                nt = non_temporal and n >= non_temporal
                copy.setdefault(k, {})[n] = t / NON_TEMPORAL_TRAFFIC if nt else t
        return Link(base.params, note=note, size_beta=beta, step_alpha=alpha, pair=fit_pair(rows),
                    copy=copy, non_temporal=non_temporal, own_beta=own, non_temporal_for=nt_for,
                    non_temporal_recorded=recorded)

    @staticmethod
    def fit_host_bound(rows, contention=None, note=""):
        """rows as for fit, with memcpy rows ("p2p"): the host-bound model (module doc). The
        copy's (latency, beta) come from the p2p rows; per other algorithm and k, alpha and the
        adds' cost in copies (0..8) by least squares of the log error on a grid (max() has no
        closed form)."""
        p2p = [r for r in rows if r[0] == "p2p"]
        n = np.array([r[1] for r in p2p], float)
        t = np.array([r[3] for r in p2p])
        lat = np.geomspace(t.min() / 2, t.max(), 240)[:, None, None]
        per_byte = np.geomspace(1e-12, 1e-7, 241)[None, :, None]
        err = np.log(np.maximum(lat, per_byte * n) / t)
        i, j = np.unravel_index(np.argmin((err * err).sum(-1)), err.shape[:2])
        beta = float(per_byte[0, j, 0])
        params = {"p2p": {2: (float(lat[i, 0, 0]), beta, 0.0)}}
        alphas = np.geomspace(1e-4, 0.3, 120)[:, None, None, None]
        starts = np.r_[0.0, np.geomspace(0.01, 3.0, 19)][None, :, None, None]
        adds = np.linspace(0.0, 8.0, 41)[None, None, :, None]
        for op, k in sorted({(r[0], r[2]) for r in rows if r[0] != "p2p"}):
            sel = [r for r in rows if r[0] == op and r[2] == k]
            m, nb, red = np.array([collective_features(op, x, k) for _, x, _, _ in sel]).T
            y = np.array([r[3] for r in sel])
            host = alphas * (m + starts)  # starts: the call's fixed host cost, in messages
            err = np.log(np.maximum(host, beta * (nb + adds * red)) / y)
            i, j, l = np.unravel_index(np.argmin((err * err).sum(-1)), err.shape[:3])
            a = float(alphas[i, 0, 0, 0])
            params.setdefault(op, {})[k] = (a, beta, beta * float(adds[0, 0, l, 0]),
                                            a * float(starts[0, j, 0, 0]))
        return Link(params, contention, note=note, host_bound=True)


# ---------------------------------------------------------------------------------------------
# Strategies. Each returns (total_ms, breakdown dict).


def data_parallel(comp, link, k, per_device_batch, allreduce="ring", grouping="bucketed",
                  overlap=False, buckets_bytes=None, net=LENET):
    """Every device: its shard's forward+backward (the step profile), then the allreduce(s).

    overlap: the allreduce of all buckets but the last runs under backward; what does not fit
    under backward stays exposed. Buckets and tensors in the order backward makes them ready
    (the last layer's first), so the last one is the first layer's.
    """
    t = comp.step(per_device_batch, k)
    if grouping == "per_tensor":
        sizes = tuple(reversed(net.tensor_bytes))
    elif buckets_bytes:
        sizes = buckets_bytes
    else:
        sizes = (net.gradient_bytes,)
    comm_each = [link.time(allreduce, n, k) for n in sizes]
    comm = sum(comm_each)
    if overlap and k > 1:
        backward = t * comp.backward_fraction
        exposed = max(comm_each[-1], comm - backward)
    else:
        exposed = comm
    return t + exposed, {"compute": t, "communication": comm, "exposed_communication": exposed}


def layer_split(comp, link, k, batch, microbatches=1, split=None, layer_ms=None, net=LENET,
                layer_timing="host clock", scale=1.0):
    """GPipe fill/drain over k stages: sum of the stage times + (m-1) x the slowest stage.

    In the (m-1) steady-state slots every stage computes at once, so they run at the devices'
    concurrent speed (Compute.sharing); the fill and drain, one stage at a time, at the solo
    speed of the profile.

    A stage's time per micro-batch is its layers' forward+backward at the micro-batch size plus
    the hand-offs it receives (activation forward, gradient back) as point-to-point copies.
    split: the stages' first layers after the first, as in the descriptor; default: the split
    that minimises the slowest stage (what "auto" does from its profile).
    layer_ms: per-layer forward+backward ms at the micro-batch size, when a profile of this very
    configuration exists (layer_split's own profiling pass in setup); else from the fit.
    layer_timing: how that profile was taken (strategy_report.profiled_layer_timing). "host
    clock" (eager passes, one host thread launching; the fit is such too) is priced with the
    launch contention of k host threads (Compute.contention); "graph replays" holds no host
    launches (each layer timed inside a captured graph, as the stages then run): none.
    scale: the batch scale of the compute (a virtual device on 1/s of a GPU's SMs computes batch
    b as the whole GPU computes s*b: calibrate.gpu_effective); the hand-offs carry the
    micro-batch's own bytes.
    """
    m = microbatches
    mb = batch / m
    lay = list(layer_ms) if layer_ms else comp.layer_ms(mb * scale)
    if not (layer_ms and layer_timing == "graph replays"):
        lay = [x * comp.contention(k) for x in lay]
    if split is None:
        split = best_split(lay, k)
    bounds = [0] + list(split) + [len(lay)]
    stages = []
    for j in range(k):
        work = sum(lay[bounds[j]:bounds[j + 1]])
        hand = 0.0
        if j > 0:  # receives activations forward; its own gradient goes back (counted at j-1)
            hand += link.time("p2p", 4 * net.activation_floats[bounds[j] - 1] * mb, 2, ranks=k)
        if j < k - 1:
            hand += link.time("p2p", 4 * net.activation_floats[bounds[j + 1] - 1] * mb, 2, ranks=k)
        stages.append(work + hand)
    total = sum(stages) + (m - 1) * max(stages) * comp.sharing(k)
    busy = sum(sum(lay[bounds[j]:bounds[j + 1]]) for j in range(k)) * m
    return total, {"compute": busy / k, "stage_ms": stages, "split": list(split),
                   "bubble_fraction": 1 - busy / (k * total)}


def best_split(layer_ms, k):
    best, best_cut = None, None
    n = len(layer_ms)

    def cuts(start, left):
        if left == 0:
            yield []
            return
        for c in range(start, n - left + 1):
            for rest in cuts(c + 1, left - 1):
                yield [c] + rest

    for cut in cuts(1, k - 1):
        b = [0] + cut + [n]
        worst = max(sum(layer_ms[b[j]:b[j + 1]]) for j in range(k))
        if best is None or worst < best:
            best, best_cut = worst, cut
    return best_cut


def channel_split(comp, link, k, batch, pairing="none", allreduce="ring", net=LENET, scale=1.0):
    """Every device: every layer at 1/k of its channels on the whole batch, plus the collectives
    the strategy_report lists (net.channel_split_ops; LeNet: all-gather of each output,
    reduce-scatter of input gradients; with megatron, conv2 | fc1 paired by two allreduces of fc1's
    128 units). The width efficiency is measured on k devices computing at once, so it holds their
    sharing (Compute.sharing) too: it is not applied again. scale: the batch scale of the
    compute on virtual devices (as in layer_split); the collectives carry the batch's own bytes."""
    cb = batch * scale
    t = sum(comp.layer_ms(cb, 1.0 / k)) * comp.width_factor(k) if k > 1 else comp.step(cb)
    if comp.host:
        t = max(t, comp.host[0] * comp.contention(k))
    f = 4 * batch  # bytes per float per example x batch
    ops = [(allreduce if op == "allreduce" else op, floats) for op, floats in net.channel_split_ops[pairing]]
    comm = sum(link.time(op, f * floats, k) for op, floats in ops)
    return t + comm, {"compute": t, "communication": comm, "exposed_communication": comm}


def predict(comp, link, config, net=LENET):
    """Step ms for a results run's config (strategy, devices, per-device batch, options) of `net`."""
    t, bd = _predict(comp, link, config, net)
    if config["strategy"] != "single":
        read_once = (config.get("options") or {}).get("read_back") == "epoch"
        t += (comp.group_overhead_read_once
              if read_once and comp.group_overhead_read_once is not None else comp.group_overhead)
    return t, bd


def _predict(comp, link, config, net):
    s = config["strategy"]
    k = config["devices"]
    o = config.get("options") or {}
    # A virtual device's batch scale (calibrate.gpu_effective): its compute at scale x the
    # batch, its messages at the batch's own bytes.
    scale = config.get("batch_scale", 1.0)
    if s == "single" or (s == "data_parallel" and k == 1):
        t = comp.step(config["global_batch"] * scale)
        graphed = s == "single" or o.get("allreduce") == "nccl"  # overlap too: one graph
        if graphed and o.get("cuda_graphs") and config.get("backend") == "cuda":
            t *= comp.graph_factor
        return t, {"compute": t, "communication": 0.0, "exposed_communication": 0.0}
    if s == "data_parallel":
        nb = o.get("buckets", 1)
        grouping = o.get("grouping", "bucketed")
        buckets = None
        if grouping != "per_tensor" and nb > 1:
            cap = o.get("bucket_bytes", 26214400)
            buckets = bucketize(cap, net)
        return data_parallel(comp, link, k, config["per_device_batch"] * scale, o.get("allreduce", "ring"),
                             grouping, bool(o.get("overlap")), buckets, net)
    if s == "layer_split":
        split = o.get("split")
        return layer_split(comp, link, k, config["global_batch"], o.get("microbatches", 1),
                           None if split in (None, "auto") else split, config.get("profiled_layer_ms"), net,
                           config.get("profiled_layer_timing", "host clock"), scale)
    if s == "channel_split":
        return channel_split(comp, link, k, config["global_batch"], o.get("pairing", "none"),
                             o.get("allreduce", "ring"), net, scale)
    raise ValueError("unknown strategy " + s)


def bucketize(cap, net=LENET):
    """DDP's grouping: whole tensors, last layer first, into buckets of at most cap bytes."""
    out, cur = [], 0
    for n in reversed(net.tensor_bytes):
        if cur and cur + n > cap:
            out.append(cur)
            cur = 0
        cur += n
    out.append(cur)
    return tuple(out)
