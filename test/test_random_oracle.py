"""Randomized comparison of all ops against the plain-PyTorch oracle (SPEC section 7).

Integer-valued data for f32/bf16/f16 (compared exactly against the f64 oracle rounded
to the dtype: every sum stays far below 2**24, so f32 accumulation is exact and the
final rounding is the only one), random reals for f64 (tight tolerance). f32 runs on
every available kernel ISA.
"""

from __future__ import annotations

import dataclasses
import random

import problems as P
import pytest
import torch

ISAS = P.isa_param_names()
# bf16 / f16 run on every ISA too: the reference's loops, and the fast ISAs'
# routes through the f32 kernels (widened in batch chunks, rounded once).
DTYPE_PARAMS = (
    [pytest.param(dt, isa, id=f"{name}-{isa}")
     for dt, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16"))
     for isa in ISAS]
    + [pytest.param(torch.float64, None, id="f64")]
)
F32_ISA_PARAMS = [pytest.param(torch.float32, isa, id=f"f32-{isa}") for isa in ISAS]

LAYOUTS = ("contig", "noncontig", "channels_last", "permuted", "expand")
DEFAULTS = {"auto_pad": "None", "output_padding": [], "groups": 1, "data_format": "NXC",
            "weights_format": "XOI", "filter_format": "XIO"}


@dataclasses.dataclass
class Case:
    p: P.Problem
    seed: int
    src_layout: str = "contig"
    w_layout: str = "contig"
    other_layout: str = "contig"  # diff_dst / bias
    omit_defaults: bool = False
    src_shape_given: bool = False
    ws_mode: str = "attr"  # attr | input | input_i32 | both
    via_wrapper: bool = False

    def ident(self):
        extra = [self.src_layout, self.w_layout, self.other_layout]
        if self.omit_defaults:
            extra.append("dflt")
        if self.src_shape_given:
            extra.append("srcshape")
        extra.append(self.ws_mode)
        if self.via_wrapper:
            extra.append("wrapper")
        return f"{self.p.ident()}-{'-'.join(extra)}-seed{self.seed}"


def _random_case(rng: random.Random, p: P.Problem) -> Case:
    return Case(
        p=p, seed=rng.randrange(1 << 30),
        src_layout=rng.choice(LAYOUTS), w_layout=rng.choice(LAYOUTS),
        other_layout=rng.choice(LAYOUTS[:4]), omit_defaults=rng.random() < 0.25,
        src_shape_given=rng.random() < 0.6,
        ws_mode=rng.choice(["attr", "attr", "input", "input_i32", "both"]),
        via_wrapper=rng.random() < 0.2)


def _cases(seed, n, **kw):
    rng = random.Random(seed)
    return [_random_case(rng, P.random_problem(rng, **kw)) for _ in range(n)]


def _medium_problem(rng: random.Random) -> P.Problem:
    """Wider channels (vector tails) to reach the ISA kernels' main loops."""
    while True:
        S = rng.choice([1, 2, 2, 3])
        kind = rng.random()
        if kind < 0.2:
            g = rng.choice([8, 16, 17])
            icg, ocg = 1, rng.choice([1, 2])
        else:
            g = rng.choice([1, 1, 2])
            icg, ocg = rng.randint(1, 20), rng.randint(1, 20)
        isz = tuple(rng.randint(1, {1: 12, 2: 7, 3: 3}[S]) for _ in range(S))
        K = tuple(rng.randint(1, 3) for _ in range(S))
        s = tuple(rng.choice([1, 2, 3]) for _ in range(S))
        d = tuple(rng.choice([1, 1, 2]) for _ in range(S))
        pb = tuple(rng.randint(0, 2) for _ in range(S))
        pe = tuple(rng.randint(0, 2) for _ in range(S))
        op = tuple(rng.randrange(0, max(s[a], d[a])) for a in range(S))
        p = P.Problem(N=rng.choice([1, 2]), IC=g * icg, OC=g * ocg, src_sp=isz, K=K, strides=s,
                      dilations=d, pads_begin=pb, pads_end=pe, output_padding=op, groups=g,
                      auto_pad=P.mixed_case(rng.choice(P.AUTO_PADS), rng),
                      data_format=rng.choice(P.DATA_FORMATS),
                      weights_format=rng.choice(P.WEIGHTS_FORMATS), bias=rng.random() < 0.5)
        if P.is_valid(p):
            return p


