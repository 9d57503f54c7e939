"""torch.func transforms and forward-mode AD through the graph ops (SPEC section 6):
grad, vjp, jvp, jacfwd, hessian, vmap(grad) per-sample gradients and dual tensors,
checked in f64 against the same transforms of the plain-PyTorch oracle."""

import problems as P
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch import func

IDS = [p.ident() for p in P.SAMPLE_PROBLEMS]
BWD = [p for p in P.SAMPLE_PROBLEMS if P.bwd_consistent(p, p.out_spatial())]


def _ops(p, ours):
    """(forward, backward_data, backward_weights) of problem p as functions of tensors."""
    a = p.attrs()
    if ours:
        fwd = lambda x, w, b=None: torch.ops.graph.conv_transpose(x, w, b, **a)  # noqa: E731
        bd = lambda dy, w: torch.ops.graph.conv_transpose_backward_data(  # noqa: E731
            dy, w, src_shape=p.src_shape(), **a)
        bw = lambda x, dy: torch.ops.graph.conv_transpose_backward_weights(  # noqa: E731
            x, dy, weights_shape=p.w_shape(), **a)
    else:
        fwd = lambda x, w, b=None: P.ref_conv_transpose(x, w, b, **a)  # noqa: E731
        bd = lambda dy, w: P.ref_conv_transpose_backward_data(  # noqa: E731
            dy, w, src_shape=p.src_shape(), **a)
        bw = lambda x, dy: P.ref_conv_transpose_backward_weights(  # noqa: E731
            x, dy, weights_shape=p.w_shape(), **a)
    return fwd, bd, bw


def _tensors(p, seed):
    x, w, b = P.problem_tensors(p, torch.float64, seed=seed)
    dy = P.diff_dst_tensor(p, torch.float64, seed=seed + 1)
    if b is None:
        b = torch.randn(p.OC, dtype=torch.float64)
    return x, w, b, dy


def _close(got, want):
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("p", P.SAMPLE_PROBLEMS, ids=IDS)
def test_jvp_forward(p):
    P.tct()
    x, w, b, _ = _tensors(p, 0)
    tx, tw, tb, _ = _tensors(p, 10)
    ours, ref = _ops(p, True)[0], _ops(p, False)[0]
    for primals, tangents in [((x, w, b), (tx, tw, tb)), ((x, w), (tx, tw)),
                              ((x, w, b), (torch.zeros_like(x), torch.zeros_like(w), tb))]:
        out, t = func.jvp(ours, primals, tangents)
        want_out, want_t = func.jvp(ref, primals, tangents)
        _close(out, want_out)
        _close(t, want_t)
        assert t.abs().sum() > 0


@pytest.mark.parametrize("p", BWD, ids=[q.ident() for q in BWD])
def test_jvp_backward_ops(p):
    P.tct()
    x, w, _, dy = _tensors(p, 1)
    tx, tw, _, tdy = _tensors(p, 11)
    _, bd, bw = _ops(p, True)
    _, rbd, rbw = _ops(p, False)
    _close(func.jvp(bd, (dy, w), (tdy, tw))[1], func.jvp(rbd, (dy, w), (tdy, tw))[1])
    _close(func.jvp(bw, (x, dy), (tx, tdy))[1], func.jvp(rbw, (x, dy), (tx, tdy))[1])


@pytest.mark.parametrize("p", P.SAMPLE_PROBLEMS, ids=IDS)
def test_dual_tensors(p):
    """torch.autograd.forward_ad outside torch.func: the tangent is set, never dropped."""
    P.tct()
    x, w, b, _ = _tensors(p, 2)
    tx, tw, _, _ = _tensors(p, 12)
    ours, ref = _ops(p, True)[0], _ops(p, False)[0]
    want = func.jvp(ref, (x, w, b), (tx, tw, torch.zeros_like(b)))[1]
    with fwAD.dual_level():
        y = ours(fwAD.make_dual(x, tx), fwAD.make_dual(w, tw), b)
        got = fwAD.unpack_dual(y).tangent
    assert got is not None
    _close(got, want)


@pytest.mark.parametrize("p", P.SAMPLE_PROBLEMS, ids=IDS)
def test_grad_and_vjp(p):
    P.tct()
    x, w, b, dy = _tensors(p, 3)
    ours, ref = _ops(p, True)[0], _ops(p, False)[0]
    loss = lambda f: (lambda x, w, b: (f(x, w, b) * dy).sum())  # noqa: E731
    for g, want in zip(func.grad(loss(ours), argnums=(0, 1, 2))(x, w, b),
                       func.grad(loss(ref), argnums=(0, 1, 2))(x, w, b)):
        _close(g, want)
    _, vjp_ours = func.vjp(ours, x, w, b)
    _, vjp_ref = func.vjp(ref, x, w, b)
    for g, want in zip(vjp_ours(dy), vjp_ref(dy)):
        _close(g, want)


