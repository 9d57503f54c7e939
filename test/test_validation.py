"""SPEC section 4: every validation rule raises a RuntimeError naming the argument
(functional wrappers: ValueError or RuntimeError), never a crash."""

import json
import re
import subprocess
import sys
import textwrap

import problems as P
import pytest
import torch

# A valid base problem: 2D, NCX / IOX, g=2.
#   src (2, 4, 3, 3), weights (4, 3, 2, 2) -> OC = 6, dst (2, 6, 6, 5)
BASE = dict(strides=[2, 2], pads_begin=[1, 0], pads_end=[0, 1], dilations=[1, 1],
            output_padding=[1, 0], groups=2, data_format="NCX", weights_format="IOX")
SRC = (2, 4, 3, 3)
W = (4, 3, 2, 2)
DST = (2, 6, 6, 5)


def _t(shape, dtype=torch.float32):
    return torch.ones(shape, dtype=dtype)


def fwd(src=SRC, w=W, bias=None, **over):
    a = dict(BASE, **over)
    src = _t(src) if isinstance(src, tuple) else src
    w = _t(w) if isinstance(w, tuple) else w
    bias = _t(bias) if isinstance(bias, tuple) else bias
    return torch.ops.graph.conv_transpose(src, w, bias, **a)


def bwd_data(dy=DST, w=W, **over):
    a = dict(BASE, **over)
    dy = _t(dy) if isinstance(dy, tuple) else dy
    w = _t(w) if isinstance(w, tuple) else w
    return torch.ops.graph.conv_transpose_backward_data(dy, w, **a)


def backprop(dy=DST, w=W, **over):
    a = dict(BASE, **over)
    a["filter_format"] = a.pop("weights_format")
    dy = _t(dy) if isinstance(dy, tuple) else dy
    w = _t(w) if isinstance(w, tuple) else w
    return torch.ops.graph.conv_transpose_backprop_data(dy, w, **a)


def bwd_w(src=SRC, dy=DST, ws_input=None, **over):
    a = dict(BASE, **over)
    if ws_input is None and "weights_shape" not in a:
        a["weights_shape"] = list(W)
    src = _t(src) if isinstance(src, tuple) else src
    dy = _t(dy) if isinstance(dy, tuple) else dy
    return torch.ops.graph.conv_transpose_backward_weights(src, dy, ws_input, **a)


OPS = {"fwd": fwd, "bwd_data": bwd_data, "backprop": backprop, "bwd_w": bwd_w}


def test_base_problem_is_valid():
    P.tct()
    assert list(fwd().shape) == list(DST)
    assert list(fwd(bias=(6,)).shape) == list(DST)
    assert list(bwd_data().shape) == list(SRC)
    assert list(bwd_data(src_shape=list(SRC)).shape) == list(SRC)
    assert list(backprop(src_shape=list(SRC)).shape) == list(SRC)
    assert list(bwd_w().shape) == list(W)
    assert list(bwd_w(ws_input=torch.tensor(W), weights_shape=[]).shape) == list(W)


# --------------------------------------------------------------------------
# attribute rules shared by all ops
# --------------------------------------------------------------------------

COMMON = [
    ("strides_len1", dict(strides=[2]), "strides"),
    ("strides_len3", dict(strides=[2, 2, 2]), "strides"),
    ("pads_begin_len", dict(pads_begin=[1]), "pads_begin"),
    ("pads_end_len", dict(pads_end=[0, 1, 0]), "pads_end"),
    ("dilations_len", dict(dilations=[1]), "dilations"),
    ("output_padding_len", dict(output_padding=[1, 0, 0]), "output_padding"),
    ("strides_zero", dict(strides=[0, 2]), "strides"),
    ("strides_neg", dict(strides=[2, -1]), "strides"),
    ("dilations_zero", dict(dilations=[1, 0]), "dilations"),
    ("dilations_neg", dict(dilations=[-2, 1]), "dilations"),
    ("pads_begin_neg", dict(pads_begin=[-1, 0]), "pads_begin"),
    ("pads_end_neg", dict(pads_end=[0, -1]), "pads_end"),
    ("groups_zero", dict(groups=0), "groups"),
    ("groups_neg", dict(groups=-2), "groups"),
    ("output_padding_eq_stride", dict(output_padding=[2, 0]), "output_padding"),
    ("output_padding_neg", dict(output_padding=[0, -1]), "output_padding"),
    ("output_padding_ge_max_s_d",
     dict(strides=[1, 1], dilations=[2, 1], output_padding=[2, 0]), "output_padding"),
    ("groups_not_dividing_ic", dict(groups=3), "groups"),
    ("data_format_unknown", dict(data_format="NHWC"), "data_format"),
    ("data_format_empty", dict(data_format=""), "data_format"),
    ("auto_pad_unknown", dict(auto_pad="same"), "auto_pad"),
    ("auto_pad_unknown2", dict(auto_pad="EXPLICIT"), "auto_pad"),
]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("over,arg", [pytest.param(o, a, id=i) for i, o, a in COMMON])
def test_attribute_rules(op, over, arg):
    P.tct()
    with pytest.raises(RuntimeError, match=re.escape(arg)):
        OPS[op](**over)


