"""bf16 / f16 on the fast ISAs (issue #21): 16-bit activations go through the
f32 kernels in batch chunks (route=convert16 in the call plan), every result
the f32 sum rounded once to the 16-bit type.

Integer-valued data, so f32 sums are exact and the f64 oracle rounded once to
the dtype is the exact expected result; a result rounded more than once (per
chunk, per piece) differs from it. test_random_oracle.py runs the random
problems in bf16 / f16 on every ISA as well; here: the route is the one
expected, chunked backward-weights sums, NaN / Inf, layouts and tails."""

import contextlib
import re

import problems as P
import pytest
import torch

import torch_convtranspose as tct

FAST_ISAS = [i for i in ("avx2", "avx512", "avx512_bf16", "avx512_amx") if i in P.isa_param_names()]
DTYPES = [torch.bfloat16, torch.float16]


def _ints(shape, dtype, seed, lo=-3, hi=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _attrs(S, s=2, p=1, d=1):
    return dict(strides=[s] * S, pads_begin=[p] * S, pads_end=[p] * S, dilations=[d] * S)


def _oracle(op, x, w, S, s, p, groups=1, dy=None, d=1, b=None):
    """Plain torch in f64: the forward (with bias b), or the gradient of x or w."""
    conv_t = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
              torch.nn.functional.conv_transpose3d)[S - 1]
    kw = dict(stride=s, padding=p, dilation=d, groups=groups)
    if op == "fwd":
        return conv_t(x.double(), w.double(), None if b is None else b.double(), **kw)
    xd = x.double().requires_grad_(op == "bwd_d")
    wd = w.double().requires_grad_(op == "bwd_w")
    y = conv_t(xd, wd, **kw)
    y.backward(dy.double())
    return xd.grad if op == "bwd_d" else wd.grad


def _run(op, x, w, dy, S, s, p, groups=1, data_format="NCX", d=1, b=None):
    """Our op on tensors in data_format's layout (x: src, its shape for backward-data)."""
    a = dict(_attrs(S, s, p, d), groups=groups, data_format=data_format, weights_format="IOX")
    if op == "fwd":
        return torch.ops.graph.conv_transpose(x, w, b, **a)
    if op == "bwd_d":
        return torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=list(x.shape), **a)
    return torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=list(w.shape), **a)