def _medium_cases(seed, n):
    rng = random.Random(seed)
    return [_random_case(rng, _medium_problem(rng)) for _ in range(n)]


FWD_CASES = _cases(101, 150)
BWD_DATA_CASES = _cases(202, 110)
BACKPROP_CASES = _cases(303, 40)
BWD_W_CASES = _cases(404, 110)
ZERO_CASES = _cases(505, 24, allow_zero=True)
MEDIUM_FWD = _medium_cases(606, 30)
MEDIUM_BWD_DATA = _medium_cases(707, 20)
MEDIUM_BWD_W = _medium_cases(808, 20)


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _relayout(t: torch.Tensor, mode: str, seed: int) -> torch.Tensor:
    """Same logical values, different strides."""
    if t is None or mode == "contig":
        return t
    if mode == "noncontig":
        shape = list(t.shape)
        big = t.new_full(shape[:-1] + [2 * shape[-1]], 7)
        big[..., ::2] = t
        out = big[..., ::2]
        return out
    if mode == "channels_last" and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if mode == "channels_last" and t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    if mode in ("channels_last", "permuted"):
        perm = list(range(t.dim()))
        if mode == "channels_last":
            perm = perm[::-1]
        else:
            random.Random(seed).shuffle(perm)
        inv = [perm.index(i) for i in range(t.dim())]
        return t.permute(perm).contiguous().permute(inv)
    if mode == "expand":
        if t.dim() >= 1 and t.shape[0] >= 1:
            return t.narrow(0, 0, 1).expand(t.shape)
        return t
    raise ValueError(mode)


def _attrs(case: Case, which: str) -> dict:
    a = case.p.attrs()
    if which == "backprop":
        a["filter_format"] = a.pop("weights_format")
    if case.omit_defaults:
        for k, v in DEFAULTS.items():
            if k in a and a[k] == v:
                del a[k]
    return a


def _full_attrs(a: dict, which: str) -> dict:
    """Attributes with defaults filled in, in the oracle's (weights_format) terms."""
    out = dict(DEFAULTS)
    out.update(a)
    if which == "backprop":
        out["weights_format"] = out["filter_format"]
    del out["filter_format"]
    return out


_consistent = P.bwd_consistent
_default_src_ok = P.bwd_default_src_ok


# --------------------------------------------------------------------------
# runners
# --------------------------------------------------------------------------


def _run_forward(case: Case, dtype, integer=None):
    p = case.p
    exact = dtype != torch.float64 if integer is None else integer
    x, w, b = P.problem_tensors(p, dtype, seed=case.seed, integer=exact)
    x = _relayout(x, case.src_layout, case.seed)
    w = _relayout(w, case.w_layout, case.seed + 1)
    b = _relayout(b, "noncontig" if case.other_layout != "contig" else "contig", 0)
    a = _attrs(case, "fwd")
    want = P.ref_conv_transpose(x, w, b, **_full_attrs(a, "fwd"))
    if case.via_wrapper:
        got = P.tct().conv_transpose(x, w, b, **a)
    else:
        got = torch.ops.graph.conv_transpose(x, w, b, **a)
    _check(got, want, dtype, exact)


def _check(got, want, dtype, exact):
    if exact or dtype == torch.float64:
        P.assert_result(got, want, dtype, exact)
    else:  # real-valued f32 data
        assert got.dtype == dtype and list(got.shape) == list(want.shape)
        assert got.is_contiguous()
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)


def _run_backward_data(case: Case, dtype, which: str, integer=None):
    p = case.p
    exact = dtype != torch.float64 if integer is None else integer
    _, w, _ = P.problem_tensors(p, dtype, seed=case.seed, integer=exact)
    if which == "backprop":
        # the filter is laid out as filter_format (same letters as weights_format)
        pass
    dy = P.diff_dst_tensor(p, dtype, seed=case.seed + 1, integer=exact)
    dy = _relayout(dy, case.src_layout, case.seed)
    w = _relayout(w, case.w_layout, case.seed + 1)
    a = _attrs(case, which)
    src_shape = p.src_shape() if case.src_shape_given else None
    if src_shape is not None:
        a["src_shape"] = src_shape
    fa = _full_attrs(a, which)
    D = p.out_spatial()
    ok = _consistent(p, D) if src_shape is not None else _default_src_ok(p, D)
    if which == "backprop":
        fn = torch.ops.graph.conv_transpose_backprop_data
        if case.via_wrapper:
            fn = P.tct().conv_transpose_backprop_data
    else:
        fn = torch.ops.graph.conv_transpose_backward_data
        if case.via_wrapper:
            fn = P.tct().conv_transpose_backward_data
    if not ok:
        with pytest.raises((RuntimeError, ValueError)):
            fn(dy, w, **a)
        return
    want = P.ref_conv_transpose_backward_data(dy, w, **fa)
    got = fn(dy, w, **a)
    _check(got, want, dtype, exact)
    if src_shape is not None:
        assert list(got.shape) == list(src_shape)


