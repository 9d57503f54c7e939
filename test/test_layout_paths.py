"""The ways the fast paths move data between layouts: dense NCX tensors go through
batch-chunked transposes (chunks of about a tenth of the batch), NXC ones straight
through, other strides through whole copies. Each must give the oracle's values
exactly (integer data) on every ISA."""

import problems as P
import pytest
import torch

ATTRS = dict(strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 1], dilations=[1, 2],
             output_padding=[1, 0], groups=2)


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (n, 6, 5, 7), generator=g).float()       # NCX
    w = torch.randint(-3, 4, (6, 4, 3, 3), generator=g).float()       # IOX
    b = torch.randint(-3, 4, (8,), generator=g).float()
    return x, w, b


def _views(x_ncx, fmt):
    """The same logical activation as: dense in its layout, channels_last memory
    (NCX only), and a non-contiguous slice."""
    dense = P.data_from_ncx(x_ncx, fmt).contiguous()
    out = {"dense": dense}
    if fmt == "NCX":
        out["channels_last"] = x_ncx.contiguous(memory_format=torch.channels_last)
    wide = torch.cat([dense, dense], dim=-1)
    out["sliced"] = wide[..., : dense.shape[-1]]
    return out


@pytest.mark.parametrize("n", [1, 9, 10, 11, 23])
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_forward_and_backward_layout_paths(isa, n, fmt):
    x, w, b = _data(n, seed=n)
    kw = dict(ATTRS, data_format=fmt, weights_format="IOX")
    want_y = P.oracle_forward(x.double(), w.double(), b.double(), ATTRS["strides"],
                              ATTRS["pads_begin"], ATTRS["pads_end"], ATTRS["dilations"],
                              ATTRS["output_padding"], ATTRS["groups"])
    want_dx = P.oracle_backward_data(want_y, w.double(), ATTRS["strides"], ATTRS["pads_begin"],
                                     ATTRS["pads_end"], ATTRS["dilations"], ATTRS["groups"],
                                     src_spatial=list(x.shape[2:]))
    want_dw = P.oracle_backward_weights(x.double(), want_y, list(w.shape), ATTRS["strides"],
                                        ATTRS["pads_begin"], ATTRS["pads_end"],
                                        ATTRS["dilations"], ATTRS["groups"])
    y_ncx = want_y.float()
    for name, xv in _views(x, fmt).items():
        y = torch.ops.graph.conv_transpose(xv, w, b, **kw)
        assert y.is_contiguous()
        assert torch.equal(P.data_to_ncx(y, fmt).double(), want_y), name
        for dname, dv in _views(y_ncx, fmt).items():
            dx = torch.ops.graph.conv_transpose_backward_data(
                dv, w, src_shape=P.data_shape_from_ncx(list(x.shape), fmt), **kw)
            assert torch.equal(P.data_to_ncx(dx, fmt).double(), want_dx), (name, dname)
            dw = torch.ops.graph.conv_transpose_backward_weights(
                xv, dv, weights_shape=list(w.shape), **kw)
            assert torch.equal(dw.double(), want_dw), (name, dname)


# 1x1 kernels with strides above 1 on dense NCX tensors: the backward passes gather
# the diff_dst elements they read (i*s - pb) and run as stride-1 problems when every
# src position lands inside diff_dst and diff_dst holds 2^19 floats or more; cases
# where some do not land inside (pads_begin, pads_end past output_padding), or small
# ones, take the general paths. Exact against the oracle on every NCX path.
GATHER_MIN = 2**19
STRIDED_1X1 = [
    # (src NCX shape, OC, strides, pads_begin, pads_end, output_padding, groups)
    ((2, 8, 64, 64), 16, [2, 2], [0, 0], [0, 0], [1, 1], 1),  # ResNet-style s2 op1
    ((1, 6, 24, 8, 20), 24, [2, 1, 3], [0, 0, 0], [0, 0, 1], [0, 0, 2], 2),  # 3D, grouped
    ((4, 4, 20000), 5, [3], [0], [0], [0], 1),  # 1D
    ((2, 8, 64, 128), 16, [2, 1], [0, 0], [0, 0], [1, 0], 1),  # stride 1 innermost
    ((2, 8, 5, 6), 5, [2, 2], [0, 0], [0, 0], [1, 1], 1),  # small: not gathered
    ((2, 8, 64, 64), 32, [2, 2], [1, 0], [0, 0], [1, 1], 1),  # pads_begin: src 0 outside
    ((2, 8, 64, 64), 32, [2, 2], [0, 0], [1, 1], [0, 0], 1),  # last src outside
]


def _strided_id(c):
    return "x".join(map(str, c[0])) + f"_oc{c[1]}_s{c[2]}_pb{c[3]}_pe{c[4]}"


