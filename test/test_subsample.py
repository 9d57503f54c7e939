"""Backward-data through a subsampled diff_dst (plan.cpp, subsampled_dst; docs/heuristics.md
C29): where the innermost dilation d > 1 divides the stride, every tap reads diff_dst at
positions of one residue modulo g = gcd(s, d) on each such axis. Those positions,
gathered dense from the channels-last diff_dst, are the diff_dst of the problem with
s / g, d / g and pads (pb + r) / g, whose innermost taps fuse. The result must be the
plain problem's: exact against the f64 oracle on integer data (pads of every residue,
output padding: diff_dst positions past the taps' reach, 1D / 2D / 3D), NaN / Inf at the
positions read must reach the outputs they feed, and values at positions never read
(which the gather skips) must not matter, as they do not in the oracle."""

import problems as P
import pytest
import torch

import torch_convtranspose as tct

CASES = [  # (N, IC, OC, src spatial, K, s, d, pads_begin, pads_end, output_padding)
    (2, 16, 3, (9, 11), 7, 2, 2, 3, 2, 0),  # GoogLeNet conv1 style
    (1, 24, 3, (10, 9), 3, 2, 2, 0, 0, 1),  # residue 0, output padding
    (2, 8, 4, (7, 8), 3, 2, 2, 1, 1, 1),  # residue 1
    (1, 20, 2, (6, 7), 3, 4, 2, 2, 1, 0),  # s/g = 2, d/g = 1
    (1, 12, 5, (5, 6), 4, 3, 3, 2, 0, 2),  # g = 3, residue 1
    (3, 17, 3, (13,), 5, 2, 2, 4, 1, 1),  # 1D, odd channels
    (1, 16, 3, (4, 5, 6), 3, 2, 2, 1, 2, 0),  # 3D
    (2, 32, 16, (6, 6), 3, 2, 2, 1, 1, 0),  # 16 diff_dst channels: the fused limit
]
NOT_SUBSAMPLED = [  # (N, IC, OC, src spatial, K, s, d, pb, pe, op): the rule leaves alone
    (1, 16, 3, (8, 8), 3, 3, 2, 1, 1, 0),  # d does not divide s
    (1, 16, 3, (8, 8), 3, 1, 2, 1, 1, 0),  # stride 1
    (1, 16, 3, (8, 8), 3, 2, 1, 1, 1, 0),  # no dilation: fuses already
    (1, 16, 17, (8, 8), 3, 2, 2, 1, 1, 0),  # 17 diff_dst channels: no fused taps
    (1, 16, 3, (8, 8), 1, 2, 2, 0, 0, 1),  # 1x1
]


