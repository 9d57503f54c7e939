"""SPEC section 9: oneDNN's own unit-test values (hand-checked here) and the
benchdnn deconvolution problems (resolved_descriptors.csv)."""

import csv
import math

import problems as P
import pytest
import torch

ISAS = P.isa_param_names()
ALL_DTYPES = [pytest.param(torch.float32, isa, id=f"f32-{isa}") for isa in ISAS] + [
    pytest.param(dt, None, id=n) for dt, n in
    [(torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float64, "f64")]]

ATTR0 = dict(strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1])


# --------------------------------------------------------------------------
# grouped 1x1 example
# --------------------------------------------------------------------------


def _grouped_1x1_inputs(dtype):
    src = torch.tensor([1, 2, 3, 4], dtype=dtype).reshape(1, 4, 1, 1)
    w = torch.zeros(4, 4, 1, 1, dtype=dtype)
    w[:, 0::2] = 1  # W[ic][b] = 1 for even b
    return src, w


GROUPED_1X1_DST = [3, 0, 3, 0, 7, 0, 7, 0]


@pytest.mark.parametrize("dtype,isa_name", ALL_DTYPES)
def test_grouped_1x1_example(dtype, isa_name):
    src, w = _grouped_1x1_inputs(dtype)
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        dst = torch.ops.graph.conv_transpose(src, w, None, **ATTR0, groups=2,
                                             data_format="NCX", weights_format="IOX")
    assert dst.dtype == dtype
    assert list(dst.shape) == [1, 8, 1, 1]
    assert dst.flatten().tolist() == GROUPED_1X1_DST


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("weights_format", P.WEIGHTS_FORMATS)
def test_grouped_1x1_example_nxc(weights_format, isa_name):
    src, w = _grouped_1x1_inputs(torch.float32)
    src = P.data_from_ncx(src, "NXC")
    w = P.weights_from_iox(w, weights_format)
    bias = torch.arange(8, dtype=torch.float32)
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        dst = torch.ops.graph.conv_transpose(src, w, bias, **ATTR0, groups=2,
                                             weights_format=weights_format)  # NXC default
    assert list(dst.shape) == [1, 1, 1, 8]
    assert dst.flatten().tolist() == [v + i for i, v in enumerate(GROUPED_1X1_DST)]


@pytest.mark.parametrize("isa_name", ISAS)
def test_grouped_1x1_example_backward(isa_name):
    """The adjoints of the same example, by hand."""
    src, w = _grouped_1x1_inputs(torch.float32)
    dy = torch.arange(1, 9, dtype=torch.float32).reshape(1, 8, 1, 1)
    kw = dict(ATTR0, groups=2, data_format="NCX", weights_format="IOX")
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        dx = torch.ops.graph.conv_transpose_backward_data(dy, w, **kw)
        dw = torch.ops.graph.conv_transpose_backward_weights(src, dy, **kw,
                                                             weights_shape=[4, 4, 1, 1])
    # dx[ic in group gi] = sum over even b of dy[gi*4 + b]: g0: 1+3, g1: 5+7
    assert dx.flatten().tolist() == [4, 4, 12, 12]
    # dw[ic, b] = src[ic] * dy[gi*4 + b]
    want = [[1 * v for v in (1, 2, 3, 4)], [2 * v for v in (1, 2, 3, 4)],
            [3 * v for v in (5, 6, 7, 8)], [4 * v for v in (5, 6, 7, 8)]]
    assert dw.reshape(4, 4).tolist() == want


# --------------------------------------------------------------------------
# 6x6 auto_pad shape example: src 1x1x6x6, K=4, s=1, pads 1/2
# --------------------------------------------------------------------------

