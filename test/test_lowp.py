"""bf16 / f16 on the fast ISAs (issue #21): 16-bit activations go through the
f32 kernels in batch chunks (route=convert16 in the call plan), every result
the f32 sum rounded once to the 16-bit type.

Integer-valued data, so f32 sums are exact and the f64 oracle rounded once to
the dtype is the exact expected result; a result rounded more than once (per
chunk, per piece) differs from it. test_random_oracle.py runs the random
problems in bf16 / f16 on every ISA as well; here: the route is the one
expected, chunked backward-weights sums, NaN / Inf, layouts and tails."""

import problems as P
import pytest
import torch
import torch_convtranspose as tct

FAST_ISAS = [i for i in ("avx2", "avx512", "avx512_amx") if i in P.isa_param_names()]
DTYPES = [torch.bfloat16, torch.float16]


def _ints(shape, dtype, seed, lo=-3, hi=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _attrs(S, s=2, p=1):
    return dict(strides=[s] * S, pads_begin=[p] * S, pads_end=[p] * S, dilations=[1] * S)


def _oracle(op, x, w, S, s, p, groups=1, dy=None):
    conv_t = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
              torch.nn.functional.conv_transpose3d)[S - 1]
    if op == "fwd":
        return conv_t(x.double(), w.double(), stride=s, padding=p, groups=groups)
    xd = x.double().requires_grad_(op == "bwd_d")
    wd = w.double().requires_grad_(op == "bwd_w")
    y = conv_t(xd, wd, stride=s, padding=p, groups=groups)
    y.backward(dy.double())
    return xd.grad if op == "bwd_d" else wd.grad


def _run(op, x, w, dy, S, s, p, groups=1, data_format="NCX"):
    a = dict(_attrs(S, s, p), groups=groups, data_format=data_format, weights_format="IOX")
    if op == "fwd":
        return torch.ops.graph.conv_transpose(x, w, None, **a)
    if op == "bwd_d":
        return torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=list(x.shape), **a)
    return torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=list(w.shape), **a)


CASES = [  # (S, N, IC, OC, spatial, K, s, p, groups): tails, depthwise, 1x1, 3D, batch 1
    (2, 3, 13, 7, (9, 11), 4, 2, 1, 1),
    (2, 2, 16, 16, (8, 8), 4, 2, 1, 16),
    (2, 2, 24, 18, (7, 5), 3, 1, 1, 3),
    (2, 1, 33, 17, (6, 6), 1, 2, 0, 1),
    (1, 4, 9, 5, (37,), 16, 8, 4, 1),
    (3, 2, 6, 10, (3, 4, 5), 2, 2, 0, 1),
]


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("layout", ["ncx", "nxc", "channels_last"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d", "bwd_w"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d_n{c[1]}_{c[2]}to{c[3]}_g{c[8]}")
def test_exact_and_routed(case, op, layout, dtype, isa):
    S, N, IC, OC, sp, K, s, p, g = case
    x = _ints((N, IC) + sp, dtype, 1)
    w = _ints((IC, OC // g) + (K,) * S, dtype, 2)
    y_shape = _oracle("fwd", x, w, S, s, p, g).shape
    dy = _ints(y_shape, dtype, 3)
    want = _oracle(op, x, w, S, s, p, g, dy).to(dtype)
    df = "NCX"
    if layout == "nxc":  # NXC data format: channels last in the logical order
        perm = [0] + list(range(2, S + 2)) + [1]
        x, dy, df = x.permute(perm).contiguous(), dy.permute(perm).contiguous(), "NXC"
        want = want.permute(perm) if op != "bwd_w" else want
    elif layout == "channels_last" and S >= 2:
        fmt = torch.channels_last if S == 2 else torch.channels_last_3d
        x, dy = x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)
    with P.use_isa(isa), tct.plans() as lines:
        got = _run(op, x, w, dy, S, s, p, g, df)
    assert got.dtype == dtype
    assert torch.equal(got, want.contiguous() if op == "bwd_w" else want)
    assert len(lines) == 1 and "route=convert16" in lines[0], lines


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_backward_weights_chunks_rounded_once(dtype, isa):
    # 64 images of 4 x 32768 positions: the route widens them in 8 chunks of 8
    # images; every gradient element sums about 2**21 products of small signed
    # integers (exact in f32), to values that need more bits than the 16-bit
    # types have, so rounding each chunk's partial sum before adding differs
    # from the f64 sum rounded once.
    N, C, L = 64, 4, 1 << 15
    x = _ints((N, C, L), dtype, 4)
    dy = _ints((N, C, L), dtype, 5)
    w_shape = [C, C, 3]
    a = dict(strides=[1], pads_begin=[1], pads_end=[1], dilations=[1], data_format="NCX",
             weights_format="IOX", weights_shape=w_shape)
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(x, dy, **a)
    assert "route=convert16 images=8 chunks=8" in lines[0], lines[0][:300]
    xd = x.double()
    wd = torch.zeros(w_shape, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.conv_transpose1d(xd, wd, padding=1).backward(dy.double())
    want = wd.grad
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    assert torch.equal(got, want.to(dtype))
    # Rounding each chunk's sum first gives another result.
    per_chunk = sum(_chunk_grad(xd[i:i + 8], dy.double()[i:i + 8], w_shape).to(dtype).double()
                    for i in range(0, N, 8))
    assert not torch.equal(per_chunk.to(dtype), got)


def _chunk_grad(x, dy, w_shape):
    w = torch.zeros(w_shape, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.conv_transpose1d(x, w, padding=1).backward(dy)
    return w.grad


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("op", ["fwd", "bwd_d", "bwd_w"])
def test_nan_and_inf_propagate(op, bad, dtype, isa):
    S, s, p = 2, 2, 1
    x = _ints((2, 5, 6, 7), dtype, 6)
    w = _ints((5, 3, 4, 4), dtype, 7, 1, 3)  # no zero weights: inf * 0 would be NaN
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dtype, 8, 1, 3)
    if op == "bwd_d":
        dy[1, 2, 3, 4] = bad
    else:
        x[1, 2, 3, 4] = bad
    want = _oracle(op, x, w, S, s, p, 1, dy).to(dtype)
    with P.use_isa(isa):
        got = _run(op, x, w, dy, S, s, p)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert torch.equal(got[finite], want[finite])