ACCEPTED = {
    "data_format": ["NXC", "NCX"],
    "auto_pad": ["None", "SAME_UPPER", "SAME_LOWER", "VALID"],
    "weights_format": ["IOX", "XOI", "OIX", "XIO"],
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("attr,bad", [("data_format", "NHWC"), ("auto_pad", "same"),
                                      ("weights_format", "OIHW"), ("weights_format", "KIO")])
def test_unknown_strings_list_accepted_values(op, attr, bad):
    P.tct()
    over = {attr: bad}
    name = attr
    if op == "backprop" and attr == "weights_format":
        name = "filter_format"
    fn = OPS[op]
    with pytest.raises(RuntimeError) as ei:
        if op == "backprop" and attr == "weights_format":
            a = dict(BASE)
            a.pop("weights_format")
            torch.ops.graph.conv_transpose_backprop_data(_t(DST), _t(W), **a, filter_format=bad)
        else:
            fn(**over)
    msg = str(ei.value)
    assert name in msg, msg
    assert bad in msg, msg
    for v in ACCEPTED[attr]:
        assert v.lower() in msg.lower(), f"{v!r} not listed in: {msg}"


def test_weights_format_accepts_all_four_in_both_attributes():
    P.tct()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, SRC, generator=g).float()
    w = torch.randint(-3, 4, W, generator=g).float()
    dy = torch.randint(-3, 4, DST, generator=g).float()
    want_y = P.ref_conv_transpose(x, w, None, **BASE)
    want_dx = P.ref_conv_transpose_backward_data(dy, w, **BASE)
    for fmt in P.WEIGHTS_FORMATS:
        wf = P.weights_from_iox(w, fmt)
        a = dict(BASE, weights_format=fmt)
        assert torch.equal(torch.ops.graph.conv_transpose(x, wf, None, **a), want_y.float())
        assert torch.equal(torch.ops.graph.conv_transpose_backward_data(dy, wf, **a),
                           want_dx.float())
        b = dict(BASE)
        b.pop("weights_format")
        assert torch.equal(
            torch.ops.graph.conv_transpose_backprop_data(dy, wf, **b, filter_format=fmt),
            want_dx.float())
        gw = torch.ops.graph.conv_transpose_backward_weights(
            x, dy, **a, weights_shape=list(wf.shape))
        assert torch.equal(gw, P.ref_conv_transpose_backward_weights(
            x, dy, weights_shape=list(wf.shape), **a).float())


def test_output_padding_below_dilation_is_valid():
    """PyTorch's rule: output_padding < max(stride, dilation), not only < stride."""
    P.tct()
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-3, 4, SRC, generator=g).double()
    w = torch.randint(-3, 4, W, generator=g).double()
    a = dict(BASE, strides=[1, 2], dilations=[3, 1], output_padding=[2, 1])
    got = torch.ops.graph.conv_transpose(x, w, None, **a)
    assert torch.equal(got, P.ref_conv_transpose(x, w, None, **a))


# --------------------------------------------------------------------------
# shapes, per op
# --------------------------------------------------------------------------