def _run_backward_weights(case: Case, dtype, integer=None):
    p = case.p
    exact = dtype != torch.float64 if integer is None else integer
    x, _, _ = P.problem_tensors(p, dtype, seed=case.seed, integer=exact)
    dy = P.diff_dst_tensor(p, dtype, seed=case.seed + 1, integer=exact)
    x = _relayout(x, case.src_layout, case.seed)
    dy = _relayout(dy, case.other_layout, case.seed + 2)
    a = _attrs(case, "fwd")
    fa = _full_attrs(a, "fwd")
    ws = p.w_shape()
    args = [x, dy]
    if case.ws_mode == "attr":
        a["weights_shape"] = ws
    else:
        idt = torch.int32 if case.ws_mode == "input_i32" else torch.int64
        args.append(torch.tensor(ws, dtype=idt))
        if case.ws_mode == "both":
            # the input wins: a different (but well-formed) attribute must be ignored
            bogus = P.weights_shape_from_iox(
                [p.IC, p.OC // p.groups] + [k + 1 for k in p.K], fa["weights_format"])
            a["weights_shape"] = bogus
    fn = P.tct().conv_transpose_backward_weights if case.via_wrapper else \
        torch.ops.graph.conv_transpose_backward_weights
    if not _consistent(p, p.out_spatial()):
        with pytest.raises((RuntimeError, ValueError)):
            fn(*args, **a)
        return
    want = P.ref_conv_transpose_backward_weights(x, dy, weights_shape=ws, **fa)
    got = fn(*args, **a)
    _check(got, want, dtype, exact)


def _ids(cases):
    return [c.ident() for c in cases]


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,isa_name", DTYPE_PARAMS)
@pytest.mark.parametrize("case", FWD_CASES, ids=_ids(FWD_CASES))
def test_forward(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_forward(case, dtype)


@pytest.mark.parametrize("dtype,isa_name", DTYPE_PARAMS)
@pytest.mark.parametrize("case", BWD_DATA_CASES, ids=_ids(BWD_DATA_CASES))
def test_backward_data(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_backward_data(case, dtype, "bwd_data")


@pytest.mark.parametrize("dtype,isa_name", DTYPE_PARAMS)
@pytest.mark.parametrize("case", BACKPROP_CASES, ids=_ids(BACKPROP_CASES))
def test_backprop_data(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_backward_data(case, dtype, "backprop")


@pytest.mark.parametrize("dtype,isa_name", DTYPE_PARAMS)
@pytest.mark.parametrize("case", BWD_W_CASES, ids=_ids(BWD_W_CASES))
def test_backward_weights(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_backward_weights(case, dtype)


@pytest.mark.parametrize("op", ["fwd", "bwd_data", "backprop", "bwd_w"])
@pytest.mark.parametrize("dtype,isa_name", DTYPE_PARAMS)
@pytest.mark.parametrize("case", ZERO_CASES, ids=_ids(ZERO_CASES))
def test_zero_size_and_mixed(case, dtype, isa_name, op):
    """Includes N = 0 and zero channels (backward weights with N = 0: zeros)."""
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        if op == "fwd":
            _run_forward(case, dtype)
        elif op == "bwd_w":
            _run_backward_weights(case, dtype)
        else:
            _run_backward_data(case, dtype, op)


@pytest.mark.parametrize("dtype,isa_name", F32_ISA_PARAMS)
@pytest.mark.parametrize("case", MEDIUM_FWD, ids=_ids(MEDIUM_FWD))
def test_forward_wide_channels(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_forward(case, dtype)


@pytest.mark.parametrize("dtype,isa_name", F32_ISA_PARAMS)
@pytest.mark.parametrize("case", MEDIUM_BWD_DATA, ids=_ids(MEDIUM_BWD_DATA))
def test_backward_data_wide_channels(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_backward_data(case, dtype, "bwd_data")


@pytest.mark.parametrize("dtype,isa_name", F32_ISA_PARAMS)
@pytest.mark.parametrize("case", MEDIUM_BWD_W, ids=_ids(MEDIUM_BWD_W))
def test_backward_weights_wide_channels(case, dtype, isa_name):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        _run_backward_weights(case, dtype)


def _large(name, **kw):
    base = dict(N=1, strides=None, dilations=None, pads_begin=None, pads_end=None)
    base.update(kw)
    S = len(base["src_sp"])
    for key in ("strides", "dilations"):
        if base[key] is None:
            base[key] = (1,) * S
    for key in ("pads_begin", "pads_end"):
        if base[key] is None:
            base[key] = (0,) * S
    p = P.Problem(name=name, **base)
    assert P.is_valid(p), name
    return Case(p=p, seed=len(name), src_layout="contig", src_shape_given=True)


# Wider problems for the ISA kernels: column tails past 64/48/32/16, long pixel runs,
# reductions long enough to be split into chunks, many stride phases, depthwise.
LARGE_CASES = [
    _large("chunked_2d_ic250_oc64", IC=250, OC=64, src_sp=(4, 4), K=(3, 3), pads_begin=(1, 1),
           pads_end=(1, 1), bias=True),
    _large("chunked_2d_ic64_oc250", IC=64, OC=250, src_sp=(4, 4), K=(3, 3), strides=(2, 1),
           pads_begin=(1, 0), pads_end=(0, 1), output_padding=(1, 0)),
    _large("chunked_3d_ic80_oc70_NXC_XOI", IC=80, OC=70, src_sp=(3, 3, 3), K=(3, 3, 3),
           pads_begin=(1, 0, 1), pads_end=(0, 1, 1), data_format="NXC", weights_format="XOI",
           bias=True),
    _large("wide_cols_oc130", N=2, IC=20, OC=130, src_sp=(9, 9), K=(2, 2), strides=(2, 2),
           bias=True),
    _large("grouped_48x48_g2", IC=96, OC=96, groups=2, src_sp=(7, 7), K=(3, 3), strides=(2, 2),
           pads_begin=(1, 1), pads_end=(0, 0), output_padding=(1, 1), data_format="NXC",
           weights_format="XIO"),
    _large("many_rows_1d", N=2, IC=16, OC=33, src_sp=(200,), K=(5,), strides=(3,), dilations=(2,),
           pads_begin=(2,), pads_end=(5,), output_padding=(1,), auto_pad="None"),
    _large("depthwise_g70", N=2, IC=70, OC=70, groups=70, src_sp=(8, 8), K=(3, 3), strides=(2, 2),
           pads_begin=(1, 1), pads_end=(0, 0), output_padding=(1, 0), bias=True,
           data_format="NXC"),
    _large("depthwise_g33_mult2", IC=33, OC=66, groups=33, src_sp=(6, 5), K=(3, 2),
           dilations=(2, 1), auto_pad="Same_Lower"),
    _large("bwdw_many_pixels", N=3, IC=8, OC=12, src_sp=(24, 24), K=(3, 3), strides=(2, 2),
           pads_begin=(1, 0), pads_end=(0, 1), output_padding=(1, 1)),
    _large("stride_phases_4x3", N=2, IC=20, OC=36, src_sp=(6, 7), K=(5, 4), strides=(4, 3),
           dilations=(1, 2), pads_begin=(2, 1), pads_end=(1, 3), output_padding=(3, 1),
           data_format="NXC", weights_format="OIX", bias=True),
    _large("depthwise_3d_g32", IC=32, OC=32, groups=32, src_sp=(4, 5, 6), K=(3, 3, 3),
           strides=(2, 1, 2), pads_begin=(1, 1, 0), pads_end=(1, 0, 2), auto_pad="SAME_UPPER",
           weights_format="XOI"),
    _large("pointwise_ic300_oc200", IC=300, OC=200, src_sp=(5, 5), K=(1, 1), strides=(2, 2),
           output_padding=(1, 1), data_format="NXC", weights_format="IOX"),
]


@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_w"])
@pytest.mark.parametrize("dtype,isa_name", F32_ISA_PARAMS)
@pytest.mark.parametrize("case", LARGE_CASES, ids=_ids(LARGE_CASES))
def test_large_f32(case, dtype, isa_name, op):
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        if op == "fwd":
            _run_forward(case, dtype)
        elif op == "bwd_data":
            _run_backward_data(case, dtype, "bwd_data")
        else:
            _run_backward_weights(case, dtype)


REAL_F32 = MEDIUM_FWD[:10] + LARGE_CASES[::2]


@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_w"])
@pytest.mark.parametrize("dtype,isa_name", F32_ISA_PARAMS)
@pytest.mark.parametrize("case", REAL_F32, ids=_ids(REAL_F32))
def test_real_valued_f32(case, dtype, isa_name, op):
    """Random reals in [-1, 1) (not only integers), f32 with a tolerance."""
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        if op == "fwd":
            _run_forward(case, dtype, integer=False)
        elif op == "bwd_data":
            _run_backward_data(case, dtype, "bwd_data", integer=False)
        else:
            _run_backward_weights(case, dtype, integer=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "backprop", "bwd_w"])
def test_low_precision_accumulates_in_f32(op, dtype):
    """Sums of 3600 ones: exact in f32 and representable in bf16/f16, but an accumulator
    in bf16 (stuck at 256) or f16 (stuck at 2048) would give less."""
    a = dict(strides=[1], pads_begin=[0], pads_end=[0], dilations=[1], data_format="NCX",
             weights_format="IOX")

    def ones(*s):
        return torch.ones(s, dtype=dtype)

    if op == "fwd":
        out = torch.ops.graph.conv_transpose(ones(1, 400, 12), ones(400, 2, 9), None, **a)
        want = P.ref_conv_transpose(ones(1, 400, 12), ones(400, 2, 9), None, **a)
    elif op in ("bwd_data", "backprop"):
        dy, w = ones(1, 400, 20), ones(2, 400, 9)
        want = P.ref_conv_transpose_backward_data(dy, w, **a)
        if op == "bwd_data":
            out = torch.ops.graph.conv_transpose_backward_data(dy, w, **a)
        else:
            b = dict(a)
            b["filter_format"] = b.pop("weights_format")
            out = torch.ops.graph.conv_transpose_backprop_data(dy, w, **b)
    else:
        x, dy = ones(4, 2, 900), ones(4, 3, 908)
        out = torch.ops.graph.conv_transpose_backward_weights(x, dy, **a, weights_shape=[2, 3, 9])
        want = P.ref_conv_transpose_backward_weights(x, dy, weights_shape=[2, 3, 9], **a)
    assert float(want.max()) == 3600.0
    P.assert_result(out, want, dtype, exact=True)


def test_case_set_coverage():
    """The generated configurations really cover what they claim to."""
    allc = FWD_CASES + BWD_DATA_CASES + BACKPROP_CASES + BWD_W_CASES
    ps = [c.p for c in allc]
    assert {p.S for p in ps} == {1, 2, 3}
    assert any(p.groups > 1 and p.IC == p.groups for p in ps)  # depthwise
    assert {p.auto_pad.upper() for p in ps} == {"NONE", "SAME_UPPER", "SAME_LOWER", "VALID"}
    assert any(p.auto_pad not in ("None", "SAME_UPPER", "SAME_LOWER", "VALID") for p in ps)
    assert {p.data_format for p in ps} == set(P.DATA_FORMATS)
    assert {p.weights_format for p in ps} == set(P.WEIGHTS_FORMATS)
    assert any(max(p.strides) > 1 and max(p.dilations) > 1 for p in ps)
    assert any(any(op > 0 for op in p.output_padding) for p in ps)
    assert any(p.pads_begin != p.pads_end for p in ps)
    assert any(p.bias for p in ps) and any(not p.bias for p in ps)
    assert {c.src_layout for c in allc} == set(LAYOUTS)
    assert {c.ws_mode for c in BWD_W_CASES} == {"attr", "input", "input_i32", "both"}
    assert any(c.src_shape_given for c in BWD_DATA_CASES)
    assert any(not c.src_shape_given for c in BWD_DATA_CASES)
    assert any(c.p.N == 0 for c in ZERO_CASES)
    assert any(c.p.IC == 0 for c in ZERO_CASES) and any(c.p.OC == 0 for c in ZERO_CASES)
    # most backward cases compute (the others check the consistency error)
    n_ok = sum(_consistent(c.p, c.p.out_spatial()) for c in BWD_W_CASES)
    assert n_ok > 0.7 * len(BWD_W_CASES)