# all-ones src and weights: dst[o] counts the (i, k) with o = i - pb + k (per axis)
ONES_1D = {
    "none": [2, 3, 4, 4, 4, 3],           # pads (1, 2)
    "same_upper": [2, 3, 4, 4, 4, 3],     # pads (1, 2)
    "same_lower": [3, 4, 4, 4, 3, 2],     # pads (2, 1)
    "valid": [1, 2, 3, 4, 4, 4, 3, 2, 1],  # pads (0, 0), 9x9
}
PADS_6X6 = {"none": (1, 2), "same_upper": (1, 2), "same_lower": (2, 1), "valid": (0, 0)}
SPELLINGS = {
    "none": ["None", "none", "NONE"],
    "same_upper": ["SAME_UPPER", "same_upper", "Same_Upper"],
    "same_lower": ["SAME_LOWER", "same_lower", "sAME_lOWER"],
    "valid": ["VALID", "valid", "Valid"],
}
SIX_PARAMS = [pytest.param(k, sp, id=sp) for k, v in SPELLINGS.items() for sp in v]


def _outer(v):
    t = torch.tensor(v, dtype=torch.float32)
    return torch.outer(t, t)


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("mode,spelling", SIX_PARAMS)
def test_6x6_auto_pad_forward(mode, spelling, isa_name):
    src = torch.ones(1, 1, 6, 6)
    w = torch.ones(1, 1, 4, 4)
    kw = dict(strides=[1, 1], pads_begin=[1, 1], pads_end=[2, 2], dilations=[1, 1],
              auto_pad=spelling, data_format="NCX", weights_format="IOX")
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        dst = torch.ops.graph.conv_transpose(src, w, None, **kw)
    want = _outer(ONES_1D[mode])
    assert list(dst.shape) == [1, 1] + list(want.shape)
    assert torch.equal(dst[0, 0], want)
    # random data: equal to explicit pads (pb, pe) with auto_pad None
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (1, 1, 6, 6), generator=g).float()
    wr = torch.randint(-3, 4, (1, 1, 4, 4), generator=g).float()
    pb, pe = PADS_6X6[mode]
    with P.use_isa(isa_name):
        got = torch.ops.graph.conv_transpose(x, wr, None, **kw)
        explicit = torch.ops.graph.conv_transpose(
            x, wr, None, **dict(kw, auto_pad="None", pads_begin=[pb, pb], pads_end=[pe, pe]))
    assert torch.equal(got, explicit)
    want_r = P.ref_conv_transpose(x, wr, None, **dict(kw, auto_pad="None", pads_begin=[pb, pb],
                                                      pads_end=[pe, pe]))
    assert torch.equal(got, want_r.float())


# backward data from a 6x6 (9x9 for VALID) diff_dst of ones, no src_shape:
# diff_src[i] counts k with 0 <= i - pb + k < D
ONES_BWD_1D = {
    "none": [3, 4, 4, 4, 3, 2],
    "same_upper": [3, 4, 4, 4, 3, 2],
    "same_lower": [2, 3, 4, 4, 4, 3],
    "valid": [4, 4, 4, 4, 4, 4],
}


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("op", ["backward_data", "backprop_data"])
@pytest.mark.parametrize("mode,spelling", SIX_PARAMS)
def test_6x6_auto_pad_backward_data(mode, spelling, op, isa_name):
    D = 9 if mode == "valid" else 6
    dy = torch.ones(1, 1, D, D)
    w = torch.ones(1, 1, 4, 4)
    kw = dict(strides=[1, 1], pads_begin=[1, 1], pads_end=[2, 2], dilations=[1, 1],
              auto_pad=spelling, data_format="NCX")
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        if op == "backward_data":
            dx = torch.ops.graph.conv_transpose_backward_data(dy, w, **kw, weights_format="IOX")
            dx2 = torch.ops.graph.conv_transpose_backward_data(
                dy, w, **kw, weights_format="IOX", src_shape=[1, 1, 6, 6])
        else:
            dx = torch.ops.graph.conv_transpose_backprop_data(dy, w, **kw, filter_format="IOX")
            dx2 = torch.ops.graph.conv_transpose_backprop_data(
                dy, w, **kw, filter_format="IOX", src_shape=[1, 1, 6, 6])
    want = _outer(ONES_BWD_1D[mode])
    assert list(dx.shape) == [1, 1, 6, 6]  # the pads give back the 6x6 src
    assert torch.equal(dx[0, 0], want)
    assert torch.equal(dx2, dx)


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("mode,spelling", SIX_PARAMS)
def test_6x6_auto_pad_backward_weights(mode, spelling, isa_name):
    D = 9 if mode == "valid" else 6
    src = torch.ones(1, 1, 6, 6)
    dy = torch.ones(1, 1, D, D)
    kw = dict(strides=[1, 1], pads_begin=[1, 1], pads_end=[2, 2], dilations=[1, 1],
              auto_pad=spelling, data_format="NCX", weights_format="IOX")
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        dw = torch.ops.graph.conv_transpose_backward_weights(src, dy, **kw,
                                                             weights_shape=[1, 1, 4, 4])
    # dw[k] counts i in [0, 6) with 0 <= i - pb + k < D (per axis)
    pb = PADS_6X6[mode][0]
    col = [sum(1 for i in range(6) if 0 <= i - pb + k < D) for k in range(4)]
    assert torch.equal(dw[0, 0], _outer(col))


