"""Extra memory of backward-weights on long signals and large images (issue #24 item 4).

Each memory case runs in a fresh process (benchmarks/memory_bwd_weights.py --one):
one call's peak RSS growth minus the result's size must stay within 10 % of the
largest tensor plus a gradient copy per thread plus 2 MiB of small buffers. Before
the bound, the planar dot tiles' line chunks (1/8 of a long line per thread), the
whole-tensor transposes of the NCX channels-last route and the gathered diff_dst of
a strided 1x1 kernel grew with the problem (16-129 MB here on 64 MB tensors).
The same routes, at sizes the reference runs quickly, must be exact on integer data.
"""

import os
import sys

import pytest
import torch

import torch_convtranspose as tct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import memory_bwd_weights as M  # noqa: E402

THREADS = 2


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux VmHWM")
@pytest.mark.parametrize("case,isa", [
    ("line_2ch_k3", None),          # planar dot tiles
    ("line_2ch_k3", "avx2"),
    ("line_16ch_k3_cl", None),      # NCX through channels-last buffers: slabs with halos
    ("img_2d_32ch_k3s2_cl", None),  # the same on images (2D slabs)
    ("line_1x1_s2", None),          # strided 1x1: not gathered whole
])
def test_extra_memory_bounded(case, isa):
    if isa and isa not in tct.available_isas():
        pytest.skip(f"no {isa}")
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(tct.__file__))
    env["PYTHONPATH"] = os.pathsep.join([root] + env.get("PYTHONPATH", "").split(os.pathsep))
    m = M.measure(case, "ours", THREADS, isa, env)
    if m["extra"] is None:
        pytest.skip("no VmHWM")
    bound = 0.1 * m["largest"] + THREADS * m["grad"] + 2 * 2**20
    assert m["extra"] <= bound, (case, m["extra"] / 2**20, bound / 2**20)


def _bwd_w(x, gy, wshape, s, pads, df="NCX"):
    S = len(s)
    return torch.ops.graph.conv_transpose_backward_weights(
        x, gy, None, strides=list(s), pads_begin=list(pads), pads_end=list(pads),
        dilations=[1] * S, output_padding=[], groups=1, data_format=df, weights_format="IOX",
        weights_shape=list(wshape))


# (name, N, IC, OC, spatial, K, s, pads, ncx_path): the routes of the memory cases,
# at sizes where they still apply.
EXACT = [
    ("planar_dot_capped_chunks", 1, 2, 2, (1 << 21,), (3,), (1,), (1,), "auto"),
    ("planar_dot_k4s2", 2, 1, 4, (1 << 19,), (4,), (2,), (1,), "auto"),
    ("cl_line_slabs_halo", 1, 16, 16, (1 << 17,), (3,), (1,), (1,), "channels_last"),
    ("cl_2d_slabs_halo", 1, 16, 16, (160, 160), (3, 3), (2, 2), (1, 1), "channels_last"),
    ("cl_larger_pieces", 4, 128, 64, (32, 32), (4, 4), (2, 2), (1, 1), "channels_last"),
    ("gather_in_chunks", 4, 256, 512, (28, 28), (1, 1), (2, 2), (0, 0), "auto"),
    ("strided_1x1_not_gathered", 1, 16, 16, (1 << 17,), (1,), (2,), (0,), "auto"),
]


@pytest.mark.parametrize("case", EXACT, ids=[c[0] for c in EXACT])
def test_exact_on_integers(case):
    _, N, IC, OC, sp, K, s, pads, path = case
    out = tuple((i - 1) * st + k - 2 * p for i, k, st, p in zip(sp, K, s, pads))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-2, 3, (N, IC) + sp, generator=g).float()
    gy = torch.randint(-2, 3, (N, OC) + out, generator=g).float()
    wshape = (IC, OC) + K
    with tct.use_ncx_path(path):
        ours = _bwd_w(x, gy, wshape, s, pads)
    with tct.use_isa("reference"):
        ref = _bwd_w(x, gy, wshape, s, pads)
    assert torch.equal(ours, ref)
