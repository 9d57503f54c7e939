"""Autograd (SPEC section 6): gradcheck / gradgradcheck in f64 for all ops, and
forward's backward against the oracle's autograd in f32."""

import problems as P
import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

AUTOGRAD_PROBLEMS = P.SAMPLE_PROBLEMS + [
    # SAME_UPPER with output_padding and D % s != 0: the backward ops' own auto_pad rule
    # would give other pads, so the gradient must use the forward's resolved pads.
    P.Problem(N=1, IC=2, OC=3, src_sp=(3,), K=(3,), strides=(2,), dilations=(1,),
              pads_begin=(0,), pads_end=(0,), output_padding=(1,), auto_pad="SAME_UPPER",
              data_format="NXC", weights_format="IOX", bias=True,
              name="1d_same_upper_op1_NXC"),
    P.Problem(N=2, IC=2, OC=4, src_sp=(2, 3), K=(2, 2), strides=(3, 2), dilations=(2, 1),
              pads_begin=(2, 0), pads_end=(0, 3), output_padding=(1, 1), groups=2,
              auto_pad="valid", data_format="NCX", weights_format="XOI",
              name="2d_valid_g2_XOI"),
    P.Problem(N=1, IC=3, OC=2, src_sp=(3, 2), K=(2, 3), strides=(1, 2), dilations=(2, 1),
              pads_begin=(1, 2), pads_end=(3, 0), output_padding=(1, 0),
              data_format="NXC", weights_format="OIX", bias=True,
              name="2d_pe_gt_pb_NXC_OIX"),
]
IDS = [p.ident() for p in AUTOGRAD_PROBLEMS]
BWD_PROBLEMS = [p for p in AUTOGRAD_PROBLEMS if P.bwd_consistent(p, p.out_spatial())]
BWD_IDS = [p.ident() for p in BWD_PROBLEMS]
ISAS = P.isa_param_names()


def _fwd(p):
    a = p.attrs()
    return lambda x, w, b=None: torch.ops.graph.conv_transpose(x, w, b, **a)


@pytest.mark.parametrize("p", AUTOGRAD_PROBLEMS, ids=IDS)
def test_gradcheck_forward(p):
    P.tct()
    x, w, b = P.problem_tensors(p, torch.float64, seed=1, requires_grad=True)
    f = _fwd(p)
    args = (x, w, b) if b is not None else (x, w)
    assert gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("p", AUTOGRAD_PROBLEMS, ids=IDS)
def test_gradgradcheck_forward(p):
    P.tct()
    x, w, b = P.problem_tensors(p, torch.float64, seed=2, requires_grad=True)
    f = _fwd(p)
    args = (x, w, b) if b is not None else (x, w)
    assert gradgradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


def _bwd_data_fn(p, which):
    a = p.attrs(src_shape=p.src_shape())
    if which == "backprop":
        a["filter_format"] = a.pop("weights_format")
        return lambda dy, w: torch.ops.graph.conv_transpose_backprop_data(dy, w, **a)
    return lambda dy, w: torch.ops.graph.conv_transpose_backward_data(dy, w, **a)


def _bwd_w_fn(p, mode):
    a = p.attrs()
    if mode == "attr":
        a["weights_shape"] = p.w_shape()
        return lambda x, dy: torch.ops.graph.conv_transpose_backward_weights(x, dy, None, **a)
    ws = torch.tensor(p.w_shape(), dtype=torch.int64)
    return lambda x, dy: torch.ops.graph.conv_transpose_backward_weights(x, dy, ws, **a)