SHAPE_CASES = [
    # forward
    ("fwd_src_rank2", lambda: fwd(src=(2, 4), w=(4, 3)), r"src"),
    ("fwd_src_rank6", lambda: fwd(src=(1, 4, 2, 2, 2, 2), w=(4, 3, 1, 1, 1, 1),
                                  strides=[1] * 4, pads_begin=[0] * 4, pads_end=[0] * 4,
                                  dilations=[1] * 4, output_padding=[]), r"src"),
    ("fwd_weights_rank", lambda: fwd(w=(4, 3, 2)), r"weights"),
    ("fwd_channel_mismatch", lambda: fwd(src=(2, 5, 3, 3)), r"src|weights"),
    ("fwd_bias_len", lambda: fwd(bias=(5,)), r"bias"),
    ("fwd_bias_2d", lambda: fwd(bias=(6, 1)), r"bias"),
    ("fwd_bias_oc_per_group", lambda: fwd(bias=(3,)), r"bias"),
    ("fwd_output_size_negative",
     lambda: fwd(src=(1, 4, 1, 1), w=(4, 3, 1, 1), strides=[1, 1], pads_begin=[1, 1],
                 pads_end=[1, 1], output_padding=[]), r"(?i)output|dst|size|pads"),
    ("fwd_output_size_zero",
     lambda: fwd(src=(1, 4, 1, 1), w=(4, 3, 1, 1), strides=[1, 1], pads_begin=[1, 0],
                 pads_end=[0, 0], output_padding=[]), r"(?i)output|dst|size|pads"),
    ("fwd_dtype_weights", lambda: fwd(w=_t(W, torch.float64)), r"(?i)dtype|type"),
    ("fwd_dtype_bias", lambda: fwd(bias=_t((6,), torch.float64)), r"(?i)dtype|type"),
    ("fwd_dtype_bf16_f32", lambda: fwd(src=_t(SRC, torch.bfloat16)), r"(?i)dtype|type"),
    ("fwd_dtype_int", lambda: fwd(src=_t(SRC, torch.int64), w=_t(W, torch.int64)),
     r"(?i)dtype|type|src"),
    # backward data
    ("bwd_data_rank", lambda: bwd_data(dy=(2, 6, 6)), r"diff_dst|weights|src"),
    ("bwd_data_channel_mismatch", lambda: bwd_data(dy=(2, 5, 6, 5)), r"diff_dst|weights"),
    ("bwd_data_src_shape_inconsistent", lambda: bwd_data(src_shape=[2, 4, 5, 3]),
     r"src_shape|diff_dst"),
    ("bwd_data_src_shape_inconsistent_small", lambda: bwd_data(src_shape=[2, 4, 1, 3]),
     r"src_shape|diff_dst"),
    ("bwd_data_src_shape_len", lambda: bwd_data(src_shape=[2, 4, 3]), r"src_shape"),
    ("bwd_data_src_shape_channels", lambda: bwd_data(src_shape=[2, 5, 3, 3]), r"src_shape"),
    ("bwd_data_src_shape_batch", lambda: bwd_data(src_shape=[3, 4, 3, 3]), r"src_shape"),
    ("bwd_data_default_size_lt1",
     lambda: bwd_data(dy=(2, 6, 1, 1), w=(4, 3, 3, 3), strides=[1, 1], pads_begin=[0, 0],
                      pads_end=[0, 0], output_padding=[]), r"(?i)size|diff_dst|src|output"),
    ("bwd_data_dtype", lambda: bwd_data(w=_t(W, torch.float16)), r"(?i)dtype|type"),
    ("backprop_channel_mismatch", lambda: backprop(dy=(2, 5, 6, 5)),
     r"output_delta|filter|diff_dst|weights"),
    # the older op's own argument names: src_shape / output_delta
    ("backprop_src_shape_inconsistent", lambda: backprop(src_shape=[2, 4, 5, 3]),
     r"src_shape|output_delta"),
    ("backprop_dtype", lambda: backprop(w=_t(W, torch.float64)), r"(?i)dtype|type"),
    # backward weights
    ("bwd_w_missing_weights_shape",
     lambda: torch.ops.graph.conv_transpose_backward_weights(_t(SRC), _t(DST), **BASE),
     r"weights_shape"),
    ("bwd_w_missing_weights_shape_empty",
     lambda: torch.ops.graph.conv_transpose_backward_weights(_t(SRC), _t(DST), None, **BASE,
                                                             weights_shape=[]),
     r"weights_shape"),
    ("bwd_w_weights_shape_len", lambda: bwd_w(weights_shape=[4, 3, 2]), r"weights_shape"),
    ("bwd_w_weights_shape_ic", lambda: bwd_w(weights_shape=[5, 3, 2, 2]), r"weights_shape|src"),
    ("bwd_w_weights_shape_oc", lambda: bwd_w(weights_shape=[4, 2, 2, 2]),
     r"weights_shape|diff_dst"),
    ("bwd_w_weights_shape_negative", lambda: bwd_w(weights_shape=[4, 3, -1, 2]),
     r"weights_shape"),
    ("bwd_w_input_float", lambda: bwd_w(ws_input=torch.tensor(W, dtype=torch.float32)),
     r"weights_shape"),
    ("bwd_w_input_2d", lambda: bwd_w(ws_input=torch.tensor([W])), r"weights_shape"),
    ("bwd_w_input_len", lambda: bwd_w(ws_input=torch.tensor([4, 3, 2])), r"weights_shape"),
    ("bwd_w_inconsistent_spatial", lambda: bwd_w(dy=(2, 6, 9, 5)), r"src|diff_dst"),
    ("bwd_w_inconsistent_spatial_small", lambda: bwd_w(dy=(2, 6, 4, 5)), r"src|diff_dst"),
    ("bwd_w_batch_mismatch", lambda: bwd_w(dy=(3, 6, 6, 5)), r"src|diff_dst"),
    ("bwd_w_rank_mismatch", lambda: bwd_w(dy=(2, 6, 6)), r"src|diff_dst"),
    ("bwd_w_dy_channels_not_divisible", lambda: bwd_w(dy=(2, 5, 6, 5),
                                                       weights_shape=[4, 3, 2, 2]),
     r"diff_dst|groups|weights_shape"),
    ("bwd_w_dtype", lambda: bwd_w(dy=_t(DST, torch.float64)), r"(?i)dtype|type"),
]