# --------------------------------------------------------------------------
# benchdnn problems (small ones), f32 on every ISA, all three ops
# --------------------------------------------------------------------------

BENCHDNN_MAX_MACS = 3.5e5


def _sp(row, key):
    return tuple(int(v) for v in row[key].split("x"))


def _benchdnn_problems():
    path = P.shared_dir() / "data" / "benchdnn_deconv" / "resolved_descriptors.csv"
    if not path.is_file():
        return []
    out, seen = [], set()
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["graph_expressible"] != "1" or r["descriptor"] in seen:
                continue
            seen.add(r["descriptor"])
            g = int(r["g"])
            ic, oc = int(r["ic"]), int(r["oc"])
            macs = ic * (oc // g) * math.prod(_sp(r, "in_sp")) * math.prod(_sp(r, "k"))
            if macs > BENCHDNN_MAX_MACS:
                continue
            p = P.Problem(N=min(int(r["mb"]), 2), IC=ic, OC=oc, src_sp=_sp(r, "in_sp"),
                          K=_sp(r, "k"),
                          strides=_sp(r, "strides"), dilations=_sp(r, "dil_graph_torch"),
                          pads_begin=_sp(r, "graph_pads_begin"), pads_end=_sp(r, "graph_pads_end"),
                          output_padding=_sp(r, "graph_output_padding"), groups=g,
                          bias=len(out) % 2 == 0,
                          name=f"{r['file']}:{r['line']}")
            out.append((p, _sp(r, "out_sp")))
    return out


BENCHDNN = _benchdnn_problems()


def test_benchdnn_table_present():
    assert len(BENCHDNN) >= 30, (
        f"resolved_descriptors.csv missing or unreadable under {P.shared_dir()}")


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_w"])
@pytest.mark.parametrize("p,out_sp", BENCHDNN or [(None, None)],
                         ids=[p.name for p, _ in BENCHDNN] or ["MISSING_SHARED_DIR"])
def test_benchdnn_problem(p, out_sp, op, isa_name):
    assert p is not None, f"resolved_descriptors.csv not found under {P.shared_dir()}"
    assert tuple(p.out_spatial()) == out_sp  # the table's dst size = the graph formula
    P.require_isa(isa_name)
    x, w, b = P.problem_tensors(p, torch.float32, seed=11, integer=True)
    dy = P.diff_dst_tensor(p, torch.float32, seed=12, integer=True)
    with P.use_isa(isa_name):
        if op == "fwd":
            got = torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
            want = P.ref_conv_transpose(x, w, b, **p.attrs())
            assert list(got.shape[2:]) == list(out_sp)
        elif op == "bwd_data":
            got = torch.ops.graph.conv_transpose_backward_data(dy, w, **p.attrs(),
                                                               src_shape=p.src_shape())
            want = P.ref_conv_transpose_backward_data(dy, w, **p.attrs(), src_shape=p.src_shape())
        else:
            got = torch.ops.graph.conv_transpose_backward_weights(x, dy, **p.attrs(),
                                                                  weights_shape=p.w_shape())
            want = P.ref_conv_transpose_backward_weights(x, dy, **p.attrs(),
                                                         weights_shape=p.w_shape())
    P.assert_result(got, want, torch.float32, exact=True)