def _assert_equal_nonfinite(got, want):
    """got == want, NaN where want has NaN, the same infinities."""
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert torch.equal(got[finite], want[finite])


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
    # 64 images of 4 x 32768 positions, 4 -> 4 channels, k7 (GEMM tiles on
    # pixel lists that would load each element 7 times, more than
    # kMaxListWiden: the route widens the images in 8 chunks of 8 instead);
    # every gradient element sums about 2**21 products of small
    # signed integers (exact in f32), to values that need more bits than the
    # 16-bit types have, so rounding each chunk's partial sum before adding
    # differs from the f64 sum rounded once.
    # (Channels-last GEMM layers take no chunks: test_bww16_*; dense NCX takes
    # the planar kernels without chunks, test_planar16_backward_weights_*.)
    N, C, L, K = 64, 4, 1 << 15, 7
    x = _ints((N, C, L), dtype, 4)
    dy = _ints((N, C, L), dtype, 5)
    w_shape = [C, C, K]
    a = dict(strides=[1], pads_begin=[K // 2], pads_end=[K // 2], dilations=[1], groups=1,
             data_format="NXC", weights_format="IOX", weights_shape=w_shape)
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(_nxc(x, 1), _nxc(dy, 1), **a)
    assert "route=convert16 images=8 chunks=8" in lines[0], lines[0][:300]
    xd = x.double()
    want = _chunk_grad(xd, dy.double(), w_shape, padding=K // 2)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    assert torch.equal(got, want.to(dtype))
    # Rounding each chunk's sum first gives another result.
    per_chunk = sum(
        _chunk_grad(xd[i:i + 8], dy.double()[i:i + 8], w_shape, padding=K // 2).to(dtype).double()
        for i in range(0, N, 8))
    assert not torch.equal(per_chunk.to(dtype), got)


# The f32 copies' batch chunks are of equal size: 8 images of 64 channels on
# 32x32 / 64x64 (1.25 MiB of f32 a chunk allows 7) in 4 + 4, not 7 + 1 (a
# one-image chunk is a call of its own); 9 in 5 + 4. Plans only (dry run);
# the chunked routes' results: the test above and test_exact_and_routed.
@pytest.mark.parametrize("N, images, chunks", [(8, 4, 2), (9, 5, 2)])
def test_convert16_chunks_are_balanced(N, images, chunks):
    P.require_isa("avx2")
    x = torch.zeros((N, 64, 32, 32), dtype=torch.bfloat16)
    dy = torch.zeros((N, 64, 64, 64), dtype=torch.bfloat16)
    a = dict(_attrs(2, 2, 1), groups=64, data_format="NCX", weights_format="IOX",
             weights_shape=[64, 1, 4, 4])
    with P.use_isa("avx2"), tct.plans(execute=False) as lines:
        torch.ops.graph.conv_transpose_backward_weights(x, dy, **a)
    assert f"route=convert16 images={images} chunks={chunks} " in lines[0], lines[0][:300]


def _chunk_grad(x, dy, w_shape, padding):
    w = torch.zeros(w_shape, dtype=torch.float64, requires_grad=True)
    torch.nn.functional.conv_transpose1d(x, w, padding=padding).backward(dy)
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
    _assert_equal_nonfinite(got, want)


# --- bf16 on the pair tiles, AMX (isa avx512_amx) and VDPBF16PS (isa
# avx512_bf16, run under an AMD uarch's rules: P.use_isa): channels-last
# forward / backward-data read the bf16 activations in place and multiply on
# the tiles (route convert16 with amx={...} / dpbf16={...}); results rounded
# once, by the tiles (out16=1) or from the f32 sum of the reduction chunks
# (out16=0).

PAIR_ISAS = ["avx512_bf16", "avx512_amx"]
KEY = {"avx512_amx": "amx={", "avx512_bf16": "dpbf16={"}  # the plan line's driver
BWW_KEY = {"avx512_amx": "amx={bww_amx", "avx512_bf16": "dpbf16={bww_pairs"}

PAIR_CASES = [  # (S, N, IC, OC, spatial, K, s, p, groups)
    (2, 3, 45, 19, (9, 11), 4, 2, 1, 1),    # odd reductions (45, 19), a 16-column tile
    (2, 2, 64, 40, (8, 8), 4, 2, 1, 1),     # OC tail in the 32x32 tile
    (2, 2, 70, 96, (5, 6), 3, 2, 0, 2),     # groups, odd channels per group
    (2, 1, 33, 17, (6, 6), 1, 2, 0, 1),     # 1x1 strided
    (1, 4, 19, 37, (37,), 16, 8, 4, 1),     # 1D
    (3, 2, 16, 20, (3, 4, 5), 2, 2, 0, 1),  # 3D
    (2, 1, 40, 1900, (3, 3), 3, 1, 1, 1),   # bwd_d: 1900-channel reduction in chunks
    (2, 3, 13, 7, (9, 11), 4, 2, 1, 1),     # 13 / 7 channels per tap: AMX leaves them to f32
    (2, 2, 16, 16, (8, 8), 4, 2, 1, 16),    # depthwise: the f32 kernels
    (2, 2, 48, 3, (8, 8), 3, 1, 1, 1),      # fwd: 3 columns (dot tiles, f32); bwd_d: 3 channels
    (2, 2, 40, 3, (7, 6), 11, 4, 2, 1),     # bwd_d: fused taps of 33 rows, pairs across taps
]


def test_amx_bf16_short_fused_taps_only_without_padding():
    # 4 diff_dst channels x 3 fused taps = 12 rows: on the tiles when no row
    # has a tap in the padding (k3 s3 p0), else through f32 (k3 s3 p1).
    isa = "avx512_amx"
    P.require_isa(isa)
    dt = torch.bfloat16
    for pad, amx in ((0, True), (1, False)):
        x = _ints((2, 36, 9, 10), dt, 32)
        w = _ints((36, 4, 3, 3), dt, 33)
        dy = _ints(_oracle("fwd", x, w, 2, 3, pad).shape, dt, 34)
        want = _oracle("bwd_d", x, w, 2, 3, pad, 1, dy)
        a = dict(_attrs(2, 3, pad), groups=1, data_format="NXC", weights_format="IOX")
        with P.use_isa(isa), tct.plans() as lines:
            got = torch.ops.graph.conv_transpose_backward_data(
                _nxc(dy, 2), w, src_shape=list(_nxc(x, 2).shape), **a)
        assert (KEY[isa] in lines[0]) == amx, lines[0][:300]
        assert torch.equal(_ncx(got, 2), want.to(dt))


def _pairs_expected(isa, op, IC, OC, g, K, S, st):
    cred, ncol = (IC // g, OC // g) if op == "fwd" else (OC // g, IC // g)
    if isa == "avx512_bf16":
        # conv_bf16_pairs_info: the GEMM route where the f32 kernels would
        # not take dot tiles (few columns) or grouped tiles (small groups).
        special = (ncol <= 4 and cred >= 16) or (g > 1 and ncol <= 8)
        return not (IC // g == 1 and OC // g == 1 and g > 1) and not special
    # conv_bf16_pairs_info on AMX: the GEMM route (not depthwise), at least 16 reduction
    # channels per tap, or per fused tap (backward-data with at most 16
    # diff_dst channels fuses the K innermost taps: backward_data_fuses_taps),
    # and with <= 4 columns at least 128 reduction rows per row and phase.
    dot = ncol <= 4 and cred >= 16  # the f32 plan's dot tiles (not fused)
    fuse = (op == "bwd_d" and g == 1 and OC <= 16 and K > 1 and not (IC <= 4 and OC >= 16)
            and not dot)
    phases = st ** S if op == "fwd" else 1
    few_ok = ncol > 4 or cred * K ** S / phases >= 128
    # (12-15 fused rows only without padding along the innermost axis: none here.)
    return cred * (K if fuse else 1) >= 16 and few_ok and not (IC // g == 1 and OC // g == 1)


def _nxc(t, S):
    return t.permute([0] + list(range(2, S + 2)) + [1]).contiguous()


def _ncx(t, S):
    return t.permute([0, S + 1] + list(range(1, S + 1)))


def _call(op, x, w, dy, S, a, isa, b=None):
    """Our forward (bias b) or backward-data on the NCX tensors x / dy laid out as
    a["data_format"] says (NXC: channels-last copies), attributes a, under isa:
    (the result as NCX, the call's plan line)."""
    nxc = a["data_format"] == "NXC"
    to = (lambda t: _nxc(t, S)) if nxc else (lambda t: t)
    with P.use_isa(isa), tct.plans() as lines:
        if op == "fwd":
            got = torch.ops.graph.conv_transpose(to(x), w, b, **a)
        else:
            got = torch.ops.graph.conv_transpose_backward_data(
                to(dy), w, src_shape=list(to(x).shape), **a)
    return (_ncx(got, S) if nxc else got), lines[0]


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("case", PAIR_CASES,
                         ids=lambda c: f"{c[0]}d_n{c[1]}_{c[2]}to{c[3]}_g{c[8]}")
def test_pairs_bf16_exact(case, op, layout, isa):
    P.require_isa(isa)
    S, N, IC, OC, sp, K, s, p, g = case
    amx = _pairs_expected(isa, op, IC, OC, g, K, S, s)
    dt = torch.bfloat16
    x = _ints((N, IC) + sp, dt, 11)
    w = _ints((IC, OC // g) + (K,) * S, dt, 12)
    dy = _ints(_oracle("fwd", x, w, S, s, p, g).shape, dt, 13)
    want = _oracle(op, x, w, S, s, p, g, dy)
    if op == "fwd":  # with a bias
        b = _ints((OC,), dt, 14)
        want = want + b.double().view([1, OC] + [1] * S)
    nxc = layout == "nxc"
    a = dict(_attrs(S, s, p), groups=g, data_format=layout.upper(), weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b if op == "fwd" else None)
    assert torch.equal(got, want.to(dt))
    assert (KEY[isa] in ln) == amx, ln[:400]
    if amx:
        assert f"ncx={int(not nxc)}" in ln, ln[:400]
    if OC == 1900 and op == "bwd_d":
        assert "out16=0" in ln and " chunks=1 " not in ln.split(KEY[isa])[1]


@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("op,N,IC,OC", [
    ("fwd", 8, 32, 64),     # 4 MiB of results: rows of two whole 64-byte lines
    ("fwd", 16, 32, 40),    # 5 MiB: 80-byte rows (a fifth aligned), a 16-column tail
    ("bwd_d", 16, 136, 48),  # diff_src of 4.25 MiB: 272-byte rows, an 8-column tail
    ("fwd", 4, 32, 64),     # 2 MiB: below the rule, not streamed
])
def test_amx_bf16_large_results_streamed(op, N, IC, OC, layout):
    # bf16 results of 4 MiB and more that the AMX tiles write into the caller's
    # tensor go out with streaming stores (stream=1 in the plan; whole aligned
    # lines only, the rest stored as before); NCX results, written to a
    # workspace that is transposed right after, are not streamed.
    isa = "avx512_amx"
    P.require_isa(isa)
    S, s, p, dt = 2, 2, 1, torch.bfloat16
    x = _ints((N, IC, 32, 32), dt, 41)
    w = _ints((IC, OC, 4, 4), dt, 42)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dt, 43)
    b = _ints((OC,), dt, 44)
    want = _oracle(op, x, w, S, s, p, 1, dy, b=b if op == "fwd" else None).to(dt)
    nxc = layout == "nxc"
    streamed = nxc and want.numel() * 2 >= 4 << 20
    a = dict(_attrs(S, s, p), groups=1, data_format=layout.upper(), weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b if op == "fwd" else None)
    assert KEY[isa] in ln and "out16=1" in ln, ln[:400]
    assert f"stream={int(streamed)} " in ln.split(KEY[isa])[1], ln[:600]
    assert torch.equal(got, want)


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("wf", P.WEIGHTS_FORMATS)
@pytest.mark.parametrize("op", ["fwd", "bwd_d", "bwd_w"])
def test_pairs_bf16_weights_formats(op, wf, isa):
    # Each weights layout takes another packing form (taps contiguous, columns
    # contiguous, reduction contiguous, strided) or gradient scatter.
    P.require_isa(isa)
    S, s, p, dt = 2, 2, 1, torch.bfloat16
    x = _ints((2, 37, 7, 6), dt, 28)
    w = _ints((37, 40, 4, 3), dt, 29)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dt, 30)
    want = _oracle(op, x, w, S, s, p, 1, dy).to(dt)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format=wf)
    wk = P.weights_from_iox(w, wf).contiguous()
    with P.use_isa(isa), tct.plans() as lines:
        if op == "fwd":
            got = _ncx(torch.ops.graph.conv_transpose(_nxc(x, S), wk, None, **a), S)
        elif op == "bwd_d":
            got = _ncx(torch.ops.graph.conv_transpose_backward_data(
                _nxc(dy, S), wk, src_shape=list(_nxc(x, S).shape), **a), S)
        else:
            got = P.weights_to_iox(torch.ops.graph.conv_transpose_backward_weights(
                _nxc(x, S), _nxc(dy, S), weights_shape=list(wk.shape), **a), wf)
    assert KEY[isa] in lines[0], lines[0][:300]
    assert torch.equal(got, want)


@pytest.mark.parametrize("isa", PAIR_ISAS)
def test_pairs_bf16_long_sums_rounded_once(isa):
    # 2048 input channels of ones against weights of ones and twos: every output
    # sums thousands of products (exact in f32, not in bf16), rounded once.
    P.require_isa(isa)
    dt = torch.bfloat16
    x = torch.ones(1, 2048, 4, 4, dtype=dt)
    w = _ints((2048, 32, 2, 2), dt, 15, 1, 3)
    want = _oracle("fwd", x, w, 2, 2, 0)
    assert not torch.equal(want.to(dt).double(), want)  # the rounding matters
    a = dict(_attrs(2, 2, 0), groups=1, data_format="NXC", weights_format="IOX")
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose(_nxc(x, 2), w, None, **a)
    assert KEY[isa] in lines[0]
    assert torch.equal(_ncx(got, 2), want.to(dt))


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("where", ["input", "weight"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
def test_pairs_bf16_nan_and_inf_propagate(op, where, bad, isa):
    # 45 reduction channels: a 32-channel step and an odd tail of 13, whose
    # padding must not meet the weights after it.
    P.require_isa(isa)
    dt, S, s, p = torch.bfloat16, 2, 2, 1
    ic, oc = (45, 20) if op == "fwd" else (20, 45)
    x = _ints((2, ic, 6, 7), dt, 16, 1, 3)
    w = _ints((ic, oc, 4, 4), dt, 17, 1, 3)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dt, 18, 1, 3)
    if where == "weight":  # reduction channel 30: its f32 row lies where the tail's
        # step would read on past the 23 bf16 pair rows of its tap
        if op == "fwd":
            w[30, oc - 1, 1, 2] = bad
        else:
            w[ic - 1, 30, 1, 2] = bad
    elif op == "fwd":
        x[1, ic - 1, 3, 4] = bad
    else:
        dy[1, oc - 1, 3, 4] = bad
    want = _oracle(op, x, w, S, s, p, 1, dy).to(dt)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format="IOX")
    with P.use_isa(isa), tct.plans() as lines:
        if op == "fwd":
            got = _ncx(torch.ops.graph.conv_transpose(_nxc(x, S), w, None, **a), S)
        else:
            got = _ncx(torch.ops.graph.conv_transpose_backward_data(
                _nxc(dy, S), w, src_shape=list(_nxc(x, S).shape), **a), S)
    assert KEY[isa] in lines[0]
    assert torch.isnan(want).any() or torch.isinf(want).any()
    _assert_equal_nonfinite(got, want)


@pytest.mark.parametrize("isa", PAIR_ISAS)
def test_pairs_forced_off_on_the_same_cpu(isa):
    # isa avx512 on a CPU with the pair tiles is "no native bf16": the same call widens to f32.
    pair = isa
    P.require_isa(pair)
    dt = torch.bfloat16
    x, w = _ints((2, 64, 8, 8), dt, 19), _ints((64, 32, 4, 4), dt, 20)
    a = dict(_attrs(2, 2, 1), groups=1, data_format="NXC", weights_format="IOX")
    outs = {}
    for isa in ("avx512", pair):
        with P.use_isa(isa), tct.plans() as lines:
            outs[isa] = torch.ops.graph.conv_transpose(_nxc(x, 2), w, None, **a)
        assert (KEY[pair] in lines[0]) == (isa == pair), lines[0][:300]
        assert ("direct16={" in lines[0]) == (isa == "avx512"), lines[0][:300]
    assert torch.equal(outs["avx512"], outs[pair])


BWW_PAIR_CASES = [  # (S, N, IC, OC, spatial, K, s, p, groups)
    (2, 2, 64, 64, (8, 8), 4, 2, 1, 1),
    (2, 3, 40, 37, (9, 11), 4, 2, 1, 1),      # channel tails on both sides
    (2, 2, 70, 96, (5, 6), 3, 2, 0, 2),       # groups
    (2, 2, 33, 40, (17, 19), 1, 2, 0, 1),     # 1x1 s2, 646 pixels: a partial chunk
    (2, 3, 64, 48, (25, 40), 1, 1, 0, 1),     # 1x1, 3000 pixels: pieces (VDPBF16PS)
    (2, 2, 64, 40, (20, 21), 3, 1, 1, 1),     # 840 pixels, 9 taps: chunks, a scratch gradient
    (2, 37, 50, 33, (1, 1), 4, 1, 0, 1),      # one-pixel src: steps across images
    (2, 2, 490, 520, (10, 15), 2, 2, 0, 1),   # 300 pixels, 490 channels: whole, 2 chunks
    (1, 1, 33, 40, (37,), 16, 8, 4, 1),       # 1D
    (3, 2, 32, 40, (3, 4, 5), 2, 2, 0, 1),    # 3D
    (2, 2, 16, 40, (8, 8), 3, 1, 1, 1),       # 16 input channels: the f32 kernels
]


@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("case", BWW_PAIR_CASES,
                         ids=lambda c: f"{c[0]}d_n{c[1]}_{c[2]}to{c[3]}_g{c[8]}")
@pytest.mark.parametrize("isa", PAIR_ISAS)
def test_pairs_bf16_backward_weights_exact(case, layout, isa):
    P.require_isa(isa)
    S, N, IC, OC, sp, K, s, p, g = case
    amx = IC // g >= 32 and OC // g >= 32
    dt = torch.bfloat16
    x = _ints((N, IC) + sp, dt, 21)
    w = _ints((IC, OC // g) + (K,) * S, dt, 22)
    dy = _ints(_oracle("fwd", x, w, S, s, p, g).shape, dt, 23)
    want = _oracle("bwd_w", x, w, S, s, p, g, dy).to(dt)
    nxc = layout == "nxc"
    to = (lambda t: _nxc(t, S)) if nxc else (lambda t: t)
    a = dict(_attrs(S, s, p), groups=g, data_format=layout.upper(), weights_format="IOX",
             weights_shape=list(w.shape))
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(to(x), to(dy), **a)
    assert torch.equal(got, want)
    assert (BWW_KEY[isa] in lines[0]) == amx, lines[0][:400]


def _bww_nonfinite_data(IC, OC, seed):
    """k3 s1 p1 on 2 x IC x 9 x 10, bf16 values in 1..2: x, w, diff_dst."""
    dt = torch.bfloat16
    x = _ints((2, IC, 9, 10), dt, seed, 1, 3)
    w = _ints((IC, OC, 3, 3), dt, seed + 1, 1, 3)
    return x, w, _ints(_oracle("fwd", x, w, 2, 1, 1).shape, dt, seed + 2, 1, 3)


def _bww_nonfinite_call(x, w, dy, t, idx, bad, isa):
    """Our bwd_w with t[idx] = bad (channels-last); the f64 oracle's result with
    t[idx] = 0 (base), and the gradient elements that value reaches (touched:
    where a finite marker in its place changes the oracle's result)."""
    S, s, p = 2, 1, 1
    t[idx] = 0
    base = _oracle("bwd_w", x, w, S, s, p, 1, dy)
    t[idx] = 1
    touched = _oracle("bwd_w", x, w, S, s, p, 1, dy) != base
    t[idx] = bad
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format="IOX",
             weights_shape=list(w.shape))
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(_nxc(x, S), _nxc(dy, S), **a)
    return got, base, touched, lines


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["src_border", "src_inside", "diff_dst"])
def test_pairs_bf16_backward_weights_nan_and_inf(where, bad, isa):
    # k3 s1 p1: the taps of a border src pixel that fall on padding pair it with
    # no diff_dst value (SPEC's sum over valid pairs), so a NaN / Inf there
    # reaches only the taps inside. (torch's own backward multiplies it by the
    # padding's zeros: its NaN pattern is not the expected one.) Expected: the
    # gradient elements the bad value contributes to (found by the f64 oracle
    # with a finite marker in its place) are NaN / Inf, the others exact.
    P.require_isa(isa)
    x, w, dy = _bww_nonfinite_data(40, 48, 24)
    t, idx = (x, (1, 3, 0, 4)) if where == "src_border" else \
        (x, (1, 3, 4, 4)) if where == "src_inside" else (dy, (0, 5, 8, 9))
    got, base, touched, lines = _bww_nonfinite_call(x, w, dy, t, idx, bad, isa)
    assert BWW_KEY[isa] in lines[0]
    assert touched.any() and not touched.all()
    check = torch.isnan if bad != bad else torch.isinf
    assert torch.equal(check(got), touched)
    assert torch.equal(got[~touched], base.to(got.dtype)[~touched])


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("k", [4, 1])  # 1x1: pieces of the pixels (VDPBF16PS)
def test_pairs_bf16_backward_weights_same_bits_for_any_threads(k, isa):
    # Random (not integer) data: the f32 sums depend on their order, which must
    # not depend on the thread count (each element summed by one task, in pixel
    # order; pieces, where there are, added in piece order).
    P.require_isa(isa)
    g = torch.Generator().manual_seed(27)
    n = 12 if k == 4 else 40
    x = torch.randn(2, n, n, 96, generator=g).to(torch.bfloat16)
    dy = torch.randn(2, 2 * n, 2 * n, 64, generator=g).to(torch.bfloat16)
    a = dict(_attrs(2, 2, 1 if k == 4 else 0), groups=1, data_format="NXC",
             weights_format="IOX", weights_shape=[96, 64, k, k])
    if k == 1:
        a["output_padding"] = [1, 1]
    old = torch.get_num_threads()
    outs = []
    try:
        for nt in (1, 2, 3):
            torch.set_num_threads(nt)
            with P.use_isa(isa), tct.plans() as lines:
                outs.append(torch.ops.graph.conv_transpose_backward_weights(x, dy, **a))
            assert BWW_KEY[isa] in lines[0]
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


# Fused taps (VDPBF16PS, fewer than 32 output channels per group): the
# columns are (tap, output channel) pairs of runs of tap rows.
BWW_FUSED_CASES = [  # (S, N, IC, OC, spatial, K, s, p, groups, dilation)
    (2, 2, 96, 3, (13, 13), 11, 4, 0, 1, 1),   # AlexNet-like k11 s4: no border pixel
    (2, 3, 64, 3, (9, 11), 7, 2, 3, 1, 2),     # dilated: a window of taps, border pixels
    (2, 2, 112, 5, (7, 9), 4, 2, 1, 1, 1),     # 112 channels (a tail block), odd images
    (2, 2, 64, 8, (40, 41), 3, 2, 1, 1, 1),    # 3280 pixels: pieces, chunks, a partial one
    (1, 3, 64, 5, (37,), 16, 8, 4, 1, 1),      # 1D: one tap row
    (3, 2, 64, 4, (3, 4, 5), 3, 2, 1, 1, 1),   # 3D
    (3, 1, 64, 8, (4, 5, 6), 5, 1, 2, 1, 1),   # 1000 columns: row groups
    (2, 2, 64, 6, (6, 7), 5, 1, 2, 2, 1),      # groups of 32 -> 3: a window of taps
    (2, 1, 32, 31, (30, 31), 3, 1, 1, 1, 1),   # 31 output channels, 930 pixels
    (2, 2, 64, 3, (9, 10), 5, 1, 2, 1, 6),     # dilation 6: windows too wide, tap by tap
    (2, 2, 64, 20, (6, 7), 3, 1, 2, 1, 2),     # 20 channels a tap, dilated: tap by tap
]


def _fused_id(c):
    return f"{c[0]}d_{c[2]}to{c[3]}_k{c[5]}s{c[6]}p{c[7]}g{c[8]}d{c[9]}"


@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("case", BWW_FUSED_CASES, ids=_fused_id)
@pytest.mark.parametrize("isa", PAIR_ISAS)
def test_pairs_bf16_backward_weights_fused_taps_exact(case, layout, isa):
    # Integer data: every sum exact in f32, so the rounded result equals the
    # f64 oracle's rounding. AMX takes none of these (the f32 kernels do).
    P.require_isa(isa)
    S, N, IC, OC, sp, K, s, p, g, d = case
    dt = torch.bfloat16
    x = _ints((N, IC) + sp, dt, 41)
    w = _ints((IC, OC // g) + (K,) * S, dt, 42)
    dy = _ints(_oracle("fwd", x, w, S, s, p, g, d=d).shape, dt, 43)
    want = _oracle("bwd_w", x, w, S, s, p, g, dy, d=d).to(dt)
    to = (lambda t: _nxc(t, S)) if layout == "nxc" else (lambda t: t)
    a = dict(_attrs(S, s, p, d), groups=g, data_format=layout.upper(), weights_format="IOX",
             weights_shape=list(w.shape))
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(to(x), to(dy), **a)
    assert torch.equal(got, want)
    assert (" fused_rows=" in lines[0]) == (isa == "avx512_bf16"), lines[0][:600]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["src_border", "src_corner", "src_inside", "diff_dst"])
def test_pairs_bf16_backward_weights_fused_taps_nan_and_inf(where, bad):
    # As test_pairs_bf16_backward_weights_nan_and_inf, on fused taps: a border
    # pixel's bad value meets zero B pairs at its taps outside, so it is
    # summed apart, tap by tap; only the taps inside see it.
    P.require_isa("avx512_bf16")
    x, w, dy = _bww_nonfinite_data(64, 8, 44)
    t, idx = {"src_border": (x, (1, 3, 0, 4)), "src_corner": (x, (0, 63, 8, 9)),
              "src_inside": (x, (1, 3, 4, 4)), "diff_dst": (dy, (0, 2, 8, 9))}[where]
    got, base, touched, lines = _bww_nonfinite_call(x, w, dy, t, idx, bad, "avx512_bf16")
    assert " fused_rows=" in lines[0], lines[0][:600]
    assert touched.any() and not touched.all()
    check = torch.isnan if bad != bad else torch.isinf
    assert torch.equal(check(got), touched)
    assert torch.equal(got[~touched], base.to(got.dtype)[~touched])


def test_pairs_bf16_backward_weights_fused_taps_same_bits_for_any_threads():
    # Random data: the row groups change with the thread count, each sum's
    # order (its pixels') does not.
    P.require_isa("avx512_bf16")
    g = torch.Generator().manual_seed(47)
    x = torch.randn(2, 40, 30, 96, generator=g).to(torch.bfloat16)  # 3 pieces
    dy = torch.randn(2, 165, 125, 3, generator=g).to(torch.bfloat16)
    x[1, 0, 0, 5] = float("nan")  # a border pixel's fix-up, too
    a = dict(_attrs(2, 4, 1), groups=1, data_format="NXC", weights_format="IOX",
             weights_shape=[96, 3, 11, 11])
    old = torch.get_num_threads()
    outs = []
    try:
        for nt in (1, 2, 3):
            torch.set_num_threads(nt)
            with P.use_isa("avx512_bf16"), tct.plans() as lines:
                outs.append(torch.ops.graph.conv_transpose_backward_weights(x, dy, **a))
            assert " fused_rows=" in lines[0], lines[0][:600]
    finally:
        torch.set_num_threads(old)
    assert outs[0].isnan().any() and not outs[0].isnan().all()
    for o in outs[1:]:
        assert torch.equal(o.isnan(), outs[0].isnan())
        assert torch.equal(o.nan_to_num(), outs[0].nan_to_num())


@pytest.mark.parametrize("isa", PAIR_ISAS)
@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d", "bwd_w"])
def test_pairs_bf16_batch_zero(op, layout, isa):
    # No images: empty results, and a zero gradient (nothing summed).
    P.require_isa(isa)
    S, s, p, dt = 2, 2, 1, torch.bfloat16
    x = torch.zeros(0, 64, 5, 6, dtype=dt)
    w = _ints((64, 48, 4, 4), dt, 31)
    dy = torch.zeros(0, 48, 10, 12, dtype=dt)
    nxc = layout == "nxc"
    to = (lambda t: _nxc(t, S)) if nxc else (lambda t: t)
    a = dict(_attrs(S, s, p), groups=1, data_format=layout.upper(), weights_format="IOX")
    with P.use_isa(isa):
        if op == "fwd":
            got = torch.ops.graph.conv_transpose(to(x), w, None, **a)
            assert got.shape == to(dy).shape and got.dtype == dt
        elif op == "bwd_d":
            got = torch.ops.graph.conv_transpose_backward_data(
                to(dy), w, src_shape=list(to(x).shape), **a
            )
            assert got.shape == to(x).shape and got.dtype == dt
        else:
            got = torch.ops.graph.conv_transpose_backward_weights(
                to(x), to(dy), weights_shape=list(w.shape), **a
            )
            assert torch.equal(got, torch.zeros_like(w))


# --- no AMX (or f16): channels-last forward / backward-data on the f32 GEMM
# tiles, which round the result into the 16-bit tensor themselves
# (route convert16 with direct16={...}: no f32 result buffer, no narrowing).

VEC_ISAS = [i for i in ("avx2", "avx512") if i in P.isa_param_names()]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
def test_direct16_long_sums_rounded_once(op, dtype, isa):
    # 128-256 channels of small integers: f32 sums exact, not representable in
    # the 16-bit types, rounded once; odd column counts for the tails.
    S, s, p = 2, 2, 1
    ic, oc = (256, 37) if op == "fwd" else (37, 128)  # (one reduction chunk)
    x = _ints((2, ic, 5, 6), dtype, 35, 1, 4)
    w = _ints((ic, oc, 4, 4), dtype, 36, 1, 4)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dtype, 37, 1, 4)
    want = _oracle(op, x, w, S, s, p, 1, dy)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    with P.use_isa(isa), tct.plans() as lines:
        got = _run(op, _nxc(x, S), w, _nxc(dy, S), S, s, p, 1, "NXC")
    assert "direct16={" in lines[0], lines[0][:300]
    assert torch.equal(_ncx(got, S), want.to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_planar16_pointwise_forward_rounded_once(dtype):
    # A pointwise forward on the backward-data GEMM (AVX2): 300 input
    # channels are two reduction parts of the GEMM; the bias joins the f32
    # sums, which are rounded once (sums of small positive integers, about
    # 5000, beyond the 16-bit types' precision, plus the bias).
    P.require_isa("avx2")
    x = _ints((1, 300, 500), dtype, 51, 1, 8)
    w = _ints((300, 40, 1), dtype, 52, 1, 8)
    b = _ints((40,), dtype, 53, 1, 8)
    want = _oracle("fwd", x, w, 1, 1, 0, 1, d=1, b=b)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    with P.use_isa("avx2"), tct.use_ncx_path("auto"), tct.plans() as lines:
        got = _run("fwd", x, w, None, 1, 1, 0, 1, d=1, b=b)
    assert "planar16={" in lines[0] and " route=pointwise_gemm " in lines[0], lines[0][:600]
    assert int(lines[0].split(" part_columns=")[1].split()[0]) < 300  # two parts
    assert torch.equal(got, want.to(dtype))


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_direct16_nan_and_inf(bad, dtype, isa):
    S, s, p = 2, 2, 1
    x = _ints((2, 24, 6, 7), dtype, 38, 1, 3)
    w = _ints((24, 19, 4, 4), dtype, 39, 1, 3)
    x[1, 5, 3, 4] = bad
    want = _oracle("fwd", x, w, S, s, p).to(dtype)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format="IOX")
    with P.use_isa(isa), tct.plans() as lines:
        got = _ncx(torch.ops.graph.conv_transpose(_nxc(x, S), w, None, **a), S)
    assert "direct16={" in lines[0]
    _assert_equal_nonfinite(got, want)



SLAB_SHAPES = [
    # (N, IC, OC, spatial, K, s, p, d, op): one image whose copies exceed the
    # slab budget (8 MiB of f32)
    (1, 8, 4, (1 << 20,), (4,), (2,), (1,), (1,), (0,)),
    (1, 16, 8, (1 << 19,), (16,), (8,), (4,), (1,), (0,)),  # AMX-sized reduction
    (1, 3, 5, (1_500_001,), (7,), (3,), (5,), (1,), (2,)),
    (1, 6, 3, (1100, 1300), (4, 3), (2, 1), (1, 1), (1, 2), (1, 0)),  # slabs along H
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("op,N,C,streamed", [
    ("fwd", 8, 64, True),     # 4 MiB of results, 128-byte pixels
    ("fwd", 16, 32, True),    # 4 MiB, one 64-byte line a pixel
    ("fwd", 8, 48, False),    # 3 MiB, 96-byte pixels: lines shared, not streamed
    ("fwd", 3, 64, False),    # 1.5 MiB: below the rule
    ("bwd_d", 32, 64, True),  # diff_src of 4 MiB
    ("fwd", 16, 64, False),   # NCX: chunks of channels-last workspace, not streamed
])
def test_depthwise16_large_results_streamed(op, N, C, streamed, dtype, isa):
    # Channels-last depthwise 16-bit results of 2 MiB and more, whole 64-byte
    # lines a pixel, go out with streaming stores (as the f32 ones); exact.
    # NCX (route ncx16, forced: Intel's AVX-512 NCX rule, P12, sends these planes
    # to the planar kernels): the tiles write a workspace that is transposed right
    # after, never streamed.
    S, s, p = 2, 2, 1
    ncx = (op, N, C) == ("fwd", 16, 64)
    x = _ints((N, C, 32, 32), dtype, 81)
    w = _ints((C, 1, 4, 4), dtype, 82)
    dy = _ints(_oracle("fwd", x, w, S, s, p, C).shape, dtype, 83)
    b = _ints((C,), dtype, 84)
    bias = b if op == "fwd" else None
    want = _oracle(op, x, w, S, s, p, C, dy, b=bias).to(dtype)
    a = dict(_attrs(S, s, p), groups=C, data_format="NCX" if ncx else "NXC", weights_format="IOX")
    with tct.use_ncx_path("channels_last" if ncx else "auto"):
        got, ln = _call(op, x, w, dy, S, a, isa, bias)
    assert "route=depthwise" in ln and f" stream={int(streamed)} " in ln, ln[:600]
    assert ("ncx16=1" in ln) == ncx, ln[:600]
    assert torch.equal(got, want)


@pytest.mark.parametrize("isa", FAST_ISAS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SLAB_SHAPES, ids=lambda s: f"{s[1]}ch" + "x".join(map(str, s[3])))
def test_one_image_slabs_exact(shape, dtype, isa):
    """16-bit through f32 copies: an image too large for the copies' budget goes
    in slabs (forward, backward-data; NXC, NCX planar and NCX channels-last;
    the planar kernels take the 16-bit tensors themselves where they can),
    exact against torch in f64 on integer data, each call routed through slabs
    (on AMX, bf16 channels-last runs the tiles in place instead)."""
    n, ic, oc, sp, k, s, p, d, op = shape
    gen = torch.Generator().manual_seed(1)
    S = len(sp)
    conv_t = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d}[S]
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d}[S]
    x = torch.randint(-2, 3, (n, ic) + sp, generator=gen).to(dtype)
    w = torch.randint(-2, 3, (ic, oc) + k, generator=gen).to(dtype)
    b = torch.randint(-2, 3, (oc,), generator=gen).to(dtype)
    y = conv_t(x.double(), w.double(), b.double(), stride=s, padding=p, dilation=d,
               output_padding=op).to(dtype)
    gy = torch.randint(-2, 3, y.shape, generator=gen).to(dtype)
    gx = conv(gy.double(), w.double(), None, stride=s, padding=p, dilation=d).to(dtype)
    for fmt, path in (("NXC", "auto"), ("NCX", "planar"), ("NCX", "channels_last")):
        kw = dict(strides=list(s), pads_begin=list(p), pads_end=list(p), dilations=list(d),
                  output_padding=list(op), data_format=fmt, weights_format="IOX")
        nxc = fmt == "NXC"
        xi = x.movedim(1, -1).contiguous() if nxc else x
        gyi = gy.movedim(1, -1).contiguous() if nxc else gy
        with P.use_isa(isa), tct.use_ncx_path(path), tct.plans() as lines:
            yo = torch.ops.graph.conv_transpose(xi, w, b, **kw)
            go = torch.ops.graph.conv_transpose_backward_data(gyi, w, src_shape=list(xi.shape),
                                                              **kw)
        # (the pair tiles in place where they take the problem; the planar kernels
        # on the 16-bit tensors where their route copies every input row)
        pairs_nxc = isa in KEY and dtype == torch.bfloat16 and nxc
        planar16 = path == "planar"
        assert all(" slabs=" in ln or (pairs_nxc and " " + KEY[isa] in ln)
                   or (planar16 and " planar16={" in ln) for ln in lines), lines
        if nxc:
            yo, go = yo.movedim(-1, 1), go.movedim(-1, 1)
        assert torch.equal(yo, y), (fmt, path, "forward")
        assert torch.equal(go, gx), (fmt, path, "backward-data")


# --- dense NCX on the planar kernels over the 16-bit tensors themselves
# (route convert16 with planar16={...}): rows widened as the kernels copy
# them, results rounded once from the f32 tiles; no f32 copies.

PLANAR16_CASES = [
    # (op, S, N, IC, OC, spatial, K, s, p, d, groups, planar route)
    ("fwd", 2, 3, 13, 7, (9, 11), 4, 2, 1, 1, 1, "tiles"),  # strided outputs, row items
    ("bwd_d", 2, 3, 13, 7, (9, 11), 4, 2, 1, 1, 1, "tiles"),  # input phases of 2 (split2)
    ("bwd_d", 2, 2, 5, 6, (10, 9), 3, 3, 0, 1, 1, "tiles"),  # phases of 3 (split3)
    ("bwd_d", 1, 4, 9, 5, (37,), 16, 8, 4, 1, 1, "tiles"),  # phases of 8 (gathers)
    ("fwd", 2, 2, 17, 9, (12, 13), 3, 1, 1, 1, 1, "tiles"),  # stride 1: widened in place
    ("bwd_d", 2, 2, 17, 9, (12, 13), 3, 1, 1, 2, 1, "tiles"),  # stride 1, dilated
    ("fwd", 3, 4, 6, 10, (3, 4, 5), 2, 2, 0, 1, 1, "tiles"),  # small planes: plane items
    ("fwd", 2, 2, 24, 18, (7, 5), 3, 2, 1, 1, 3, "tiles"),  # groups, channel tails
    ("bwd_d", 2, 2, 16, 16, (8, 8), 4, 2, 1, 1, 16, "depthwise_rows"),  # whole planes
    ("bwd_d", 1, 2, 8, 8, (3000,), 4, 2, 1, 1, 8, "depthwise_rows"),  # long line in chunks
    ("bwd_d", 2, 2, 36, 4, (9, 10), 3, 3, 0, 1, 1, "im2col_gemm"),  # im2col rows widened
    ("bwd_d", 2, 2, 72, 8, (9, 9), 3, 3, 0, 1, 2, "im2col_gemm"),  # groups
    ("bwd_d", 2, 1, 37, 30, (11, 9), 3, 3, 0, 1, 1, "im2col_gemm"),  # 270 columns, tails
    ("bwd_d", 2, 2, 40, 24, (16, 15), 2, 2, 0, 1, 1, "im2col_gemm"),  # k2 s2: rows, no phases
    ("bwd_d", 2, 2, 48, 40, (9, 8), 1, 2, 0, 1, 1, "im2col_gemm"),  # 1x1 s2
    ("fwd", 2, 2, 40, 36, (17, 19), 1, 1, 0, 1, 1, "pointwise_gemm"),  # bias in the f32 sums
    ("fwd", 1, 1, 33, 64, (300,), 1, 1, 0, 1, 1, "pointwise_gemm"),  # blocks of channels
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", PLANAR16_CASES,
                         ids=lambda c: f"{c[0]}_{c[1]}d_{c[3]}to{c[4]}_s{c[7]}_g{c[10]}")
def test_planar16_exact(case, dtype, isa):
    op, S, N, IC, OC, sp, K, s, p, d, g, route = case
    if route == "pointwise_gemm" and isa != "avx2":
        route = "tiles"  # the pointwise forward GEMM is AVX2's (heuristics P17)
    x = _ints((N, IC) + sp, dtype, 41)
    w = _ints((IC, OC // g) + (K,) * S, dtype, 42)
    b = _ints((OC,), dtype, 43) if op == "fwd" else None
    y_shape = _oracle("fwd", x, w, S, s, p, g, d=d).shape
    dy = _ints(y_shape, dtype, 44)
    want = _oracle(op, x, w, S, s, p, g, dy, d=d, b=b).to(dtype)
    with P.use_isa(isa), tct.use_ncx_path("planar"), tct.plans() as lines:
        got = _run(op, x, w, dy, S, s, p, g, d=d, b=b)
    assert "planar16={" in lines[0] and f" route={route} " in lines[0], lines[0][:600]
    assert got.dtype == dtype and got.is_contiguous()
    assert torch.equal(got, want)


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
def test_planar16_long_sums_rounded_once(op, dtype, isa):
    # 300 channels of long rows: the tiles sum them in blocks of a few
    # channels (kept in L1), in f32 in the item buffer; the 16-bit result is
    # rounded once after the last block (exact f32 sums of small positive
    # integers, beyond the 16-bit types' precision).
    S, s, p, d = 1, 1, 1, 1
    ic, oc = (300, 5) if op == "fwd" else (5, 300)
    x = _ints((2, ic, 2000), dtype, 45, 1, 4)
    w = _ints((ic, oc, 3), dtype, 46, 1, 4)
    dy = _ints(_oracle("fwd", x, w, S, s, p, 1, d=d).shape, dtype, 47, 1, 4)
    want = _oracle(op, x, w, S, s, p, 1, dy, d=d)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    with P.use_isa(isa), tct.use_ncx_path("planar"), tct.plans() as lines:
        got = _run(op, x, w, dy, S, s, p, 1, d=d)
    assert "planar16={" in lines[0] and " route=tiles " in lines[0], lines[0][:600]
    cin_block = int(lines[0].split(" cin_block=")[1].split()[0])
    assert cin_block < 300  # the sums do take several blocks
    assert torch.equal(got, want.to(dtype))


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("case", [c for c in PLANAR16_CASES if c[0] == "bwd_d"][:1] +
                         [PLANAR16_CASES[0], PLANAR16_CASES[8]], ids=lambda c: f"{c[0]}_{c[-1]}")
def test_planar16_nan_and_inf(case, bad, dtype, isa):
    op, S, N, IC, OC, sp, K, s, p, d, g, route = case
    x = _ints((N, IC) + sp, dtype, 48, 1, 3)
    w = _ints((IC, OC // g) + (K,) * S, dtype, 49, 1, 3)
    dy = _ints(_oracle("fwd", x, w, S, s, p, g, d=d).shape, dtype, 50, 1, 3)
    if op == "fwd":
        x[1, 3, 2, 4] = bad
    else:
        dy.view(-1)[dy.numel() // 3] = bad
    want = _oracle(op, x, w, S, s, p, g, dy, d=d).to(dtype)
    with P.use_isa(isa), tct.use_ncx_path("planar"), tct.plans() as lines:
        got = _run(op, x, w, dy, S, s, p, g, d=d)
    assert "planar16={" in lines[0] and f" route={route} " in lines[0], lines[0][:600]
    _assert_equal_nonfinite(got, want)


PLANAR16_BWW_CASES = [
    # (S, N, IC, OC, spatial, K, s, p, d, groups, planar route)
    (2, 3, 13, 7, (9, 11), 4, 2, 1, 1, 1, "dots"),  # phases of 2
    (2, 2, 5, 6, (10, 9), 3, 3, 0, 1, 1, "dots"),  # phases of 3
    (1, 4, 9, 5, (37,), 16, 8, 4, 1, 1, "dots"),  # phases of 8
    (2, 2, 17, 9, (12, 13), 3, 1, 1, 2, 1, "dots"),  # stride 1, dilated
    (3, 2, 6, 10, (3, 4, 5), 2, 2, 0, 1, 1, "dots"),
    (2, 2, 16, 16, (8, 8), 4, 2, 1, 1, 16, "dots"),  # depthwise
    (2, 2, 24, 18, (7, 5), 3, 2, 1, 1, 3, "dots"),  # groups
    # long rows: GEMMs over im2col chunks (phase rows shared by taps, or not;
    # one long run for a pointwise kernel), src chunks widened per chunk
    (2, 2, 16, 3, (12, 64), 4, 2, 1, 1, 1, "im2col_gemm"),
    (2, 1, 16, 4, (8, 66), 3, 3, 0, 1, 1, "im2col_gemm"),
    (1, 2, 13, 5, (700,), 4, 2, 1, 1, 1, "im2col_gemm"),
    (2, 2, 8, 20, (16, 50), 1, 1, 0, 1, 1, "im2col_gemm"),
    (2, 2, 16, 3, (12, 64), 3, 1, 1, 1, 1, "im2col_gemm"),  # gathered per tap (no phase rows)
    (1, 2, 16, 5, (300,), 4, 4, 0, 1, 1, "im2col_gemm"),
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", PLANAR16_BWW_CASES,
                         ids=lambda c: f"{c[0]}d_{c[2]}to{c[3]}_{c[4][-1]}_s{c[6]}_g{c[9]}")
def test_planar16_backward_weights_exact(case, dtype, isa):
    S, N, IC, OC, sp, K, s, p, d, g, route = case
    x = _ints((N, IC) + sp, dtype, 51)
    w_shape = [IC, OC // g] + [K] * S
    dy = _ints(_oracle("fwd", x, torch.zeros(w_shape), S, s, p, g, d=d).shape, dtype, 52)
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, g, dy, d=d).to(dtype)
    with P.use_isa(isa), tct.use_ncx_path("planar"), tct.plans() as lines:
        got = _run("bwd_w", x, torch.zeros(w_shape), dy, S, s, p, g, d=d)
    assert "planar16={planar=backward_weights" in lines[0] and f" route={route} " in lines[0], \
        lines[0][:600]
    assert torch.equal(got, want)


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("x_shape", [(8, 6, 20, 20), (4, 16, 12, 64)], ids=["dots", "gemm"])
def test_planar16_backward_weights_rounded_once_and_nan(x_shape, dtype, isa):
    # Long sums of small positive integers: exact in f32, rounded once to the
    # 16-bit gradient (pieces, chunks and parts are summed in f32 first).
    S, s, p, d, g = 2, 2, 1, 1, 1
    x = _ints(x_shape, dtype, 53, 1, 4)
    w_shape = [x_shape[1], 5, 4, 4]
    dy = _ints(_oracle("fwd", x, torch.zeros(w_shape), S, s, p, g, d=d).shape, dtype, 54, 1, 4)
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, g, dy, d=d)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    with P.use_isa(isa), tct.use_ncx_path("planar"), tct.plans() as lines:
        got = _run("bwd_w", x, torch.zeros(w_shape), dy, S, s, p, g, d=d)
    assert "planar16={planar=backward_weights" in lines[0], lines[0][:600]
    assert torch.equal(got, want.to(dtype))
    x[3, 2, 7, 9] = float("nan")
    dy[3, 1, 0, 0] = float("inf")
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, g, dy, d=d).to(dtype)
    with P.use_isa(isa), tct.use_ncx_path("planar"):
        got = _run("bwd_w", x, torch.zeros(w_shape), dy, S, s, p, g, d=d)
    _assert_equal_nonfinite(got, want)


DIRECT16_MORE = [
    # (op, S, N, C_in, C_out, spatial, K, s, p, groups, driver route, schedule)
    ("fwd", 2, 1, 64, 64, (24, 24), 4, 2, 1, 64, "depthwise", "lines"),
    ("bwd_d", 2, 1, 64, 64, (24, 24), 4, 2, 1, 64, "depthwise", "lines"),
    ("fwd", 2, 3, 64, 64, (12, 13), 4, 2, 1, 64, "depthwise", "rows"),
    ("fwd", 2, 2, 40, 40, (9, 7), 3, 1, 1, 40, "depthwise", None),  # channel tails
    ("bwd_d", 2, 1, 64, 3, (32, 32), 4, 2, 1, 1, "gemm", "lines"),  # fused taps, by lines
    # one long image (its f32 copies would have gone in slabs), channel tails
    ("bwd_d", 1, 1, 19, 19, (150001,), 4, 2, 1, 19, "depthwise", None),
    ("fwd", 2, 20, 24, 24, (16, 16), 4, 2, 1, 24, "depthwise", None),  # (chunks before)
    # few columns, long reductions: the dot tiles read the 16-bit inputs too
    ("fwd", 2, 2, 64, 3, (12, 13), 4, 2, 1, 1, "dot", None),
    ("fwd", 1, 3, 200, 1, (37,), 7, 2, 3, 1, "dot", None),  # a reduction tail of 8
    ("bwd_d", 2, 2, 2, 64, (10, 11), 4, 2, 1, 1, "dot", None),
    ("fwd", 3, 1, 37, 4, (3, 4, 5), 3, 1, 1, 1, "dot", None),  # 3D, odd reduction
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", DIRECT16_MORE, ids=lambda c: f"{c[0]}_{c[10]}_{c[11]}_{c[3]}")
def test_direct16_depthwise_and_lines(case, dtype, isa):
    # Channels-last results written 16-bit by the depthwise tiles and in the
    # lines schedule too (no f32 result buffer), exact on integer data with
    # sums beyond the 16-bit precision, NaN and Inf where the oracle has them.
    # The depthwise and dot tiles also read the 16-bit inputs themselves (in16:
    # the whole call in one piece, no f32 copy of the activations).
    op, S, N, ci, co, sp, K, s, p, g, route, schedule = case
    x = _ints((N, ci) + sp, dtype, 55, 1, 4)
    w = _ints((ci, co // g) + (K,) * S, dtype, 56, 1, 4)
    b = _ints((co,), dtype, 57) if op == "fwd" else None
    dy = _ints(_oracle("fwd", x, w, S, s, p, g).shape, dtype, 58, 1, 4)
    x.view(-1)[x.numel() // 2] = float("nan")
    dy.view(-1)[dy.numel() // 3] = float("inf")
    want = _oracle(op, x, w, S, s, p, g, dy, b=b).to(dtype)
    with P.use_isa(isa), tct.plans() as lines:
        got = _run(op, _nxc(x, S), w, _nxc(dy, S), S, s, p, g, "NXC", b=b)
    ln = lines[0]
    assert "direct16={" in ln and f" route={route} " in ln, ln[:600]
    if route in ("depthwise", "dot"):  # the whole call on the 16-bit inputs
        kind = "bf16" if dtype == torch.bfloat16 else "f16"
        tile = "_dw_" if route == "depthwise" else f"_dot{co if op == 'fwd' else ci}_"
        assert f"{tile}{kind}in " in ln and f" images={N} chunks=1 " in ln, ln[:600]
    if schedule:
        assert f" schedule={schedule} " in ln, ln[:600]
    got = _ncx(got, S)
    _assert_equal_nonfinite(got, want)


# The GEMM packing widens 16-bit weights as it reads them (heuristics A15:
# forward in the Channels order, backward-data in the Columns order on one
# chunk); other weights layouts and orders are widened first. Exact for every
# weights format, a NaN in the weights where the oracle has it.
def _weights_as(w, wf, S):
    perm = {"IOX": [0, 1], "OIX": [1, 0], "XIO": None, "XOI": None}[wf]
    sp = list(range(2, S + 2))
    order = perm + sp if perm else sp + ([0, 1] if wf == "XIO" else [1, 0])
    return w.permute(order).contiguous()


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("wf", ["IOX", "OIX", "XIO", "XOI"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
def test_direct16_weights_widened_by_packing(op, wf, dtype, isa):
    S, s, p = 2, 2, 1
    x = _ints((2, 40, 5, 6), dtype, 71, 1, 4)
    w = _ints((40, 48, 3, 3), dtype, 72, 1, 4)
    # The centre tap: it never falls on padding (stride 2, padding 1), where a NaN
    # weight reaches outputs by plan in ours and in torch's zero padding alike (README,
    # Known limits): a border tap failed on Zen 3's AVX2 plan only.
    w[7, 9, 1, 1] = float("nan")
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dtype, 73, 1, 4)
    want = _oracle(op, x, w, S, s, p, 1, dy).to(dtype)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format=wf)
    got, ln = _call(op, x, _weights_as(w, wf, S), dy, S, a, isa)
    assert "direct16={" in ln, ln[:400]
    if wf == "IOX":  # (the plan line describes IOX weights)
        assert ":w16 " in ln, ln[:700]
    _assert_equal_nonfinite(got, want)


# Where the GEMM plan needs several reduction chunks (5000 channels x 4
# taps a phase), the tiles cannot round the result: route convert16 with
# wide16={...}, an f32 result per batch chunk rounded once after it, the
# 16-bit weights still packed as read (IOX, heuristics A23; other layouts
# widened first). Sums that need f32, a NaN in the weights.
@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("wf", ["IOX", "XIO"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
def test_wide16_chunks_rounded_once(op, wf, dtype, isa):
    S, s, p = 2, 2, 1
    ic, oc = (5000, 70) if op == "fwd" else (70, 5000)
    x = _ints((2, ic, 3, 4), dtype, 74, 1, 4)
    w = _ints((ic, oc, 3, 3), dtype, 75, 1, 4)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dtype, 76, 1, 4)
    want = _oracle(op, x, w, S, s, p, 1, dy)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    w[7, 9, 1, 2] = float("nan")
    want = _oracle(op, x, w, S, s, p, 1, dy).to(dtype)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format=wf)
    got, ln = _call(op, x, _weights_as(w, wf, S), dy, S, a, isa)
    assert "wide16={" in ln and " chunks=1 " not in ln.split("wide16=")[1], ln[:600]
    assert ":w16 " in ln, ln[:700]  # (the plan line describes IOX weights)
    _assert_equal_nonfinite(got, want)


# Dense NCX activations (AVX-512 and AVX2) where the tiles round the result: each
# batch chunk transposed into a 16-bit channels-last copy, the tiles reading
# it (or widening it), the 16-bit result transposed back (ncx16=1 in the plan
# line, heuristics A24); fewer than 32 channels a side (not depthwise) and
# one-pixel inputs keep the f32 copies. Exact against the oracle, with
# channel tails, two batch chunks (a smaller last one), 1D / 3D, groups and
# depthwise.
NCX16_CASES = [  # (op, S, N, IC, OC, spatial, K, s, p, groups, ncx16)
    ("fwd", 2, 3, 37, 40, (5, 6), 4, 2, 1, 1, True),
    ("bwd_d", 2, 3, 40, 37, (5, 6), 4, 2, 1, 1, True),
    ("fwd", 2, 49, 48, 32, (20, 20), 3, 2, 1, 1, True),    # 2 batch chunks (25 + 24)
    ("bwd_d", 2, 39, 64, 64, (16, 16), 4, 2, 1, 1, True),  # 2 batch chunks (20 + 19)
    ("fwd", 1, 2, 64, 48, (37,), 5, 1, 2, 1, True),
    ("fwd", 3, 2, 48, 40, (3, 4, 5), 2, 2, 0, 2, True),
    ("bwd_d", 2, 2, 24, 24, (6, 7), 3, 2, 1, 24, True),    # depthwise
    ("fwd", 2, 2, 16, 17, (8, 8), 3, 1, 1, 1, False),      # 16 / 17 channels
    ("fwd", 2, 4, 100, 64, (1, 1), 4, 1, 0, 1, False),     # one-pixel src
]


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", NCX16_CASES,
                         ids=lambda c: f"{c[0]}_{c[1]}d_n{c[2]}_{c[3]}to{c[4]}_g{c[9]}")
def test_ncx16_exact(case, dtype, isa):
    P.require_isa(isa)
    op, S, N, IC, OC, sp, K, s, p, g, ncx16 = case
    x = _ints((N, IC) + sp, dtype, 77)
    w = _ints((IC, OC // g) + (K,) * S, dtype, 78)
    dy = _ints(_oracle("fwd", x, w, S, s, p, g).shape, dtype, 79)
    b = _ints((OC,), dtype, 80) if op == "fwd" else None
    want = _oracle(op, x, w, S, s, p, g, dy, b=b).to(dtype)
    a = dict(_attrs(S, s, p), groups=g, data_format="NCX", weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b)
    assert (" ncx16=1 " in ln) == ncx16, ln[:400]
    if N >= 39:
        assert " chunks=2 " in ln, ln[:300]
    assert torch.equal(got, want)


# AVX2: not where the f32 route would run the problem planar in place (a
# one-pixel diff_src under a covering kernel: the planar dot products read
# the NCX diff_dst as it is; through ncx16 it ran 1.3x slower on Zen 3); the
# channels-last path forced, ncx16 again. Exact either way.
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_ncx16_not_where_planar_avx2(dtype):
    P.require_isa("avx2")
    S, s, p = 2, 1, 0
    x = _ints((3, 40, 1, 1), dtype, 81)
    w = _ints((40, 48, 4, 4), dtype, 82)
    dy = _ints((3, 48, 4, 4), dtype, 83)
    want = _oracle("bwd_d", x, w, S, s, p, dy=dy).to(dtype)
    a = dict(_attrs(S, s, p), groups=1, data_format="NCX", weights_format="IOX")
    for path, ncx16 in (("auto", False), ("channels_last", True)):
        with tct.use_ncx_path(path):
            got, ln = _call("bwd_d", x, w, dy, S, a, "avx2")
        assert (" ncx16=1 " in ln) == ncx16, (path, ln[:400])
        assert torch.equal(got, want), path


GEMM16_CASES = [  # (op, S, N, IC, OC, spatial, K, s, p, d, reads16)
    ("bwd_d", 2, 3, 13, 20, (9, 11), 1, 2, 0, 1, True),  # 1x1 s2: 1/4 of diff_dst read
    ("bwd_d", 3, 2, 19, 17, (3, 4, 5), 1, 2, 0, 1, True),  # 3D: 1/8; column tails
    ("fwd", 1, 5, 8, 9, (7,), 3, 2, 1, 2, True),  # tiny (dilated, 1D)
    ("bwd_d", 1, 4, 8, 9, (7,), 3, 2, 1, 2, True),
    ("fwd", 2, 2, 48, 40, (8, 8), 3, 1, 1, 1, False),  # every element read 9x 3 blocks: widened
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", GEMM16_CASES, ids=lambda c: f"{c[0]}_{c[1]}d_{c[3]}to{c[4]}")
def test_gemm16_reads_16bit_inputs(case, dtype, isa):
    # The GEMM tiles read the 16-bit inputs themselves (tile ..._f16in / _bf16in,
    # heuristics A19) where they broadcast few of them: no f32 copy; exact on
    # integer data with tails, NaN in the inputs propagated; layers that read
    # each element many times keep the widened copy.
    op, S, N, IC, OC, sp, K, s, p, d, reads16 = case
    x = _ints((N, IC) + sp, dtype, 81)
    w = _ints((IC, OC) + (K,) * S, dtype, 82)
    dy = _ints(_oracle("fwd", x, w, S, s, p, d=d).shape, dtype, 83)
    if op == "fwd":
        x.view(-1)[5] = float("nan")
    else:
        dy.view(-1)[0] = float("nan")  # (read: position 0 of every stride phase)
    b = _ints((OC,), dtype, 84)
    want = _oracle(op, x, w, S, s, p, 1, dy, d=d, b=b if op == "fwd" else None).to(dtype)
    a = dict(_attrs(S, s, p, d), groups=1, data_format="NXC", weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b)
    tag = "_bf16in" if dtype == torch.bfloat16 else "_f16in"
    assert "direct16={" in ln and "route=gemm" in ln, ln[:400]
    assert (tag + " " in ln) == reads16, ln[:500]
    _assert_equal_nonfinite(got, want)


STAGE16_CASES = [  # (op, S, N, IC, OC, spatial, K, s, p)
    ("fwd", 2, 3, 40, 24, (30, 31), 2, 2, 0),  # k2 s2: a tap per phase; partial tiles
    ("bwd_d", 2, 4, 36, 48, (16, 16), 2, 2, 0),  # 4 taps a row, 36 columns
    ("fwd", 1, 4, 64, 20, (300,), 4, 2, 1),  # 2 taps a phase, padded borders
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", STAGE16_CASES, ids=lambda c: f"{c[0]}_{c[1]}d_{c[3]}to{c[4]}")
def test_stage16_exact(case, dtype, isa):
    # GEMM tiles over 16-bit inputs widened per tile into a stage (tile
    # ..._f16stage / _bf16stage, heuristics A21) where each input element is
    # widened at most 8 times: no f32 copy of the input; exact with tails,
    # borders and NaN inputs.
    op, S, N, IC, OC, sp, K, s, p = case
    x = _ints((N, IC) + sp, dtype, 101)
    w = _ints((IC, OC) + (K,) * S, dtype, 102)
    dy = _ints(_oracle("fwd", x, w, S, s, p).shape, dtype, 103)
    (x if op == "fwd" else dy).view(-1)[7] = float("nan")
    b = _ints((OC,), dtype, 104)
    want = _oracle(op, x, w, S, s, p, 1, dy, b=b if op == "fwd" else None).to(dtype)
    a = dict(_attrs(S, s, p), groups=1, data_format="NXC", weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b)
    tag = "_bf16stage " if dtype == torch.bfloat16 else "_f16stage "
    assert "direct16={" in ln and tag in ln, ln[:500]
    _assert_equal_nonfinite(got, want)


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("shape", [(2, 5, 3, 20, 15), (3, 4, 4, 24, 24)],
                         ids=["2d_g5_4to3", "3d_g4_6to6"])  # (S, groups, K, IC, OC)
def test_grouped16_exact(shape, op, dtype, isa):
    # Small groups (AVX-512's permuting kernel) on the 16-bit tensors: rows
    # widened as loaded, results rounded once (tile ..._f16in / _bf16in,
    # heuristics A22); AVX2 runs the groups as GEMMs.
    S, g, K, IC, OC = shape
    x = _ints((2, IC) + (6,) * S, dtype, 111)
    w = _ints((IC, OC // g) + (K,) * S, dtype, 112)
    dy = _ints(_oracle("fwd", x, w, S, 1, 1, g).shape, dtype, 113)
    (x if op == "fwd" else dy).view(-1)[9] = float("inf")
    b = _ints((OC,), dtype, 114)
    want = _oracle(op, x, w, S, 1, 1, g, dy, b=b if op == "fwd" else None).to(dtype)
    a = dict(_attrs(S, 1, 1), groups=g, data_format="NXC", weights_format="IOX")
    got, ln = _call(op, x, w, dy, S, a, isa, b)
    tag = "_grouped_bf16in " if dtype == torch.bfloat16 else "_grouped_f16in "
    assert (tag in ln) == (isa != "avx2"), ln[:500]
    _assert_equal_nonfinite(got, want)


PATCH16_CASES = [  # (S, N, IC, OC, spatial, K): forwards whose kernel tiles the output
    (2, 2, 13, 4, (5, 7), 3),  # k3 s3, 4 channels: 36 columns
    (1, 3, 9, 5, (11,), 4),  # 1D k4 s4
    (2, 3, 10, 20, (1, 1), 4),  # a one-pixel src (generator's z): 320 columns
    (2, 1, 2800, 3, (2, 2), 2),  # reduction in two chunks, summed before rounding
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", PATCH16_CASES, ids=lambda c: f"{c[0]}d_{c[2]}to{c[3]}_k{c[5]}")
def test_patch16_exact(case, dtype, isa):
    # The patch route (stride = kernel, few output channels or a one-pixel
    # src) with 16-bit inputs and result: each tile's input rows widened into
    # a stage, each tile buffer rounded once as it is scattered (heuristics
    # A20); no slabs, no f32 copies of the activations.
    S, N, IC, OC, sp, K = case
    x = _ints((N, IC) + sp, dtype, 91, -2, 3)
    w = _ints((IC, OC) + (K,) * S, dtype, 92, -2, 3)
    b = _ints((OC,), dtype, 93)
    x.view(-1)[3] = float("nan")
    want = _oracle("fwd", x, w, S, K, 0, b=b)
    if IC > 2048:
        assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    a = dict(_attrs(S, K, 0), groups=1, data_format="NXC", weights_format="IOX")
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose(_nxc(x, S), w, b, **a)
    ln = lines[0]
    tag = "_bf16in" if dtype == torch.bfloat16 else "_f16in"
    assert "direct16={" in ln and "route=patch" in ln and tag + " " in ln, ln[:500]
    assert " stream=0 " in ln  # (the streamed form: test_patch16_streamed)
    _assert_equal_nonfinite(_ncx(got, S), want.to(dtype))


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_patch16_streamed(dtype, isa):
    # 16-bit results of 8 MiB and more on the patch route: whole tiles of
    # consecutive pixels written as 64-byte lines with streaming stores, the
    # tiles at the image rows' ends and the partial last tile scattered.
    S, N, IC, OC, sp, K = 2, 1, 5, 4, (342, 406), 3  # 5M outputs; 406 = 50 tiles of 8 + 6
    x = _ints((N, IC) + sp, dtype, 95, -2, 3)
    w = _ints((IC, OC) + (K,) * S, dtype, 96, -2, 3)
    want = _oracle("fwd", x, w, S, K, 0).to(dtype)
    a = dict(_attrs(S, K, 0), groups=1, data_format="NXC", weights_format="IOX")
    with P.use_isa(isa), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose(_nxc(x, S), w, None, **a)
    # (whole lines: a tile's run of MR * K * OC 16-bit results a multiple of 64
    # bytes; AVX2's 12-row tiles make 288 bytes, so they scatter)
    mr = int(re.search(r" mr=(\d+) ", lines[0]).group(1))
    streamed = (mr * K * OC * 2) % 64 == 0
    assert "route=patch" in lines[0] and f" stream={int(streamed)} " in lines[0], lines[0][:500]
    assert streamed or isa == "avx2"
    assert torch.equal(_ncx(got, S), want)


# --- channels-last backward-weights on the f32 GEMM tiles reading the 16-bit
# src and diff_dst themselves (route convert16 with bww16={...}: the driver's
# packing widens the rows; one f32 gradient rounded once; no f32 copies).

BWW16_CASES = [  # (S, N, IC, OC, spatial, K, s, p, groups, bww16): wide layers (packed
    # panels in f32 too) widen rows as they pack; narrow ones (tiles on pixel
    # lists) as they load (test_bww16_lists_*), unless they would load each
    # element more than kMaxListWiden times
    (2, 2, 130, 129, (5, 6), 4, 2, 1, 1, True),      # channel tails on both sides
    (2, 2, 160, 128, (9, 9), 1, 2, 0, 1, True),      # 1x1 s2: shared A panels
    (1, 1, 136, 128, (37,), 16, 8, 4, 1, True),      # 1D, batch 1 (AVX2: local n-blocks)
    (3, 2, 128, 130, (3, 4, 5), 2, 2, 0, 1, True),   # 3D
    (2, 2, 264, 256, (4, 4), 3, 2, 1, 2, True),      # groups
    (2, 3, 64, 64, (7, 7), 3, 1, 1, 1, False),       # narrow, 9 taps: 64 + 64 loads per
    # (tap, pixel), about 9 per element: the chunked f32 route
]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", BWW16_CASES, ids=lambda c: f"{c[0]}d_{c[2]}to{c[3]}_g{c[8]}")
def test_bww16_exact(case, dtype, isa):
    S, N, IC, OC, sp, K, s, p, g, bww16 = case
    x = _ints((N, IC) + sp, dtype, 61, 1, 4)
    w_shape = (IC, OC // g) + (K,) * S
    dy = _ints(_oracle("fwd", x, torch.zeros(w_shape), S, s, p, g).shape, dtype, 62, 1, 4)
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, g, dy)
    with P.use_isa(isa), tct.plans() as lines:
        got = _run("bwd_w", _nxc(x, S), torch.zeros(w_shape, dtype=dtype), _nxc(dy, S), S, s, p,
                   g, "NXC")
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    assert ("bww16={" in lines[0] and f" in16={kind} " in lines[0]) == bww16, lines[0][:500]
    assert torch.equal(got, want.to(dtype))


def _bww16_long_sums_and_nonfinite(x, w_shape, s, p, seed, nan_at, inf_at, uarch=None):
    """Backward-weights on channels-last 16-bit x (all ones: long sums of small
    integers, exact in f32, not in 16 bits) under the current ISA: rounded once;
    then a NaN in src and an Inf in diff_dst reach exactly the elements the
    oracle says. Returns the plan line."""
    S, dtype = x.dim() - 2, x.dtype
    dy = _ints(_oracle("fwd", x, torch.zeros(w_shape), S, s, p).shape, dtype, seed, 1, 3)
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, 1, dy)
    assert not torch.equal(want.to(dtype).double(), want)  # the rounding matters
    x[nan_at] = float("nan")
    dy[inf_at] = float("inf")
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, 1, dy).to(dtype)
    with (tct.use_uarch(uarch) if uarch else contextlib.nullcontext()), tct.plans() as lines:
        got = _run("bwd_w", _nxc(x, S), torch.zeros(w_shape, dtype=dtype), _nxc(dy, S), S, s, p,
                   1, "NXC")
    _assert_equal_nonfinite(got, want)
    return lines[0]


@pytest.mark.parametrize("isa", VEC_ISAS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_bww16_long_sums_rounded_once_and_nonfinite(dtype, isa):
    # 8 images of 16x16 ones, a wide layer (packed panels): every gradient
    # element sums about two thousand products.
    with P.use_isa(isa):
        line = _bww16_long_sums_and_nonfinite(torch.ones(8, 130, 16, 16, dtype=dtype),
                                              (130, 128, 4, 4), 2, 1, 63, (3, 5, 7, 8),
                                              (1, 2, 4, 4))
    assert "bww16={" in line, line[:300]


# The tiles on pixel lists over 16-bit rows (BwdWeightsF32Table gemm16 /
# dw16 / grouped16), forced per ISA and per table (AVX-512's Intel table has
# no in-lane permutes, Zen 4's has): (S, N, IC, OC, spatial, K, s, p, groups,
# the kernel in the plan's tile name).
BWW16_LIST_CASES = [
    (2, 2, 36, 4, (5, 7), 3, 3, 0, 1, "gemm"),       # fused taps (AVX-512), 36 <- 4 k3 s3
    (2, 2, 64, 3, (6, 6), 2, 2, 0, 1, "gemm"),       # fused taps, RGB output layer
    (2, 2, 16, 12, (6, 6), 3, 2, 1, 1, "gemm"),      # 12 rows x 1 vector (AVX-512: permutes)
    (2, 2, 8, 12, (6, 6), 3, 2, 1, 1, "gemm"),       # 12 rows x 1 vector (AVX2: permutes)
    (1, 2, 7, 5, (9,), 4, 2, 1, 1, "gemm"),          # 1D, tails on both sides
    (3, 2, 5, 7, (3, 4, 3), 3, 2, 1, 1, "gemm"),     # 3D, tails
    (2, 2, 3, 64, (6, 6), 4, 2, 1, 1, "gemm"),       # 3 rows x 4 vectors (AVX2 3)
    (2, 2, 20, 20, (6, 5), 4, 2, 1, 20, "dw"),       # depthwise, channel tail
    (2, 2, 32, 32, (6, 5), 3, 2, 1, 8, "grouped"),   # 4 channels per group
    (2, 1, 16, 16, (6, 5), 3, 2, 1, 8, "grouped"),   # 2 per group, batch 1
]
LIST_TABLES = [(i, u) for i, u in (("avx2", "zen3"), ("avx512", "intel_amx"), ("avx512", "zen4"))
               if i in VEC_ISAS]


@pytest.mark.parametrize("isa_uarch", LIST_TABLES, ids=lambda t: f"{t[0]}-{t[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("case", BWW16_LIST_CASES,
                         ids=lambda c: f"{c[0]}d_{c[2]}to{c[3]}_g{c[8]}")
def test_bww16_lists_exact(case, dtype, isa_uarch):
    S, N, IC, OC, sp, K, s, p, g, kernel = case
    isa, uarch = isa_uarch
    x = _ints((N, IC) + sp, dtype, 64, -3, 4)
    w_shape = (IC, OC // g) + (K,) * S
    dy = _ints(_oracle("fwd", x, torch.zeros(w_shape), S, s, p, g).shape, dtype, 65, -3, 4)
    want = _oracle("bwd_w", x, torch.zeros(w_shape), S, s, p, g, dy)
    with P.use_isa(isa), tct.use_uarch(uarch), tct.plans() as lines:
        got = _run("bwd_w", _nxc(x, S), torch.zeros(w_shape, dtype=dtype), _nxc(dy, S), S, s, p,
                   g, "NXC")
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    # AVX2 has no 16-bit grouped tiles: those layers go through f32 copies.
    takes16 = not (isa == "avx2" and kernel == "grouped")
    assert ("bww16={" in lines[0] and f" in16={kind} " in lines[0]) == takes16, lines[0][:500]
    assert f"tile=bwd_weights_f32_{kernel}_" in lines[0], lines[0][:500]
    assert " packed=0 " in lines[0], lines[0][:500]
    assert torch.equal(got, want.to(dtype))


@pytest.mark.parametrize("isa_uarch", LIST_TABLES, ids=lambda t: f"{t[0]}-{t[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_bww16_lists_long_sums_and_nonfinite(dtype, isa_uarch):
    # A fused-taps layer (36 <- 4 k3 s3) on 40x40 ones, on pixel lists: each
    # gradient element sums 1600 products per image.
    isa, uarch = isa_uarch
    with P.use_isa(isa):
        line = _bww16_long_sums_and_nonfinite(torch.ones(2, 36, 40, 40, dtype=dtype),
                                              (36, 4, 3, 3), 3, 0, 66, (1, 5, 7, 8),
                                              (0, 2, 4, 4), uarch)
    assert "bww16={" in line and " packed=0 " in line, line[:300]


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_bww16_batch_zero(dtype):
    # No images: a zero gradient.
    x = torch.zeros(0, 6, 5, 130, dtype=dtype)
    dy = torch.zeros(0, 12, 10, 128, dtype=dtype)
    a = dict(_attrs(2, 2, 1), groups=1, data_format="NXC", weights_format="IOX",
             weights_shape=[130, 128, 4, 4])
    got = torch.ops.graph.conv_transpose_backward_weights(x, dy, **a)
    assert torch.equal(got, torch.zeros(130, 128, 4, 4, dtype=dtype))