@pytest.mark.parametrize("call,pattern", [pytest.param(c, m, id=i) for i, c, m in SHAPE_CASES])
def test_shape_rules(call, pattern):
    P.tct()
    with pytest.raises(RuntimeError, match=pattern):
        call()


def test_error_message_names_the_value():
    P.tct()
    with pytest.raises(RuntimeError, match=r"strides.*-7|-7.*strides"):
        fwd(strides=[2, -7])
    with pytest.raises(RuntimeError, match=r"groups.*-5|-5.*groups"):
        fwd(groups=-5)
    with pytest.raises(RuntimeError, match=r"output_padding.*5|5.*output_padding"):
        fwd(output_padding=[5, 0])


# --------------------------------------------------------------------------
# functional wrappers and modules (ValueError or RuntimeError)
# --------------------------------------------------------------------------

WRAPPER_CASES = [
    ("conv_transpose_strides",
     lambda m: m.conv_transpose(_t(SRC), _t(W), **dict(BASE, strides=[0, 2])), "strides"),
    ("conv_transpose_data_format",
     lambda m: m.conv_transpose(_t(SRC), _t(W), **dict(BASE, data_format="NWC")),
     "data_format"),
    ("backward_data_src_shape",
     lambda m: m.conv_transpose_backward_data(_t(DST), _t(W), **BASE, src_shape=[2, 4, 5, 3]),
     "src_shape|diff_dst"),
    ("backward_weights_missing_shape",
     lambda m: m.conv_transpose_backward_weights(_t(SRC), _t(DST), **BASE), "weights_shape"),
    ("conv_transpose2d_stride0",
     lambda m: m.conv_transpose2d(_t((1, 4, 3, 3)), _t((4, 2, 3, 3)), stride=0), "stride"),
    ("conv_transpose2d_groups",
     lambda m: m.conv_transpose2d(_t((1, 4, 3, 3)), _t((4, 2, 3, 3)), groups=3), "group"),
    ("conv_transpose1d_output_padding",
     lambda m: m.conv_transpose1d(_t((1, 4, 3)), _t((4, 2, 3)), stride=2, output_padding=2),
     "output_padding"),
    ("ConvTranspose2d_groups", lambda m: m.ConvTranspose2d(4, 6, 3, groups=4), "group"),
    ("ConvTranspose2d_padding_mode",
     lambda m: m.ConvTranspose2d(4, 6, 3, padding_mode="reflect"), "padding_mode|zeros"),
]


@pytest.mark.parametrize("call,pattern", [pytest.param(c, m, id=i) for i, c, m in WRAPPER_CASES])
def test_wrapper_rules(call, pattern):
    m = P.tct()
    with pytest.raises((RuntimeError, ValueError), match=pattern):
        call(m)


TORCH_LAYOUT_HINT = ("(the tensors look like NCX data with IOX weights, torch's layout: "
                     "pass data_format='NCX', weights_format='IOX')")


def test_torch_layout_with_default_formats_hints():
    """torch's NCX/IOX tensors given to the raw op with its NXC/XOI defaults: the channel
    error names the arguments and values and says which formats to pass."""
    m = P.tct()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 5, 6, generator=gen)   # NCX
    w = torch.randn(4, 3, 3, 3, generator=gen)   # IOX
    attrs = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1])
    for call in (lambda: torch.ops.graph.conv_transpose(x, w, **attrs),
                 lambda: m.conv_transpose(x, w, **attrs),
                 lambda: m.conv_transpose(x, w, **attrs, data_format="NCX"),
                 lambda: m.conv_transpose(x, w[:, :1], **attrs, groups=2)):
        with pytest.raises(RuntimeError) as err:
            call()
        msg = str(err.value)
        assert re.search(r"src has \d+ channels but weights has I=\d+", msg), msg
        assert "[4, 3, 3, 3]" in msg or "[4, 1, 3, 3]" in msg
        assert TORCH_LAYOUT_HINT in msg
    # with the hinted formats the same call is right (torch's own op as the reference)
    got = torch.ops.graph.conv_transpose(x, w, **attrs, data_format="NCX", weights_format="IOX")
    torch.testing.assert_close(got, torch.nn.functional.conv_transpose2d(x, w, stride=2,
                                                                         padding=1))
    # a real channel mismatch in NCX/IOX, or NXC/XOI tensors that are no torch layout: no hint
    for src, wt, over in (((2, 3, 5, 6), (4, 3, 3, 3), dict(data_format="NCX",
                                                            weights_format="IOX")),
                          ((2, 5, 6, 3), (3, 3, 2, 4), {})):
        with pytest.raises(RuntimeError, match="channels") as err:
            torch.ops.graph.conv_transpose(_t(src), _t(wt), **attrs, **over)
        assert "look like NCX" not in str(err.value)


