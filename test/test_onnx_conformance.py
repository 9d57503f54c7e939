"""ONNX ConvTranspose conformance vectors (shared/conformance/onnx_convtranspose).

Node-suite cases are compared exactly; pytorch_exported cases with their
suggested_tolerance. Each case also runs through every weights format and NXC
(inputs permuted accordingly), and through oneDNN's native auto_pad where the
JSON gives that alternative.
"""

import json

import problems as P
import pytest
import torch

CONF_SUBDIR = ("conformance", "onnx_convtranspose")
EXPECTED_NODE = 11
EXPECTED_EXPORTED = 3


def _conformance_files():
    root = P.shared_dir().joinpath(*CONF_SUBDIR)
    if not root.is_dir():
        return []
    return sorted(root.glob("*.json")) + sorted((root / "pytorch_exported").glob("*.json"))


FILES = _conformance_files()
FILE_PARAMS = [pytest.param(f, id=f"{f.parent.name}/{f.stem}") for f in FILES] or [
    pytest.param(None, id="MISSING_SHARED_DIR")]
ISAS = P.isa_param_names()


def _load(path):
    assert path is not None, (
        f"conformance data not found under {P.shared_dir()} "
        "(set TCT_SHARED_DIR to the shared/ folder)")
    with open(path) as f:
        d = json.load(f)

    def t(entry):
        return torch.tensor(entry["data"], dtype=torch.float32).reshape(entry["shape"])

    X, W = t(d["inputs"]["X"]), t(d["inputs"]["W"])
    B = t(d["inputs"]["B"]) if "B" in d["inputs"] else None
    Y = t(d["expected"]["Y"])
    return d, X, W, B, Y


def _graph_attrs(eq):
    return dict(strides=eq["strides"], pads_begin=eq["pads_begin"], pads_end=eq["pads_end"],
                dilations=eq["dilations"], auto_pad=eq["auto_pad"],
                output_padding=eq["output_padding"], groups=eq["groups"],
                data_format=eq["data_format"], weights_format=eq["weights_format"])


def _check(d, got, Y):
    assert got.dtype == torch.float32
    assert list(got.shape) == list(Y.shape)
    tol = d.get("suggested_tolerance")
    if tol is None:
        assert torch.equal(got, Y), f"max |diff| {float((got - Y).abs().max())}"
    else:
        torch.testing.assert_close(got, Y, atol=tol["abs"], rtol=tol["rel"])


def test_conformance_files_present():
    root = P.shared_dir().joinpath(*CONF_SUBDIR)
    assert root.is_dir(), f"missing {root} (set TCT_SHARED_DIR)"
    node = [f for f in FILES if f.parent == root]
    exported = [f for f in FILES if f.parent.name == "pytorch_exported"]
    assert len(node) == EXPECTED_NODE, [f.name for f in node]
    assert len(exported) == EXPECTED_EXPORTED, [f.name for f in exported]


@pytest.mark.parametrize("path", FILE_PARAMS)
def test_oracle_reproduces_conformance(path):
    """Checks the test oracle itself (no extension needed)."""
    d, X, W, B, Y = _load(path)
    eq = d["onednn_graph_equivalent"]
    assert eq["data_format"] == "NCX" and eq["weights_format"] == "IOX"
    assert eq["auto_pad"].upper() == "NONE"
    want = P.ref_conv_transpose(X, W, B, **_graph_attrs(eq))
    assert list(want.shape[2:]) == eq["output_spatial_shape"]
    _check(d, want.float(), Y)


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("path", FILE_PARAMS)
def test_conformance_as_given(path, isa_name):
    d, X, W, B, Y = _load(path)
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        got = torch.ops.graph.conv_transpose(X, W, B, **_graph_attrs(d["onednn_graph_equivalent"]))
    _check(d, got, Y)


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("weights_format", P.WEIGHTS_FORMATS)
@pytest.mark.parametrize("data_format", P.DATA_FORMATS)
@pytest.mark.parametrize("path", FILE_PARAMS)
def test_conformance_all_layouts(path, data_format, weights_format, isa_name):
    d, X, W, B, Y = _load(path)
    a = _graph_attrs(d["onednn_graph_equivalent"])
    a["data_format"], a["weights_format"] = data_format, weights_format
    Xf = P.data_from_ncx(X, data_format).contiguous()
    Wf = P.weights_from_iox(W, weights_format).contiguous()
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        got = torch.ops.graph.conv_transpose(Xf, Wf, B, **a)
    assert list(got.shape) == P.data_shape_from_ncx(list(Y.shape), data_format)
    assert got.is_contiguous()
    _check(d, P.data_to_ncx(got, data_format), Y)


NATIVE = [pytest.param(f, id=f"{f.parent.name}/{f.stem}") for f in FILES
          if "native_auto_pad_alternative" in json.loads(f.read_text())["onednn_graph_equivalent"]]
NATIVE = NATIVE or [pytest.param(None, id="MISSING_SHARED_DIR")]


def test_native_alternative_cases_exist():
    assert NATIVE[0].values[0] is not None


@pytest.mark.parametrize("isa_name", ISAS)
@pytest.mark.parametrize("spelling", ["as_given", "upper"])
@pytest.mark.parametrize("data_format", P.DATA_FORMATS)
@pytest.mark.parametrize("path", NATIVE)
def test_conformance_native_auto_pad(path, data_format, spelling, isa_name):
    d, X, W, B, Y = _load(path)
    eq = d["onednn_graph_equivalent"]
    alt = eq["native_auto_pad_alternative"]
    assert alt["reproduces_expected"]
    S = X.dim() - 2
    a = _graph_attrs(eq)
    a["auto_pad"] = alt["auto_pad"] if spelling == "as_given" else alt["auto_pad"].upper()
    # auto_pad overrides explicit pads: pass deliberately different ones
    a["pads_begin"], a["pads_end"] = [3] * S, [2] * S
    a["output_padding"] = alt["output_padding"]
    a["data_format"] = data_format
    Xf = P.data_from_ncx(X, data_format).contiguous()
    P.require_isa(isa_name)
    with P.use_isa(isa_name):
        got = torch.ops.graph.conv_transpose(Xf, W, B, **a)
    got = P.data_to_ncx(got, data_format)
    assert list(got.shape[2:]) == alt["output_spatial_shape"]
    _check(d, got, Y)
    # the inferred pads: backward data from diff_dst = Y without src_shape must give
    # back X's spatial size: I = floor((D + pb + pe - eff_k) / s) + 1
    dy = P.data_from_ncx(torch.ones_like(Y), data_format).contiguous()
    a_bwd = dict(a)
    with P.use_isa(isa_name):
        gx = torch.ops.graph.conv_transpose_backward_data(dy, W, **a_bwd)
    pb, pe = alt["pads_begin_inferred"], alt["pads_end_inferred"]
    for ax in range(S):
        k = W.shape[2 + ax]
        want_i = P.backward_data_default_size(Y.shape[2 + ax], k, eq["strides"][ax],
                                              eq["dilations"][ax], pb[ax], pe[ax])
        assert want_i == X.shape[2 + ax]
        assert P.data_to_ncx(gx, data_format).shape[2 + ax] == want_i
