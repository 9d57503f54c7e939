"""Grouped layers with few channels a group (ResNeXt-style decoders, grouped
upsamplers) against torch's conv_transpose, forward and backward-data, in one
process with the same threads, calls alternating (min and median of each).
bench.py's benchdnn layers have groups of 4-192 channels on small problems only;
these are the shapes behind heuristics C28 (small groups as super-groups).

    .venv/bin/python benchmarks/small_groups.py [--threads 2] [--secs 2] [--layouts nxc,ncx]
"""

import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_convtranspose as tct

LAYERS = [  # (N, IC, OC, groups, H=W, K, stride, pad)
    (4, 128, 128, 16, 32, 4, 2, 1),  # 8 channels a group
    (4, 256, 256, 32, 16, 4, 2, 1),  # 8
    (4, 128, 128, 32, 32, 4, 2, 1),  # 4
    (8, 64, 64, 32, 32, 3, 1, 1),    # 2
    (4, 128, 128, 8, 32, 4, 2, 1),   # 16
]


def timed(fns, secs):
    for f in fns:
        f()
    times = [[] for _ in fns]
    end = time.time() + secs
    while time.time() < end:
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [(min(t) * 1e3, statistics.median(t) * 1e3) for t in times]


def run_layer(layer, layout, secs):
    """(description, pass, torch min/med, ours min/med, results match) per pass."""
    N, IC, OC, G, H, K, S, P = layer
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, IC, H, H, generator=g)
    w = torch.randn(IC, OC // G, K, K, generator=g)
    mf = torch.channels_last if layout == "nxc" else torch.contiguous_format
    x = x.contiguous(memory_format=mf)
    y = F.conv_transpose2d(x, w, None, S, P, 0, G)
    dy = torch.randn(y.shape, generator=g).contiguous(memory_format=mf)
    # the raw op on the same memory: NXC views of channels-last tensors
    nxc = layout == "nxc"
    view = (lambda t: t.permute(0, 2, 3, 1)) if nxc else (lambda t: t)
    attrs = dict(strides=[S, S], pads_begin=[P, P], pads_end=[P, P], dilations=[1, 1],
                 groups=G, data_format="NXC" if nxc else "NCX", weights_format="IOX")

    def ours_bwd():
        dx = torch.ops.graph.conv_transpose_backward_data(
            view(dy), w, src_shape=list(view(x).shape), **attrs)
        return dx.permute(0, 3, 1, 2) if nxc else dx

    def torch_bwd():
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [S, S], [P, P], [1, 1], True, [0, 0], G, [True, False, False])[0]

    passes = {
        "fwd": (lambda: F.conv_transpose2d(x, w, None, S, P, 0, G),
                lambda: tct.conv_transpose2d(x, w, None, S, P, 0, G)),
        "bwd_d": (torch_bwd, ours_bwd),
    }
    desc = f"N{N} {IC}->{OC} g{G} ({IC // G}/grp) {H}x{H} k{K}s{S}"
    rows = []
    for name, (ref_fn, ours_fn) in passes.items():
        t, o = timed([ref_fn, ours_fn], secs)
        want, got = ref_fn(), ours_fn()
        ok = torch.allclose(got, want, rtol=1e-3, atol=1e-3 * want.abs().max().item())
        rows.append((desc, name, t, o, ok))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--secs", type=float, default=2.0,
                    help="seconds of timed calls per layer and pass")
    ap.add_argument("--layouts", default="nxc,ncx")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"threads {a.threads}, isa {tct.get_isa()}, uarch {tct.get_uarch()}, "
          f"torch {torch.__version__}")
    print(f"{'layer':34s} {'pass':5s} {'layout':6s} {'torch ms':>16s} {'ours ms':>16s} "
          f"{'ratio':>6s} check")
    ratios, bad = [], 0
    for layer in LAYERS:
        for layout in a.layouts.split(","):
            for desc, name, (t_min, t_med), (o_min, o_med), ok in run_layer(layer, layout, a.secs):
                ratios.append(t_min / o_min)
                bad += not ok
                print(f"{desc:34s} {name:5s} {layout:6s} {t_min:7.3f}/{t_med:7.3f}  "
                      f"{o_min:7.3f}/{o_med:7.3f} {t_min / o_min:6.2f} "
                      f"{'ok' if ok else 'MISMATCH'}")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geomean ratio (torch / ours, min times) {geo:.3f}, min {min(ratios):.3f} "
          f"over {len(ratios)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
