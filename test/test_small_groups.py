"""Small groups as super-groups (docs/heuristics.md, C28): on AVX2 a channels-last
f32 forward / backward-data whose groups have 2-8 channels a side runs as G / f
groups of f consecutive groups, with block-diagonal weights built from the caller's
(any weights layout), so that the 6x16 tile's columns are whole. The results must
be the plain grouped convolution's: exact against the f64 oracle on integer data,
and a NaN / Inf in one group's input must stay in that group's outputs (the
merged plan would multiply it by the other groups' zeros: such calls run the
plain groups)."""

import problems as P
import pytest
import torch

import torch_convtranspose as tct

CASES = [  # (S, N, G, ICg, OCg, spatial, K, s, p, d, merge factor on AVX2)
    (2, 2, 16, 8, 8, (9, 7), 4, 2, 1, 1, 2),
    (2, 3, 32, 2, 2, (6, 5), 3, 1, 1, 1, 8),
    (2, 2, 8, 4, 4, (5, 6), 3, 2, 0, 2, 4),  # dilated, no pads
    (2, 1, 6, 8, 8, (5, 4), 4, 2, 1, 1, 2),  # f = 2 of 6 groups: three super-groups
    (1, 4, 16, 4, 4, (23,), 5, 3, 2, 1, 4),
    (3, 2, 8, 8, 8, (3, 4, 3), 3, 2, 1, 1, 2),
    (2, 2, 12, 8, 8, (4, 4), 1, 1, 0, 1, 2),  # 1x1
    (2, 0, 16, 8, 8, (4, 4), 3, 1, 1, 1, 2),  # batch 0
]
NOT_MERGED = [  # shapes the rule leaves to the plain groups
    (2, 2, 4, 4, 5, (5, 5), 3, 1, 1, 1),  # 4 -> 5 channels: ICg != OCg
    (2, 2, 4, 4, 8, (7, 7), 2, 2, 0, 1),  # 4 -> 8: ICg != OCg (unmeasured)
    (2, 2, 10, 4, 4, (7, 7), 2, 2, 0, 1),  # 10 groups of 4: f = 4 does not divide
    (2, 2, 3, 8, 8, (5, 5), 3, 1, 1, 1),  # 3 groups of 8: no divisor 2
    (2, 2, 16, 1, 1, (5, 5), 3, 1, 1, 1),  # depthwise
    (2, 2, 2, 16, 16, (5, 5), 3, 1, 1, 1),  # a tile's columns already
]


def _ints(shape, seed, lo=-3, hi=4):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g).to(torch.float32)


def _attrs(S, s, p, d, g, fmt, wf):
    return dict(strides=[s] * S, pads_begin=[p] * S, pads_end=[p] * S, dilations=[d] * S,
                groups=g, data_format=fmt, weights_format=wf)


def _tensors(case, seed=0):
    S, N, G, ICg, OCg, sp, K, s, p, d = case[:10]
    x = _ints((N, G * ICg) + sp, seed)
    w = _ints((G * ICg, OCg) + (K,) * S, seed + 1)
    ref = P.oracle_forward(x.double(), w.double(), None, [s] * S, [p] * S, [p] * S, [d] * S,
                           [], G)
    dy = _ints(tuple(ref.shape), seed + 2)
    return x, w, dy


def _call(op, case, x, w, dy, fmt, wf):
    """Our op on NCX-logical tensors in layout fmt and weights layout wf; NCX result."""
    S, G, s, p, d = case[0], case[2], case[7], case[8], case[9]
    a = _attrs(S, s, p, d, G, fmt, wf)
    wt = P.weights_from_iox(w, wf).contiguous()  # (a real tensor of that layout, not a view)
    if op == "fwd":
        y = torch.ops.graph.conv_transpose(P.data_from_ncx(x, fmt), wt, None, **a)
    else:
        y = torch.ops.graph.conv_transpose_backward_data(
            P.data_from_ncx(dy, fmt), wt, src_shape=P.data_shape_from_ncx(x.shape, fmt), **a)
    return P.data_to_ncx(y, fmt)


def _want(op, case, x, w, dy):
    S, G, s, p, d = case[0], case[2], case[7], case[8], case[9]
    if op == "fwd":
        return P.oracle_forward(x.double(), w.double(), None, [s] * S, [p] * S, [p] * S,
                                [d] * S, [], G)
    return P.oracle_backward_data(dy.double(), w.double(), [s] * S, [p] * S, [p] * S, [d] * S,
                                  G, list(x.shape[2:]))


def _ids(c):
    return f"{c[0]}d_n{c[1]}_g{c[2]}_{c[3]}to{c[4]}_k{c[6]}s{c[7]}"