# --------------------------------------------------------------------------
# huge values: a clean RuntimeError, not a crash (run in a subprocess)
# --------------------------------------------------------------------------

BIG = 2 ** 62
MAX = 2 ** 63 - 1
A1 = dict(strides=[1], pads_begin=[0], pads_end=[0], dilations=[1], data_format="NCX",
          weights_format="IOX")

HUGE_CASES = {
    # name: (op, src-or-diff_dst shape, weights shape or weights_shape, attribute overrides)
    "fwd_stride_2e62": ("fwd", [1, 1, 3], [1, 1, 2], dict(strides=[BIG])),
    "fwd_stride_max": ("fwd", [1, 1, 2], [1, 1, 2], dict(strides=[MAX])),
    "fwd_dilation_2e62": ("fwd", [1, 1, 3], [1, 1, 3], dict(dilations=[BIG])),
    "fwd_dilation_max": ("fwd", [1, 1, 3], [1, 1, 3], dict(dilations=[MAX])),
    "fwd_pads_begin_2e62": ("fwd", [1, 1, 3], [1, 1, 2], dict(pads_begin=[BIG])),
    "fwd_pads_end_2e62": ("fwd", [1, 1, 3], [1, 1, 2], dict(pads_end=[BIG])),
    "fwd_pads_both_max": ("fwd", [1, 1, 3], [1, 1, 2], dict(pads_begin=[MAX], pads_end=[MAX])),
    "fwd_output_padding_huge": ("fwd", [1, 1, 1], [1, 1, 2],
                                dict(strides=[BIG], output_padding=[BIG - 1])),
    "fwd_groups_2e62": ("fwd", [1, 2, 3], [2, 1, 2], dict(groups=BIG)),
    "bwd_data_stride_2e62_src_shape": ("bwd_data", [1, 1, 4], [1, 1, 2],
                                       dict(strides=[BIG], src_shape=[1, 1, 3])),
    "bwd_data_dilation_2e62": ("bwd_data", [1, 1, 4], [1, 1, 3], dict(dilations=[BIG])),
    "bwd_data_dilation_max": ("bwd_data", [1, 1, 4], [1, 1, 3], dict(dilations=[MAX])),
    "bwd_data_pads_2e62": ("bwd_data", [1, 1, 4], [1, 1, 2], dict(pads_begin=[BIG])),
    "bwd_data_pads_max_src_shape": ("bwd_data", [1, 1, 4], [1, 1, 2],
                                    dict(pads_begin=[MAX], pads_end=[MAX],
                                         src_shape=[1, 1, 3])),
    "bwd_data_src_shape_2e62": ("bwd_data", [1, 1, 4], [1, 1, 2], dict(src_shape=[1, 1, BIG])),
    "bwd_w_stride_2e62": ("bwd_w", [1, 1, 3], [1, 1, 2], dict(strides=[BIG])),
    "bwd_w_dilation_2e62": ("bwd_w", [1, 1, 3], [1, 1, 2], dict(dilations=[BIG])),
    "bwd_w_pads_2e62": ("bwd_w", [1, 1, 3], [1, 1, 2], dict(pads_begin=[BIG], pads_end=[BIG])),
    "bwd_w_kernel_2e62": ("bwd_w", [1, 1, 3], [1, 1, BIG], {}),
    # just below 2**62: the size arithmetic itself must not overflow
    "fwd_stride_2e62m1_overflow": ("fwd", [1, 1, 3], [1, 1, 3], dict(strides=[BIG - 1])),
    "fwd_dilation_2e62m1_overflow": ("fwd", [1, 1, 3], [1, 1, 3],
                                     dict(dilations=[BIG - 1], strides=[2])),
    "fwd_stride_dilation_2e62m1": ("fwd", [1, 1, 2], [1, 1, 3],
                                   dict(strides=[BIG - 1], dilations=[BIG - 1])),
    "fwd_output_padding_2e62m2": ("fwd", [1, 1, 2], [1, 1, 2],
                                  dict(strides=[BIG - 1], output_padding=[BIG - 2])),
    "fwd_pads_2e62m1": ("fwd", [1, 1, 3], [1, 1, 2],
                        dict(pads_begin=[BIG - 1], pads_end=[BIG - 1])),
    "bwd_data_pads_2e62m1": ("bwd_data", [1, 1, 4], [1, 1, 2],
                             dict(pads_begin=[BIG - 1], pads_end=[BIG - 1])),
    "bwd_data_dilation_2e62m1_src_shape": ("bwd_data", [1, 1, 4], [1, 1, 3],
                                           dict(dilations=[BIG - 1], src_shape=[1, 1, 3])),
    "bwd_w_stride_2e62m1": ("bwd_w", [1, 1, 3], [1, 1, 3], dict(strides=[BIG - 1])),
    "bwd_w_pads_2e62m1": ("bwd_w", [1, 1, 3], [1, 1, 2],
                          dict(pads_begin=[BIG - 1], pads_end=[BIG - 1])),
}

