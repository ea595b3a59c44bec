"""Hardware presets: this machine and each GPU run as measured, two clusters from published figures.

Each preset is (Compute, Link). Measured presets are fitted in model/calibrate.py; the published
ones reuse a measured per-GPU compute, an H100's where one was measured, else the H200's (H100 SXM
and H200 share the GH100 chip, 132 SMs, 67 TFLOP/s fp32; LeNet's step is latency-bound, so the
H200's extra memory bandwidth is moot), and take their links from the sources cited beside each
number.
"""
from . import perf

NO_CHUNKS = 1 << 62  # NCCL pipelines internally; its per-step latency is alpha, not per 256 KiB


def nvlink_h100(gpu_compute):
    # 8x H100 SXM5 on NVLink 4 / NVSwitch: nccl-tests all_reduce_perf bus bandwidth 460-480 GB/s at
    # large sizes (theoretical 450 GB/s each way): docs.alayanew.com/en/docs/tech-blog/
    # 2026-05-06-nccl-tests ("8xH100 SXM5 NVLink-only 460-480"). beta = 1 / busbw with the ring's
    # 2(k-1)/k n bytes, so busbw is what the formula reproduces. alpha = 2 us per ring step is an
    # assumption (NCCL's LL protocol over NVLink: a 14-step ring on 8 GPUs ~ 28 us for small
    # messages), not a published figure. Reductions run at HBM speed and are hidden: gamma = 0.
    busbw = 460e9
    p = (2e-3, 1e3 / busbw, 0.0)
    return gpu_compute, perf.Link({"ring": p, "tree": p, "naive": p}, chunk=NO_CHUNKS,
                                  note="8xH100 NVLink: busbw 460 GB/s (nccl-tests, published), "
                                       "alpha 2 us assumed; beyond 8 GPUs the same link assumed "
                                       "(an NVLink-switch domain)")


def infiniband_ndr(gpu_compute):
    # Multi-node H100, one ConnectX-7 InfiniBand NDR port (400 Gb/s = 50 GB/s each way) per GPU, as
    # in DGX H100. A flat ring across nodes is bounded by the per-GPU NDR link: nccl-tests bus
    # bandwidth 40-50 GB/s for "IB NDR (no NVLink)" (saturncloud.io/blog/crusoe-nccl-cluster-
    # validation); 45 GB/s taken. alpha = 6 us per step is an assumption (IB NDR switch latency
    # ~1 us plus NCCL's per-step proxy and protocol cost), not a published figure.
    busbw = 45e9
    p = (6e-3, 1e3 / busbw, 0.0)
    return gpu_compute, perf.Link({"ring": p, "tree": p, "naive": p}, chunk=NO_CHUNKS,
                                  note="multi-node InfiniBand NDR: busbw 45 GB/s per GPU (published "
                                       "range 40-50), alpha 6 us assumed")


def published_kind(gpus):
    """The measured GPU whose compute the published presets take: the H100 (theirs) where one was
    measured, else the H200 (the same chip), else the first."""
    for kind in ("h100", "h200"):
        if kind in gpus:
            return kind
    return next(iter(gpus))


def virtual_name(kind):
    """The preset name of a GPU kind's virtual devices as measured."""
    return "%s virtual devices (measured)" % kind


def all_presets(cpu, gpus):
    """cpu: (Compute, Link) as fitted; gpus: {kind: (Compute, Link)} as fitted, h200 first. The
    published presets use published_kind's compute with a whole GPU per device (no SM share)."""
    # One process per GPU there (as DDP runs): the eager step's launch floor stays, but no
    # contention between the host threads of one process.
    h = gpus[published_kind(gpus)][0]
    gpu_compute = perf.Compute(h.line, h.layers, h.backward_fraction, h.note + "; one process per GPU",
                               host=(h.host[0], [h.host[1][0]] * 4), graph_factor=h.graph_factor)
    out = {"cpu-2core-xeon (measured)": cpu}
    for kind, model in gpus.items():
        out[virtual_name(kind)] = model
    out["8xH100 NVLink (published)"] = nvlink_h100(gpu_compute)
    out["H100 + InfiniBand NDR (published)"] = infiniband_ndr(gpu_compute)
    return out