@pytest.mark.parametrize("which", ["bwd_data", "backprop"])
@pytest.mark.parametrize("p", BWD_PROBLEMS, ids=BWD_IDS)
def test_gradcheck_backward_data(p, which):
    P.tct()
    _, w, _ = P.problem_tensors(p, torch.float64, seed=3, requires_grad=True)
    dy = P.diff_dst_tensor(p, torch.float64, seed=4, requires_grad=True)
    f = _bwd_data_fn(p, which)
    assert gradcheck(f, (dy, w), eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)
    assert gradgradcheck(f, (dy, w), eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


@pytest.mark.parametrize("mode", ["attr", "input"])
@pytest.mark.parametrize("p", BWD_PROBLEMS, ids=BWD_IDS)
def test_gradcheck_backward_weights(p, mode):
    P.tct()
    x, _, _ = P.problem_tensors(p, torch.float64, seed=5, requires_grad=True)
    dy = P.diff_dst_tensor(p, torch.float64, seed=6, requires_grad=True)
    f = _bwd_w_fn(p, mode)
    assert gradcheck(f, (x, dy), eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)
    assert gradgradcheck(f, (x, dy), eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


def test_autograd_problem_set():
    assert len(BWD_PROBLEMS) >= 5
    assert any(not P.bwd_consistent(p, p.out_spatial()) for p in AUTOGRAD_PROBLEMS)


_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("p", AUTOGRAD_PROBLEMS, ids=IDS)
def test_forward_backward_matches_oracle_autograd_f32(p, isa_name):
    P.require_isa(isa_name)
    x, w, b = P.problem_tensors(p, torch.float32, seed=7, integer=True, requires_grad=True)
    dy = P.diff_dst_tensor(p, torch.float32, seed=8, integer=True)
    with P.use_isa(isa_name):
        y = torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
        inputs = [x, w] + ([b] if b is not None else [])
        grads = torch.autograd.grad(y, inputs, dy)
    # the oracle's autograd (f64, NCX/IOX), mapped back to the op's layouts
    xo = P.data_to_ncx(x.detach(), p.data_format).double().requires_grad_(True)
    wo = P.weights_to_iox(w.detach(), p.weights_format).double().requires_grad_(True)
    bo = None if b is None else b.detach().double().requires_grad_(True)
    pb, pe = p.resolved_pads()
    yo = P.oracle_forward(xo, wo, bo, p.strides, pb, pe, p.dilations, p.op_full(), p.groups)
    dyo = P.data_to_ncx(dy, p.data_format).double()
    go = torch.autograd.grad(yo, [xo, wo] + ([bo] if bo is not None else []), dyo)
    want = [P.data_from_ncx(go[0], p.data_format), P.weights_from_iox(go[1], p.weights_format)]
    want += list(go[2:])
    assert len(grads) == len(want)
    for got, exp in zip(grads, want):
        P.assert_result(got, exp.contiguous(), torch.float32, exact=True)
    # and torch's own ConvTranspose autograd where it can express the problem
    tp = p.torch_padding()
    if tp is not None:
        xt = P.data_to_ncx(x.detach(), p.data_format).requires_grad_(True)
        wt = P.weights_to_iox(w.detach(), p.weights_format).requires_grad_(True)
        bt = None if b is None else b.detach().requires_grad_(True)
        yt = _CONV_T[p.S](xt, wt, bt, stride=p.strides, padding=tp[0], output_padding=tp[1],
                          groups=p.groups, dilation=p.dilations)
        gt = torch.autograd.grad(yt, [xt, wt] + ([bt] if bt is not None else []),
                                 P.data_to_ncx(dy, p.data_format))
        torch.testing.assert_close(P.data_to_ncx(grads[0], p.data_format), gt[0])
        torch.testing.assert_close(P.weights_to_iox(grads[1], p.weights_format), gt[1])
        if bt is not None:
            torch.testing.assert_close(grads[2], gt[2])


@pytest.mark.parametrize("p", AUTOGRAD_PROBLEMS[:4], ids=IDS[:4])
def test_partial_requires_grad(p):
    """Only some inputs require grad: the others get no gradient, the rest are right."""
    x, w, b = P.problem_tensors(p, torch.float64, seed=9)
    w.requires_grad_(True)
    y = torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
    assert y.requires_grad
    dy = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (gw,) = torch.autograd.grad(y, [w], dy)
    want = P.ref_conv_transpose_backward_weights(x, dy, weights_shape=p.w_shape(), **p.attrs())
    torch.testing.assert_close(gw, want, atol=1e-11, rtol=1e-10)
    assert x.grad is None
    # no grad anywhere: the result does not require grad
    y2 = torch.ops.graph.conv_transpose(x, w.detach(), b, **p.attrs())
    assert not y2.requires_grad


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "same_lower", "VALID"])
@pytest.mark.parametrize("op", ["bwd_data", "bwd_data_src_shape", "backprop", "bwd_w"])
def test_gradcheck_backward_ops_auto_pad_from_diff_dst(op, auto_pad):
    """The backward ops take SAME pads from D (here D % s != 0, so they differ from the
    forward rule): their derivatives must keep those pads."""
    P.tct()
    g = torch.Generator().manual_seed(11)
    a = dict(strides=[2], pads_begin=[3], pads_end=[0], dilations=[1], auto_pad=auto_pad,
             data_format="NCX", weights_format="IOX")
    dy = torch.randn(2, 2, 7, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(3, 2, 3, dtype=torch.float64, generator=g, requires_grad=True)
    pb, pe = P.resolve_pads(auto_pad, [7], [3], [2], [1], [3], [0], "bwd")
    isz = P.backward_data_default_size(7, 3, 2, 1, pb[0], pe[0])
    x = torch.randn(2, 3, isz, dtype=torch.float64, generator=g, requires_grad=True)
    if op == "bwd_data":
        f = lambda dy, w: torch.ops.graph.conv_transpose_backward_data(dy, w, **a)  # noqa: E731
        args = (dy, w)
    elif op == "bwd_data_src_shape":
        def f(dy, w):
            return torch.ops.graph.conv_transpose_backward_data(dy, w, **a,
                                                                src_shape=[2, 3, isz])
        args = (dy, w)
    elif op == "backprop":
        b = dict(a)
        b["filter_format"] = b.pop("weights_format")
        f = lambda dy, w: torch.ops.graph.conv_transpose_backprop_data(dy, w, **b)  # noqa: E731
        args = (dy, w)
    else:
        def f(x, dy):
            return torch.ops.graph.conv_transpose_backward_weights(x, dy, **a,
                                                                   weights_shape=[3, 2, 3])
        args = (x, dy)
    out = f(*args)
    if op == "bwd_w":
        want = P.ref_conv_transpose_backward_weights(x.detach(), dy.detach(),
                                                     weights_shape=[3, 2, 3], **a)
    else:
        want = P.ref_conv_transpose_backward_data(dy.detach(), w.detach(), **a)
    torch.testing.assert_close(out, want, atol=1e-12, rtol=1e-10)
    assert gradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5)
    assert gradgradcheck(f, args, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)