_HUGE_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch_convtranspose  # noqa: F401
    cases = json.loads(sys.argv[1])
    for name, (op, shape, wshape, over) in cases.items():
        a = dict(strides=[1], pads_begin=[0], pads_end=[0], dilations=[1],
                 data_format="NCX", weights_format="IOX")
        a.update(over)
        out = dict(name=name)
        try:
            if op == "fwd":
                r = torch.ops.graph.conv_transpose(torch.ones(shape), torch.ones(wshape), None, **a)
            elif op == "bwd_data":
                r = torch.ops.graph.conv_transpose_backward_data(torch.ones(shape),
                                                                 torch.ones(wshape), **a)
            else:
                dy = torch.ones([shape[0], wshape[1]] + [4] * (len(shape) - 2))
                r = torch.ops.graph.conv_transpose_backward_weights(
                    torch.ones(shape), dy, None, **a, weights_shape=wshape)
            out["outcome"] = "returned"
            out["msg"] = "shape " + str(list(r.shape))
        except RuntimeError as e:
            out["outcome"] = "RuntimeError"
            out["msg"] = str(e)[:300]
        except BaseException as e:
            out["outcome"] = type(e).__name__
            out["msg"] = str(e)[:300]
        print(json.dumps(out), flush=True)
""")


@pytest.fixture(scope="module")
def huge_results():
    env = P.subprocess_env()
    try:
        proc = subprocess.run([sys.executable, "-c", _HUGE_SCRIPT, json.dumps(HUGE_CASES)],
                              capture_output=True, text=True, timeout=180, env=env)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "timeout", "timeout"
    res = {}
    for line in out.splitlines():
        try:
            d = json.loads(line)
            res[d["name"]] = d
        except ValueError:
            pass
    return res, rc, err[-2000:]


@pytest.mark.parametrize("name", list(HUGE_CASES))
def test_huge_values_raise_cleanly(name, huge_results):
    res, rc, err = huge_results
    if name not in res:
        done = list(res)
        pytest.fail(f"subprocess died before finishing {name!r} (rc={rc}; finished: {done}); "
                    f"stderr tail:\n{err}")
    r = res[name]
    assert r["outcome"] == "RuntimeError", f"{name}: {r}"


# --------------------------------------------------------------------------
# Issue #24: products of sizes that overflowed int64 (a segfault in the AVX2 path, a wrong
# shape, torch's "negative dimension" error) and huge attributes that reached torch's
# allocator ("can't allocate memory", naming no argument). Each case runs under every ISA
# in a child process (a crash must not take pytest down) and must raise a RuntimeError
# naming the argument and its value.
# --------------------------------------------------------------------------

G61 = 2**61 + 1
# name: (op, tensor shapes, attributes over NCX/IOX stride-1 defaults, pattern)
OVERFLOW_CASES = {
    # zero input channels, weights O dim 8: OC = groups * 8 overflows (2**64 + 8 wraps to 8)
    "fwd_groups_2e61p1": ("fwd", [[1, 0, 4], [0, 8, 3]], dict(groups=G61),
                          rf"groups.*{G61}|{G61}.*groups"),
    "fwd_groups_2e62": ("fwd", [[1, 0, 4], [0, 8, 3]], dict(groups=2**62),
                        rf"groups.*{2**62}|{2**62}.*groups"),
    "fwd_groups_2e40": ("fwd", [[1, 0, 4], [0, 8, 3]], dict(groups=2**40),
                        rf"groups.*{2**40}|{2**40}.*groups"),
    "bwd_data_groups_2e61p1": ("bwd_data", [[1, 8, 6], [0, 8, 3]], dict(groups=G61),
                               rf"groups.*{G61}|{G61}.*groups"),
    "bwd_w_groups_2e61p1": ("bwd_w", [[1, 0, 4], [1, 8, 6]],
                            dict(groups=G61, weights_shape=[0, 8, 3]),
                            rf"groups.*{G61}|{G61}.*groups"),
    # huge attributes: the result would need terabytes
    "fwd_dilations_2e40": ("fwd", [[1, 2, 4, 4], [2, 2, 3, 3]],
                           dict(strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0],
                                dilations=[2**40, 1]),
                           rf"dilations=\[{2**40}, 1\]"),
    "fwd_strides_2e45": ("fwd", [[1, 2, 4], [2, 2, 3]], dict(strides=[2**45]),
                         rf"strides=\[{2**45}\]"),
    "bwd_data_pads_begin_2e45": ("bwd_data", [[1, 2, 6], [2, 2, 3]],
                                 dict(pads_begin=[2**45]), rf"pads_begin=\[{2**45}\]"),
    "bwd_w_weights_shape_2e41": ("bwd_w", [[1, 2, 4], [1, 2, 6]],
                                 dict(pads_begin=[2**41 - 3], weights_shape=[2, 2, 2**41]),
                                 rf"weights_shape.*{2**41}"),
}

_OVERFLOW_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import torch_convtranspose as tct
    isa, cases = sys.argv[1], json.loads(sys.argv[2])
    G = torch.ops.graph
    tct.set_isa(isa)
    for name, (op, shapes, over, _) in cases.items():
        a = dict(strides=[1], pads_begin=[0], pads_end=[0], dilations=[1],
                 data_format="NCX", weights_format="IOX")
        a.update(over)
        x, y = (torch.ones(s) for s in shapes)
        out = dict(name=name)
        try:
            if op == "fwd":
                r = G.conv_transpose(x, y, None, **a)
            elif op == "bwd_data":
                r = G.conv_transpose_backward_data(x, y, **a)
            else:
                r = G.conv_transpose_backward_weights(x, y, None, **a)
            out.update(outcome="returned", msg="shape " + str(list(r.shape)))
        except RuntimeError as e:
            out.update(outcome="RuntimeError", msg=str(e)[:600])
        except BaseException as e:
            out.update(outcome=type(e).__name__, msg=str(e)[:600])
        print(json.dumps(out), flush=True)
""")