# ---------------------------------------------------------------------------------------------
# AlexNet. No AlexNet step was ever timed on a GPU here (experiments/alexnet-gpu.json has not
# run), so its GPU compute is an assumption built from stated figures, not a measurement:
#   per example: its training FLOP (6 x forward multiply-adds, from the results' config.model)
#                at a throughput = the GPU's FP32 peak x an efficiency;
#   efficiency:  LeNet's measured one on the GPU whose compute the published presets take
#                (published_kind: the marginal per-example time of its fitted eager step against
#                LeNet's 13.5 MFLOP, calibrate.gpu_compute; the report prints it: 28 % of
#                67 TFLOP/s on the 2026-12-04 H200 run) or a higher one given as a sensitivity
#                (cuDNN's large convolutions run nearer peak than LeNet's small ones; no figure
#                measured here);
#   fixed per step: LeNet's fitted fixed time on that GPU x (AlexNet's 14 layers / LeNet's 4), plus
#                SGD reading the weights and gradient and writing the weights (3 x 187 MB) at the
#                H100 SXM's 3.35 TB/s HBM3 (NVIDIA H100 datasheet);
#   per layer:   the per-example time split in proportion to the layer's multiply-adds (pooling,
#                dropout and resize get none), the fixed time evenly;
#   channel_split's narrower kernels assumed as efficient as the full ones (width efficiency 1;
#                optimistic for channel_split).
FP32_PEAK_TFLOPS = 67.0   # H100 SXM5 and H200: 67 TFLOP/s FP32 (NVIDIA H100/H200 datasheets)
HBM_BYTES_PER_S = 3.35e12  # H100 SXM5 HBM3 (NVIDIA H100 datasheet)
LENET_TRAINING_FLOP = 13.5e6  # README's Models table: 2,250,360 multiply-adds x 6


def lenet_gpu_efficiency(gpu_compute):
    """LeNet's marginal FP32 efficiency on a measured GPU: training FLOP per example / fitted ms per example."""
    return LENET_TRAINING_FLOP / (gpu_compute.line[1] * 1e-3) / (FP32_PEAK_TFLOPS * 1e12)


def alexnet_gpu_compute(gpu_compute, net, efficiency, gpu="H200"):
    macs = list(net.layer_macs)
    per_example = 6.0 * sum(macs) / (FP32_PEAK_TFLOPS * 1e12 * efficiency) * 1e3  # ms
    fixed = gpu_compute.line[0] * len(net.layers) / len(perf.LAYERS) + 3 * net.gradient_bytes / HBM_BYTES_PER_S * 1e3
    n = len(macs)
    layers = [(fixed / n, per_example * m / sum(macs)) for m in macs]
    return perf.Compute((fixed, per_example), layers, gpu_compute.backward_fraction, names=net.layers,
                        note="assumed, not measured: AlexNet's training FLOP at %.0f %% of the FP32 peak "
                             "(%.0f TFLOP/s); fixed %.2f ms (LeNet's fitted %s fixed time x %d/%d layers "
                             "+ SGD over 3 x %d B at 3.35 TB/s); per layer in proportion to multiply-adds"
                             % (100 * efficiency, FP32_PEAK_TFLOPS, fixed, gpu, len(net.layers), len(perf.LAYERS),
                                net.gradient_bytes))


def alexnet_presets(cpu, gpu_compute, net, sensitivity_efficiency=0.5, gpu="H200"):
    """cpu: (Compute, Link) fitted on AlexNet's CPU profile; gpu_compute: LeNet's fitted on the
    GPU `gpu` (published_kind's). The GPU presets take the published links of nvlink_h100 /
    infiniband_ndr with the assumed compute above, at LeNet's measured efficiency and at
    `sensitivity_efficiency`. Virtual devices are left out for AlexNet (no AlexNet GPU step was
    measured, and the collectives' fits cover LeNet's sizes)."""
    e = lenet_gpu_efficiency(gpu_compute)
    out = {"cpu-2core-xeon (measured)": cpu}
    for eff, tag in ((e, "LeNet's %s efficiency %.0f %%" % (gpu, 100 * e)),
                     (sensitivity_efficiency, "%.0f %% of peak" % (100 * sensitivity_efficiency))):
        comp = alexnet_gpu_compute(gpu_compute, net, eff, gpu)
        out["8xH100 NVLink (published; compute assumed, %s)" % tag] = nvlink_h100(comp)
        out["H100 + InfiniBand NDR (published; compute assumed, %s)" % tag] = infiniband_ndr(comp)
    return out