def _ints(shape, seed, lo=-3, hi=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(torch.float32)


def _setup(case, fmt="NXC", src_extra=0):
    N, IC, OC, sp, K, s, d, pb, pe, op = case
    S = len(sp)
    out = [P.forward_size(i, K, s, d, pb, pe, op) for i in sp]
    kw = dict(strides=[s] * S, pads_begin=[pb] * S, pads_end=[pe] * S, dilations=[d] * S,
              data_format=fmt, weights_format="IOX")
    dy = P.data_from_ncx(_ints((N, OC, *out), 1), fmt).contiguous()
    w = _ints((IC, OC) + (K,) * S, 2)
    src_shape = P.data_shape_from_ncx([N, IC] + list(sp), fmt)
    return dy, w, src_shape, kw


def _plan(dy, w, src_shape, kw, isa):
    with tct.use_isa(isa), tct.plans(execute=False) as lines:
        torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    return lines[0]


def _isas():
    return [i for i in ("avx2", "avx512") if i in tct.available_isas()]


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("case", CASES, ids=str)
def test_subsampled_backward_data_exact(case, isa):
    dy, w, src_shape, kw = _setup(case)
    line = _plan(dy, w, src_shape, kw, isa)
    assert " s1x1=subsample " in line and " fuse=1 " in line, line
    with tct.use_isa(isa):
        got = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    ref = P.ref_conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    assert torch.equal(got.double(), ref)


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("case", NOT_SUBSAMPLED, ids=str)
def test_rule_leaves_other_shapes_alone(case, isa):
    dy, w, src_shape, kw = _setup(case)
    assert " s1x1=subsample " not in _plan(dy, w, src_shape, kw, isa)


@pytest.mark.parametrize("isa", _isas())
def test_ncx_and_16_bit_not_subsampled(isa):
    case = CASES[0]
    dy, w, src_shape, kw = _setup(case, fmt="NCX")
    assert " s1x1=subsample " not in _plan(dy, w, src_shape, kw, isa)
    dy, w, src_shape, kw = _setup(case)
    assert " s1x1=subsample " not in _plan(dy.bfloat16(), w.bfloat16(), src_shape, kw, isa)


@pytest.mark.parametrize("isa", _isas())
def test_nonfinite_read_and_unread_positions(isa):
    """A NaN / Inf at a position the taps read reaches exactly the outputs the
    oracle says; garbage at a position no tap reads (odd stride residue) changes
    nothing."""
    case = (1, 16, 3, (9, 11), 7, 2, 2, 3, 2, 0)  # residue r = 1 on both axes
    dy, w, src_shape, kw = _setup(case)
    assert " s1x1=subsample " in _plan(dy, w, src_shape, kw, isa)
    dy[0, 5, 7, 1] = float("nan")  # (5, 7): odd, read
    dy[0, 9, 3, 0] = float("inf")
    dy[0, 4, 6, 2] = float("nan")  # even: never read
    dy[0, 2, 8, 0] = float("-inf")
    with tct.use_isa(isa):
        got = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    ref = P.ref_conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    assert torch.equal(got.double().isnan(), ref.isnan())
    fin = ~ref.isnan()
    assert torch.equal(got.double()[fin], ref[fin])
    assert ref.isnan().any() and not ref.isnan().all()


MIXED = [  # per axis: (N, IC, OC, src spatial, K, s, d, pads_begin, pads_end, output_padding)
    (2, 16, 3, (7, 9), (3, 5), (4, 2), (2, 2), (1, 2), (0, 1), (1, 1)),  # g 2, 2; r 1, 0
    (1, 12, 4, (6, 8), (3, 3), (3, 4), (2, 2), (0, 3), (1, 0), (0, 1)),  # outer g = 1
    (1, 8, 3, (3, 4, 6), (1, 2, 3), (2, 3, 2), (1, 3, 2), (0, 2, 1), (0, 0, 2), (1, 1, 0)),
]


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("case", MIXED, ids=str)
def test_subsampled_axes_differ(case, isa):
    """Factors and residues that differ between the axes (an outer axis left
    whole, a 1x1 axis, g = 3 next to g = 2): each axis's own residue is gathered."""
    N, IC, OC, sp, K, s, d, pb, pe, op = case
    out = [P.forward_size(*a) for a in zip(sp, K, s, d, pb, pe, op)]
    kw = dict(strides=list(s), pads_begin=list(pb), pads_end=list(pe), dilations=list(d),
              data_format="NXC", weights_format="IOX")
    dy = P.data_from_ncx(_ints((N, OC, *out), 5), "NXC").contiguous()
    w = _ints((IC, OC) + tuple(K), 6)
    src_shape = [N] + list(sp) + [IC]
    assert " s1x1=subsample " in _plan(dy, w, src_shape, kw, isa)
    with tct.use_isa(isa):
        got = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    ref = P.ref_conv_transpose_backward_data(dy, w, src_shape=src_shape, **kw)
    assert torch.equal(got.double(), ref)


@pytest.mark.parametrize("isa", _isas())
def test_long_signal_keeps_its_route(isa):
    """The gathered copy stays within the other routes' extra-memory bound (a
    twentieth of the largest tensor, or 4 MiB): a long 1D signal, whose copy would
    be half of diff_dst (4.8 MB here), is not subsampled."""
    L = 400_000
    kw = dict(strides=[2], pads_begin=[1], pads_end=[1], dilations=[2],
              data_format="NXC", weights_format="IOX")
    out_len = P.forward_size(L, 3, 2, 2, 1, 1, 0)
    dy = torch.zeros(1, out_len, 3)
    w = torch.zeros(8, 3, 3)
    assert " s1x1=subsample " not in _plan(dy, w, [1, L, 8], kw, isa)
    short = torch.zeros(1, P.forward_size(4000, 3, 2, 2, 1, 1, 0), 3)
    assert " s1x1=subsample " in _plan(short, w, [1, 4000, 8], kw, isa)