@pytest.fixture(scope="module")
def overflow_results():
    """isa -> (results by case name, return code, stderr tail): one child process per ISA."""
    cache = {}

    def run(isa):
        if isa not in cache:
            cases = json.dumps({k: list(v) for k, v in OVERFLOW_CASES.items()})
            proc = subprocess.run([sys.executable, "-c", _OVERFLOW_SCRIPT, isa, cases],
                                  capture_output=True, text=True, timeout=120,
                                  env=P.subprocess_env())
            res = {d["name"]: d for d in map(json.loads, proc.stdout.splitlines())}
            cache[isa] = res, proc.returncode, proc.stderr[-2000:]
        return cache[isa]

    return run


@pytest.mark.parametrize("isa", P.isa_param_names())
@pytest.mark.parametrize("name", list(OVERFLOW_CASES))
def test_overflowing_sizes_name_the_argument(name, isa, overflow_results):
    P.require_isa(isa)
    res, rc, err = overflow_results(isa)
    if name not in res:
        pytest.fail(f"child process died before {name!r} on {isa} (rc={rc}); stderr:\n{err}")
    r = res[name]
    assert r["outcome"] == "RuntimeError", r
    assert re.search(OVERFLOW_CASES[name][3], r["msg"]), r["msg"]
    assert "allocate" not in r["msg"] and "negative dimension" not in r["msg"], r["msg"]


# --------------------------------------------------------------------------
# Zero sizes (SPEC section 4) agree across the three passes. A zero batch or zero channels
# give an empty result (backward weights: zeros); a zero spatial size is an error in every
# pass, naming the tensor, as torch's own conv_transpose and its backward do.
# --------------------------------------------------------------------------

ZP = dict(strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 0], dilations=[1, 2],
          output_padding=[1, 0], groups=2, data_format="NCX", weights_format="IOX")
Z_SRC, Z_W, Z_DST = [2, 4, 3, 2], [4, 3, 2, 2], [2, 6, 6, 4]


