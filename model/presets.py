"""Hardware presets: this machine and the H200 as measured, two clusters from published figures.

Each preset is (Compute, Link). Measured presets are fitted in model/calibrate.py; the published
ones reuse the H200's measured per-GPU compute (H100 SXM and H200 share the GH100 chip, 132 SMs,
67 TFLOP/s fp32; LeNet's step is latency-bound, so the H200's extra memory bandwidth is moot) and
take their links from the sources cited beside each number.
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


def all_presets(cpu, h200):
    """cpu, h200: (Compute, Link) as fitted. The published presets use the H200's compute with
    a whole GPU per device (no SM share)."""
    # One process per GPU there (as DDP runs): the eager step's launch floor stays, but no
    # contention between the host threads of one process.
    h = h200[0]
    gpu_compute = perf.Compute(h.line, h.layers, h.backward_fraction, h.note + "; one process per GPU",
                               host=(h.host[0], [h.host[1][0]] * 4), graph_factor=h.graph_factor)
    return {
        "cpu-2core-xeon (measured)": cpu,
        "h200 virtual devices (measured)": h200,
        "8xH100 NVLink (published)": nvlink_h100(gpu_compute),
        "H100 + InfiniBand NDR (published)": infiniband_ndr(gpu_compute),
    }
