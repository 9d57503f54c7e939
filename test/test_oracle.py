"""Self-checks of the test oracle (problems.py) against torch and a naive loop
implementation of SPEC section 3. These do not need torch_convtranspose."""

import random

import problems as P
import pytest
import torch
import torch.nn.functional as F

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

_rng = random.Random(1234)
ORACLE_PROBLEMS = [P.random_problem(_rng) for _ in range(60)]


def _explicit(p):
    pb, pe = p.resolved_pads()
    return pb, pe


@pytest.mark.parametrize("p", ORACLE_PROBLEMS, ids=lambda p: p.ident())
def test_oracle_forward_matches_naive(p):
    x, w, b = P.problem_tensors(p, torch.float64, seed=7, integer=True)
    xn, wn = P.data_to_ncx(x, p.data_format), P.weights_to_iox(w, p.weights_format)
    pb, pe = _explicit(p)
    want = P.naive_forward(xn, wn, b, p.strides, pb, pe, p.dilations, p.output_padding,
                           p.groups)
    got = P.oracle_forward(xn, wn, b, p.strides, pb, pe, p.dilations, p.op_full(), p.groups)
    assert torch.equal(got, want)
    # the op-level reference in the op's own layouts agrees too
    ref = P.ref_conv_transpose(x, w, b, **p.attrs())
    assert torch.equal(P.data_to_ncx(ref, p.data_format), want)


@pytest.mark.parametrize("p", ORACLE_PROBLEMS, ids=lambda p: p.ident())
def test_oracle_matches_torch_autograd(p):
    """Forward equals F.conv_transpose*d where expressible; backward oracles are the
    adjoints of the forward (dot-product test, and torch autograd when expressible)."""
    x, w, b = P.problem_tensors(p, torch.float64, seed=3)
    xn = P.data_to_ncx(x, p.data_format).detach().clone().requires_grad_(True)
    wn = P.weights_to_iox(w, p.weights_format).detach().clone().requires_grad_(True)
    pb, pe = _explicit(p)
    y = P.oracle_forward(xn, wn, b, p.strides, pb, pe, p.dilations, p.op_full(), p.groups)
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    gx_o = P.oracle_backward_data(dy, wn.detach(), p.strides, pb, pe, p.dilations, p.groups,
                                  list(p.src_sp))
    gw_o = P.oracle_backward_weights(xn.detach(), dy, list(wn.shape), p.strides, pb, pe,
                                     p.dilations, p.groups)
    # adjoint identities: <F(x, W), dy> = <x, bwd_data(dy)> = <W, bwd_w(x, dy)>
    lhs = (y.detach() * dy).sum()
    if b is not None:
        lhs = lhs - (b.reshape([1, -1] + [1] * p.S) * dy).sum()
    torch.testing.assert_close((xn.detach() * gx_o).sum(), lhs, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close((wn.detach() * gw_o).sum(), lhs, atol=1e-9, rtol=1e-9)
    # autograd of the oracle itself
    gx, gw = torch.autograd.grad(y, [xn, wn], dy)
    torch.testing.assert_close(gx_o, gx, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(gw_o, gw, atol=1e-12, rtol=1e-12)
    tp = p.torch_padding()
    if tp is not None:
        pad, opad = tp
        yt = _CONV_T[p.S](xn, wn, b, stride=p.strides, padding=pad, output_padding=opad,
                          groups=p.groups, dilation=p.dilations)
        torch.testing.assert_close(y, yt, atol=1e-12, rtol=1e-12)
        gxt, gwt = torch.autograd.grad(yt, [xn, wn], dy)
        torch.testing.assert_close(gx_o, gxt, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(gw_o, gwt, atol=1e-12, rtol=1e-12)


def test_oracle_problem_set_covers_torch_inexpressible_cases():
    # the pads_end > pads_begin crop path must be exercised by the checks above
    assert any(p.torch_padding() is None for p in ORACLE_PROBLEMS)
    assert any(p.torch_padding() is not None for p in ORACLE_PROBLEMS)


@pytest.mark.parametrize(
    "auto_pad,size,k,s,d,direction,want",
    [
        # SPEC section 9: 6x6, K=4, s=1
        ("SAME_UPPER", 6, 4, 1, 1, "fwd", (1, 2)),
        ("same_lower", 6, 4, 1, 1, "fwd", (2, 1)),
        ("VALID", 6, 4, 1, 1, "fwd", (0, 0)),
        ("None", 6, 4, 1, 1, "fwd", (5, 7)),
        # eff_k < s: total clamps at 0
        ("SAME_UPPER", 4, 2, 3, 1, "fwd", (0, 0)),
        # dilation: eff_k = 5, s = 2 -> total 3
        ("SAME_UPPER", 4, 3, 2, 2, "fwd", (1, 2)),
        ("SAME_LOWER", 4, 3, 2, 2, "fwd", (2, 1)),
        # backward: D % s != 0 -> total = eff_k - D % s
        ("SAME_UPPER", 7, 4, 3, 1, "bwd", (1, 2)),
        ("SAME_UPPER", 6, 4, 3, 1, "bwd", (0, 1)),
        ("SAME_LOWER", 6, 4, 3, 1, "bwd", (1, 0)),
    ],
)
def test_resolve_pads_by_hand(auto_pad, size, k, s, d, direction, want):
    pb, pe = P.resolve_pads(auto_pad, [size], [k], [s], [d], [5], [7], direction)
    assert (pb[0], pe[0]) == want


def test_layout_helpers_round_trip():
    g = torch.Generator().manual_seed(0)
    for S in (1, 2, 3):
        w = torch.randn([4, 3] + [2 + a for a in range(S)], generator=g)
        for fmt in P.WEIGHTS_FORMATS:
            wf = P.weights_from_iox(w, fmt)
            assert list(wf.shape) == P.weights_shape_from_iox(list(w.shape), fmt)
            assert torch.equal(P.weights_to_iox(wf, fmt), w)
        x = torch.randn([2, 5] + [3 + a for a in range(S)], generator=g)
        for fmt in P.DATA_FORMATS:
            xf = P.data_from_ncx(x, fmt)
            assert list(xf.shape) == P.data_shape_from_ncx(list(x.shape), fmt)
            assert torch.equal(P.data_to_ncx(xf, fmt), x)
    # by hand: IOX (I=4, O=3, K=(5, 6)) in each layout
    iox = [4, 3, 5, 6]
    assert P.weights_shape_from_iox(iox, "XOI") == [5, 6, 3, 4]
    assert P.weights_shape_from_iox(iox, "OIX") == [3, 4, 5, 6]
    assert P.weights_shape_from_iox(iox, "XIO") == [5, 6, 4, 3]
    assert P.data_shape_from_ncx([2, 7, 5, 6], "NXC") == [2, 5, 6, 7]