@pytest.mark.parametrize("isa", P.isa_param_names())
@pytest.mark.parametrize("zero", ["N", "IC", "OC"])
@pytest.mark.parametrize("op", ["fwd", "bwd_data", "bwd_w"])
def test_zero_batch_or_channels_give_empty_results(op, zero, isa):
    P.require_isa(isa)
    src, w, dst = list(Z_SRC), list(Z_W), list(Z_DST)
    if zero == "N":
        src[0] = dst[0] = 0
    elif zero == "IC":
        src[1] = w[0] = 0
    else:
        w[1] = dst[1] = 0
    g = torch.Generator().manual_seed(3)
    x, wt, dy = (P.make_tensor(s, torch.float32, g, integer=True) for s in (src, w, dst))
    with P.use_isa(isa):
        if op == "fwd":
            got = torch.ops.graph.conv_transpose(x, wt, **ZP)
            want = P.ref_conv_transpose(x, wt, **ZP)
        elif op == "bwd_data":
            got = torch.ops.graph.conv_transpose_backward_data(dy, wt, **ZP, src_shape=src)
            want = P.ref_conv_transpose_backward_data(dy, wt, **ZP, src_shape=src)
        else:
            got = torch.ops.graph.conv_transpose_backward_weights(x, dy, **ZP, weights_shape=w)
            want = P.ref_conv_transpose_backward_weights(x, dy, **ZP, weights_shape=w)
    assert list(got.shape) == {"fwd": dst, "bwd_data": src, "bwd_w": w}[op]
    P.assert_result(got, want, torch.float32, exact=True)
    if op == "bwd_w" and zero == "N":
        assert got.numel() > 0 and not got.any()  # zeros, not an empty tensor


def _torch_zero_spatial(op):
    """torch's own behaviour for the same zero-spatial problem (the reference)."""
    import torch.nn.functional as F
    x, w = torch.zeros(1, 2, 0), torch.zeros(2, 3, 3)
    if op == "fwd":
        return F.conv_transpose1d(x, w)
    if op == "bwd_data":
        return F.conv1d(torch.zeros(1, 3, 0), torch.zeros(2, 3, 3), padding=2)
    return torch.ops.aten.convolution_backward(torch.zeros(1, 3, 2), x, w, None, [1], [0], [1],
                                               True, [0], 1, [False, True, False])


ZS_CASES = [
    ("fwd_src", "fwd", lambda a: torch.ops.graph.conv_transpose(
        torch.ones(1, 2, 0), torch.ones(2, 3, 3), **a), r"src.*zero spatial.*\[1, 2, 0\]"),
    ("fwd_src_nxc_2d", "fwd", lambda a: torch.ops.graph.conv_transpose(
        torch.ones(1, 0, 4, 2), torch.ones(1, 1, 3, 2), **dict(a, data_format="NXC",
        weights_format="XOI", strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0],
        dilations=[1, 1])), r"src.*zero spatial.*\[1, 0, 4, 2\]"),
    ("bwd_data_diff_dst", "bwd_data", lambda a: torch.ops.graph.conv_transpose_backward_data(
        torch.ones(1, 3, 0), torch.ones(2, 3, 3), **a), r"diff_dst.*zero spatial.*\[1, 3, 0\]"),
    ("bwd_data_src_shape", "bwd_data", lambda a: torch.ops.graph.conv_transpose_backward_data(
        torch.ones(1, 3, 2), torch.ones(2, 3, 3), **a, src_shape=[1, 2, 0]),
     r"src_shape.*positive spatial.*\[1, 2, 0\]"),
    ("backprop_output_delta", "bwd_data", lambda a: torch.ops.graph.conv_transpose_backprop_data(
        torch.ones(1, 3, 0), torch.ones(3, 2, 3), strides=[1], pads_begin=[0], pads_end=[0],
        dilations=[1], data_format="NCX", filter_format="OIX"),
     r"output_delta is diff_dst.*diff_dst.*zero spatial"),
    ("bwd_w_src", "bwd_w", lambda a: torch.ops.graph.conv_transpose_backward_weights(
        torch.ones(1, 2, 0), torch.ones(1, 3, 2), **a, weights_shape=[2, 3, 3]),
     r"src.*zero spatial.*\[1, 2, 0\]"),
    ("bwd_w_diff_dst", "bwd_w", lambda a: torch.ops.graph.conv_transpose_backward_weights(
        torch.ones(1, 2, 4), torch.ones(1, 3, 0), **a, weights_shape=[2, 3, 3]),
     r"diff_dst.*zero spatial.*\[1, 3, 0\]"),
    ("bwd_w_both", "bwd_w", lambda a: torch.ops.graph.conv_transpose_backward_weights(
        torch.ones(1, 2, 0), torch.ones(1, 3, 0), **a, weights_shape=[2, 3, 3]),
     r"zero spatial"),
]


@pytest.mark.parametrize("torch_op,call,pattern",
                         [pytest.param(o, c, m, id=i) for i, o, c, m in ZS_CASES])
def test_zero_spatial_size_is_an_error_in_every_pass(torch_op, call, pattern):
    P.tct()
    with pytest.raises(RuntimeError, match="zero"):  # torch: "Only zero batch or zero channel"
        _torch_zero_spatial(torch_op)
    a = dict(strides=[1], pads_begin=[0], pads_end=[0], dilations=[1], data_format="NCX",
             weights_format="IOX")
    with pytest.raises(RuntimeError, match=pattern):
        call(a)
