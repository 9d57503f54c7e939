"""Extra memory of backward-weights on large and long-signal problems, ours vs torch's.

Each (case, implementation) runs in a fresh process: the inputs are made, then one
call's peak RSS growth minus the result's size is taken (bench.extra_memory: the heap
trimmed first, VmHWM reset). A first call in a fresh process also counts the buffers
that our kernels keep per thread for later calls. Prints MB per case, ours and torch's
(aten.convolution_backward, oneDNN), and the bound of issue #24 item 4: 10 % of the
largest tensor plus one gradient copy per thread (+ 4 MiB of small per-thread buffers).

    python benchmarks/memory_bwd_weights.py [--threads 2] [--filter REGEX] [--isa avx2]
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (N, IC, OC, spatial, K, s, pads, data_format, ncx_path)
# Sizes: the largest tensor 64-128 MiB (the finding was a 2 x 2**30 line, 4.3 GiB extra).
CASES = {
    # Planar NCX dot tiles: few channels on a long line.
    "line_2ch_k3": (1, 2, 2, (1 << 23,), (3,), (1,), (1,), "NCX", "auto"),
    "line_n2_1to4_k4s2": (2, 1, 4, (1 << 21,), (4,), (2,), (1,), "NCX", "auto"),
    # Planar NCX im2col GEMMs: 16 channels on a long line.
    "line_16ch_k3": (1, 16, 16, (1 << 20,), (3,), (1,), (1,), "NCX", "auto"),
    # NCX through channels-last buffers (forced, then a layer the rule sends there).
    "line_16ch_k3_cl": (1, 16, 16, (1 << 20,), (3,), (1,), (1,), "NCX", "channels_last"),
    "img_2d_32ch_k3s2_cl": (2, 32, 32, (256, 256), (3, 3), (2, 2), (1, 1), "NCX",
                            "channels_last"),
    "line_256ch_k16s8": (1, 256, 256, (8192,), (16,), (8,), (4,), "NCX", "auto"),
    # Strided 1x1 on NCX (the gathered diff_dst of the call plan's gathers_1x1).
    "line_1x1_s2": (1, 16, 16, (1 << 20,), (1,), (2,), (0,), "NCX", "auto"),
    "img_1x1_s2": (4, 64, 64, (128, 128), (1, 1), (2, 2), (0, 0), "NCX", "auto"),
    # Benchmark layers whose NCX route changed (bench.py's cases).
    "resnet50_1x1_s2_op1": (4, 256, 512, (28, 28), (1, 1), (2, 2), (0, 0), "NCX", "auto"),
    "dcgan_128to64_32x32": (4, 128, 64, (32, 32), (4, 4), (2, 2), (1, 1), "NCX", "auto"),
    "unet3d_256to128_8^3": (2, 256, 128, (8, 8, 8), (2, 2, 2), (2, 2, 2), (0, 0, 0), "NCX",
                            "auto"),
    # Channels-last NXC tensors.
    "line_16ch_k3_nxc": (1, 16, 16, (1 << 20,), (3,), (1,), (1,), "NXC", None),
    "img_2d_32ch_k3s2_nxc": (2, 32, 32, (256, 256), (3, 3), (2, 2), (1, 1), "NXC", None),
}


def shapes(case):
    N, IC, OC, sp, K, s, pads, df, _ = CASES[case]
    out = tuple((i - 1) * st + k - 2 * p for i, k, st, p in zip(sp, K, s, pads))
    return N, IC, OC, sp, out, K, s, pads, df


def run_one(case, who, threads):
    sys.path.insert(0, HERE)
    import bench  # noqa: E402
    import torch

    torch.set_num_threads(threads)
    N, IC, OC, sp, out, K, s, pads, df = shapes(case)
    ncx_path = CASES[case][8]
    g = torch.Generator().manual_seed(0)
    x = torch.randn((N, IC) + sp, generator=g)
    gy = torch.randn((N, OC) + out, generator=g)
    if df == "NXC":
        x = x.movedim(1, -1).contiguous()
        gy = gy.movedim(1, -1).contiguous()
    wshape = (IC, OC) + K
    out_bytes = 4 * math.prod(wshape)
    if who == "torch":
        if df == "NXC":  # torch's channels_last memory format
            x = x.movedim(-1, 1)
            gy = gy.movedim(-1, 1)
        w = torch.empty(wshape)
        conv = torch.ops.aten.convolution_backward

        def fn():
            return conv(gy, x, w, None, list(s), list(pads), [1] * len(sp), True,
                        [0] * len(sp), 1, [False, True, False])[1]
    else:
        import torch_convtranspose as tct

        if ncx_path:
            tct.set_ncx_path(ncx_path)
        S = len(sp)

        def fn():
            return torch.ops.graph.conv_transpose_backward_weights(
                x, gy, None, strides=list(s), pads_begin=list(pads), pads_end=list(pads),
                dilations=[1] * S, output_padding=[], groups=1, data_format=df,
                weights_format="IOX", weights_shape=list(wshape))
    e = bench.extra_memory(fn, out_bytes)
    largest = 4 * max(x.numel(), gy.numel(), math.prod(wshape))
    print(json.dumps({"extra": e, "largest": largest, "grad": out_bytes}))


def measure(case, who, threads, isa=None, env=None):
    e = dict(os.environ if env is None else env)
    if isa:
        e["TORCH_CONVTRANSPOSE_ISA"] = isa
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", case, who,
                        "--threads", str(threads)], capture_output=True, text=True, env=e)
    if r.returncode != 0:
        raise RuntimeError(f"{case} {who}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bound(m, threads):
    return 0.1 * m["largest"] + threads * m["grad"] + 4 * 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--isa", default=None, help="TORCH_CONVTRANSPOSE_ISA for ours")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        run_one(a.one[0], a.one[1], a.threads)
        return
    mb = 2.0**20
    print(f"{'case':24s} {'largest':>9s} {'ours':>9s} {'torch':>9s} {'bound':>9s}  (MB extra)")
    worst = 0
    for case in CASES:
        if not re.search(a.filter, case):
            continue
        o = measure(case, "ours", a.threads, a.isa)
        t = measure(case, "torch", a.threads)
        b = bound(o, a.threads)
        flag = "" if o["extra"] <= b else "  OVER"
        worst = max(worst, o["extra"] / b)
        print(f"{case:24s} {o['largest'] / mb:9.1f} {max(0, o['extra']) / mb:9.1f} "
              f"{max(0, t['extra']) / mb:9.1f} {b / mb:9.1f}{flag}", flush=True)
    print(f"worst ours/bound: {worst:.2f}")


if __name__ == "__main__":
    main()