@pytest.mark.parametrize("path", ["auto", "planar", "channels_last"])
@pytest.mark.parametrize("case", STRIDED_1X1, ids=_strided_id)
def test_strided_1x1_backward_ncx(tct, isa, case, path):
    shape, oc, s, pb, pe, op, g = case
    S = len(s)
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(-3, 4, shape, generator=gen).float()
    w = torch.randint(-3, 4, (shape[1], oc // g) + (1,) * S, generator=gen).float()
    attrs = dict(strides=s, pads_begin=pb, pads_end=pe, dilations=[1] * S, output_padding=op,
                 groups=g)
    y = P.oracle_forward(x.double(), w.double(), None, s, pb, pe, [1] * S, op, g)
    dy = torch.randint(-3, 4, y.shape, generator=gen).float()
    # the large cases are large enough to be gathered, where their pads allow it
    assert (dy.numel() >= GATHER_MIN) == (shape[-1] != 6)
    want_dx = P.oracle_backward_data(dy.double(), w.double(), s, pb, pe, [1] * S, g,
                                     src_spatial=list(shape[2:]))
    want_dw = P.oracle_backward_weights(x.double(), dy.double(), list(w.shape), s, pb, pe,
                                        [1] * S, g)
    kw = dict(attrs, data_format="NCX", weights_format="IOX")
    with tct.use_ncx_path(path):
        dx = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=list(shape), **kw)
        dw = torch.ops.graph.conv_transpose_backward_weights(
            x, dy, weights_shape=list(w.shape), **kw)
    assert torch.equal(dx.double(), want_dx)
    assert torch.equal(dw.double(), want_dw)


# Backward-weights of dense NCX activations of 4 MiB and more through channels-last
# buffers in pieces that stay in the caches: slabs of the outermost spatial axis
# where the kernel tiles diff_dst there (K = s), batch chunks otherwise; each later
# piece's gradient is added to the first's. Exact against the oracle.
PIECES = [
    # (src NCX shape, OC, K, strides, pads, weights_format)
    ((1, 16, 16, 16, 16), 32, [2, 2, 2], [2, 2, 2], [0, 0, 0], "IOX"),  # 3D slabs
    ((2, 8, 64, 128), 16, [2, 2], [2, 2], [0, 0], "OIX"),  # 2D slabs, 2 images
    ((8, 16, 64, 64), 16, [3, 3], [1, 1], [1, 1], "IOX"),  # batch chunks
    ((8, 16, 40, 40), 16, [5, 4], [3, 2], [2, 1], "IOX"),  # batch chunks, dst != src * s
    ((1, 8, 50000), 8, [2], [2], [0], "XOI"),  # 1D slabs
]


@pytest.mark.parametrize("case", PIECES, ids=lambda c: "x".join(map(str, c[0])))
def test_backward_weights_ncx_in_pieces(tct, isa, case):
    shape, oc, k, s, pads, wf = case
    S = len(s)
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randint(-3, 4, shape, generator=gen).float()
    w_iox_shape = [shape[1], oc] + k
    y = P.oracle_forward(x.double(), torch.zeros(w_iox_shape, dtype=torch.float64), None, s,
                         pads, pads, [1] * S, [0] * S, 1)
    dy = torch.randint(-3, 4, y.shape, generator=gen).float()
    assert 4 * (x.numel() + dy.numel()) >= 4 * 2**20  # large enough for pieces
    want = P.oracle_backward_weights(x.double(), dy.double(), w_iox_shape, s, pads, pads,
                                     [1] * S, 1)
    kw = dict(strides=s, pads_begin=pads, pads_end=pads, dilations=[1] * S,
              output_padding=[0] * S, groups=1, data_format="NCX", weights_format=wf)
    w_shape = list(P.weights_from_iox(torch.zeros(w_iox_shape), wf).shape)
    with tct.use_ncx_path("channels_last"):
        dw = torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=w_shape, **kw)
    assert torch.equal(P.weights_to_iox(dw, wf).double(), want)


# Kernels smaller than their strides (1x1 s2, k2 s3): the output phases that
# no tap reaches hold the bias alone, which the channels-last driver copies
# into those rows directly (bias_rows): by rows and by columns, column
# blocks wider than its 512-column row, more column blocks than it holds
# (many small groups), groups, 3D, every dtype and ISA
# (bf16 on AMX with its own tiles), dense NCX through the copies too.
BIAS_ONLY_CASES = [  # (N, IC, OC, spatial, K, s, groups)
    (2, 16, 16, (5, 5, 5), 1, 2, 1),
    (2, 64, 600, (4, 5), 1, 2, 1),
    (1, 1024, 1024, (4, 4), 1, 2, 1),
    (2, 24, 36, (5, 6), 2, 3, 2),
    (2, 1152, 1152, (4, 5), 1, 2, 96),  # 96 groups of 12 columns: a column block each
    (1, 320, 320, (4, 4), 1, 2, 8),    # 40 columns a group (AVX2: 5 blocks of 8 each)
]


@pytest.mark.parametrize("fmt", ["NXC", "NCX"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("case", BIAS_ONLY_CASES, ids=lambda c: f"{c[1]}to{c[2]}_k{c[4]}s{c[5]}")
def test_phases_without_taps_hold_the_bias(isa, case, dtype, fmt):
    N, IC, OC, sp, K, s, g = case
    S = len(sp)
    gen = torch.Generator().manual_seed(OC)
    x = torch.randint(-3, 4, (N, IC) + sp, generator=gen).to(dtype)
    w = torch.randint(-3, 4, (IC, OC // g) + (K,) * S, generator=gen).to(dtype)
    b = torch.randint(-3, 4, (OC,), generator=gen).to(dtype)
    attrs = dict(strides=[s] * S, pads_begin=[0] * S, pads_end=[0] * S, dilations=[1] * S)
    want = P.oracle_forward(x.double(), w.double(), b.double(), attrs["strides"],
                            attrs["pads_begin"], attrs["pads_end"], attrs["dilations"],
                            output_padding=[0] * S, groups=g).to(dtype)
    got = torch.ops.graph.conv_transpose(P.data_from_ncx(x, fmt).contiguous(), w, b, groups=g,
                                         data_format=fmt, weights_format="IOX", **attrs)
    assert torch.equal(P.data_to_ncx(got, fmt), want)