@pytest.mark.parametrize("p", P.SAMPLE_PROBLEMS, ids=IDS)
def test_per_sample_gradients(p):
    """vmap(grad(...)) over the batch equals a loop of single-sample gradients."""
    P.tct()
    x, w, b, dy = _tensors(p, 4)
    ours = _ops(p, True)[0]

    def loss(w, b, xi, dyi):
        return (ours(xi.unsqueeze(0), w, b) * dyi.unsqueeze(0)).sum()

    gw, gb = func.vmap(func.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0, 0))(w, b, x, dy)
    for n in range(p.N):
        w1, b1 = w.clone().requires_grad_(), b.clone().requires_grad_()
        want_w, want_b = torch.autograd.grad(loss(w1, b1, x[n], dy[n]), (w1, b1))
        _close(gw[n], want_w)
        _close(gb[n], want_b)


def test_jacfwd_jacrev_hessian():
    """Forward-over-reverse (hessian) and jacfwd against the oracle on a tiny problem."""
    P.tct()
    p = P.SAMPLE_PROBLEMS[1]
    x, w, b, _ = _tensors(p, 5)
    ours, ref = _ops(p, True)[0], _ops(p, False)[0]
    _close(func.jacfwd(lambda w: ours(x, w, b))(w), func.jacrev(lambda w: ref(x, w, b))(w))
    _close(func.jacrev(lambda x: ours(x, w, b))(x), func.jacfwd(lambda x: ref(x, w, b))(x))
    cube = lambda f: (lambda w: f(x, w, b).pow(3).sum())  # noqa: E731
    _close(func.hessian(cube(ours))(w), func.hessian(cube(ref))(w))


def test_forward_ad_backward_graph():
    """Reverse-over-forward: the tangent is itself differentiable."""
    P.tct()
    p = P.SAMPLE_PROBLEMS[0]
    x, w, b, dy = _tensors(p, 6)
    tx = torch.randn_like(x)

    def grad_of_tangent(f):
        w1 = w.clone().requires_grad_()
        with fwAD.dual_level():
            t = fwAD.unpack_dual(f(fwAD.make_dual(x, tx), w1, b)).tangent
        return torch.autograd.grad((t * dy).sum(), w1)[0]

    _close(grad_of_tangent(_ops(p, True)[0]), grad_of_tangent(_ops(p, False)[0]))


def _loop(f, in_dims, args, B):
    """What vmap must give: f on each slice, stacked."""
    outs = []
    for i in range(B):
        outs.append(f(*[a if d is None else a.select(d, i) for a, d in zip(args, in_dims)]))
    return torch.stack(outs)


def _batch_of(t, dim, B, seed):
    g = torch.Generator().manual_seed(seed)
    shape = list(t.shape)
    shape.insert(dim, B)
    return torch.randn(shape, generator=g, dtype=t.dtype)


@pytest.mark.parametrize("p", BWD, ids=[q.ident() for q in BWD])
def test_vmap_batching_rules(p, recwarn):
    """vmap over every combination of batched inputs of the three ops equals a loop of
    the oracle, through this library's batching rules (no per-slice fallback)."""
    P.tct()
    x, w, b, dy = _tensors(p, 7)
    B = 3
    fwd, bd, bw = _ops(p, True)
    rfwd, rbd, rbw = _ops(p, False)
    cases = [
        (fwd, rfwd, (x, w, b), (0, None, None)),
        (fwd, rfwd, (x, w, b), (None, 0, None)),
        (fwd, rfwd, (x, w, b), (1, 0, 0)),
        (fwd, rfwd, (x, w, b), (None, None, 0)),
        (bd, rbd, (dy, w), (0, None)),
        (bd, rbd, (dy, w), (None, 1)),
        (bd, rbd, (dy, w), (2, 0)),
        (bw, rbw, (x, dy), (0, None)),
        (bw, rbw, (x, dy), (None, 0)),
        (bw, rbw, (x, dy), (1, 1)),
    ]
    for k, (f, ref, args, dims) in enumerate(cases):
        batched = [a if d is None else _batch_of(a, d, B, 100 + k) for a, d in zip(args, dims)]
        got = func.vmap(f, in_dims=dims)(*batched)
        _close(got, _loop(ref, dims, batched, B))
    assert not [w for w in recwarn if "batching rule" in str(w.message)]