@pytest.mark.parametrize("wf", P.WEIGHTS_FORMATS)
@pytest.mark.parametrize("fmt", ["NXC", "NCX"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_merged_groups_exact(case, op, fmt, wf):
    P.require_isa("avx2")
    x, w, dy = _tensors(case)
    with tct.use_isa("avx2"), tct.use_ncx_path("channels_last"), tct.plans() as lines:
        got = _call(op, case, x, w, dy, fmt, wf)
    P.assert_result(got.contiguous(), _want(op, case, x, w, dy), torch.float32, exact=True)
    if case[1] > 0:  # (an empty batch plans nothing)
        assert f"merge={case[10]} " in lines[0], lines[0][:400]


@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("case", NOT_MERGED, ids=_ids)
def test_rule_leaves_other_groups_alone(case, op):
    P.require_isa("avx2")
    x, w, dy = _tensors(case, 5)
    with tct.use_isa("avx2"), tct.plans() as lines:
        got = _call(op, case, x, w, dy, "NXC", "IOX")
    P.assert_result(got.contiguous(), _want(op, case, x, w, dy), torch.float32, exact=True)
    assert "merge=" not in lines[0], lines[0][:400]


@pytest.mark.parametrize("isa", [i for i in ("avx512", "reference") if i in P.isa_param_names()])
def test_not_merged_where_not_measured(isa):
    # Only the AVX2 table merges (ConvTable::merge_cols); the other ISAs keep the
    # plain groups.
    P.require_isa(isa)
    case = CASES[0]
    x, w, dy = _tensors(case)
    with tct.use_isa(isa), tct.plans() as lines:
        got = _call("fwd", case, x, w, dy, "NXC", "IOX")
    P.assert_result(got.contiguous(), _want("fwd", case, x, w, dy), torch.float32, exact=True)
    assert "merge=" not in lines[0]


def test_backward_weights_not_merged():
    P.require_isa("avx2")
    case = CASES[0]
    S, G, s, p, d = case[0], case[2], case[7], case[8], case[9]
    x, w, dy = _tensors(case)
    a = _attrs(S, s, p, d, G, "NXC", "IOX")
    with tct.use_isa("avx2"), tct.plans() as lines:
        got = torch.ops.graph.conv_transpose_backward_weights(
            P.data_from_ncx(x, "NXC"), P.data_from_ncx(dy, "NXC"), weights_shape=list(w.shape),
            **a)
    want = P.oracle_backward_weights(x.double(), dy.double(), list(w.shape), [s] * S, [p] * S,
                                     [p] * S, [d] * S, G)
    P.assert_result(got, want, torch.float32, exact=True)
    assert len(lines) == 1 and "merge=" not in lines[0], lines


# 16-bit calls have no non-finite check: super-groups only on the block-diagonal
# tile (two groups of 8 columns), which never multiplies the zeros.
DIAG16 = [0, 3, 5, 6]  # CASES whose plans take avx2_6x16d


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("fmt", ["NXC", "NCX"])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("ci", DIAG16 + [1, 2, 4])
def test_16_bit_merged_only_on_the_block_diagonal_tile(ci, op, fmt, dtype):
    P.require_isa("avx2")
    case = CASES[ci]
    x, w, dy = (t.to(dtype) for t in _tensors(case, 11))
    with tct.use_isa("avx2"), tct.use_ncx_path("channels_last"), tct.plans() as lines:
        got = _call(op, case, x, w, dy, fmt, "IOX")
    P.assert_result(got.contiguous(), _want(op, case, x, w, dy), dtype, exact=True)
    ICg, OCg = case[3], case[4]
    diag = case[10] == 2 and ICg == OCg == 8
    assert diag == (ci in DIAG16)
    # (16-bit tiles: direct16={...}; a call through f32 copies, f32={...}, runs
    # the f32 entry points, which check for non-finite inputs and may merge)
    direct = lines[0].split("direct16={", 1)[1] if "direct16={" in lines[0] else ""
    assert ("merge=2 tile=avx2_6x16d " in lines[0]) == diag, lines[0][:500]
    if not diag:
        assert "merge=" not in direct, lines[0][:500]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_16_bit_nonfinite_input_stays_in_its_group(dtype):
    P.require_isa("avx2")
    case = CASES[0]
    x, w, dy = _tensors(case, 13)
    x[1, 3 * case[3] + 1, 2, 3] = float("inf")
    x, w = x.to(dtype), w.to(dtype)
    want = _want("fwd", case, x, w, dy).to(dtype)
    with tct.use_isa("avx2"), tct.plans() as lines:
        got = _call("fwd", case, x, w, dy, "NXC", "IOX")
    assert "merge=2 tile=avx2_6x16d " in lines[0]
    assert torch.isfinite(got[:, 2 * case[4]:3 * case[4]]).all()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert torch.equal(got[finite], want[finite])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("op", ["fwd", "bwd_d"])
@pytest.mark.parametrize("ci", [0, 2], ids=["8to8_diag", "4to4_zeros"])
def test_nonfinite_input_stays_in_its_group(ci, op, bad):
    # Strided layers: the forward's input is the smaller side (checked before
    # the merged run), the backward-data's result is (checked after it, then rerun
    # on the plain groups). Group 3's input holds the bad value; group 2, merged
    # with it, must stay finite and exact. 8 -> 8 channels a group run the
    # block-diagonal tile, which never multiplies the zeros (no check); 4 -> 4
    # the plain 6x16 tile over the zeros (the check).
    P.require_isa("avx2")
    case = CASES[ci]
    ICg, OCg = case[3], case[4]
    x, w, dy = _tensors(case, 7)
    if op == "fwd":
        x[1, 3 * ICg + 1, 2, 3] = bad
    else:
        dy[1, 3 * OCg + 1, 6, 4] = bad  # (even: reached by the taps of stride 2, dilation 2)
    want = _want(op, case, x, w, dy)
    with tct.use_isa("avx2"), tct.plans() as lines:
        got = _call(op, case, x, w, dy, "NXC", "IOX")
    assert f"merge={case[10]} " in lines[0]
    assert ("tile=avx2_6x16d " in lines[0]) == (ci == 0), lines[0][:400]
    ch = ICg if op == "bwd_d" else OCg  # result channels a group
    other = slice(2 * ch, 3 * ch)  # group 2: merged with group 3, untouched by the bad value
    assert torch.isfinite(got[:, other]).all()
    assert not torch.isfinite(want).all()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert torch.equal(got[finite].double(), want[finite])
