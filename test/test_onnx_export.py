"""ONNX export (torch.onnx.export(..., dynamo=True)) of the graph:: ops and of the
ConvTranspose{1,2,3}d modules through torch_convtranspose.onnx: the exported graph is
standard ONNX (ConvTranspose / Conv, no custom-domain node) and onnxruntime reproduces
the eager results, which are themselves checked against the plain-PyTorch oracle."""

import subprocess
import sys

import onnx  # noqa: F401  (the test requirements install these: missing is a failure)
import onnxruntime as ort
import onnxscript  # noqa: F401
import problems as P
import pytest
import torch

Problem = P.Problem
ATOL = RTOL = 1e-4


@pytest.fixture(scope="module")
def tco():
    P.tct()
    import torch_convtranspose.onnx as tco

    return tco


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _ops(prog):
    """op types of the exported graph; asserts every node is in the default domain and no
    local functions remain."""
    model = prog.model_proto
    assert len(model.functions) == 0, [f.name for f in model.functions]
    for node in model.graph.node:
        assert node.domain in ("", "ai.onnx"), f"custom-domain node {node.domain}::{node.op_type}"
    return [n.op_type for n in model.graph.node]


def _run(prog, *inputs):
    sess = ort.InferenceSession(prog.model_proto.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    assert len(names) == len(inputs)
    outs = sess.run(None, {n: t.detach().numpy() for n, t in zip(names, inputs)})
    return [torch.from_numpy(o) for o in outs]


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g.shape) == list(w.shape)
        torch.testing.assert_close(g, w.detach(), atol=ATOL, rtol=RTOL)


def _export(model, args, **kw):
    """Plain torch.onnx.export: importing torch_convtranspose.onnx registered the ops."""
    return torch.onnx.export(model.eval(), args, dynamo=True, verbose=False, **kw)


def _is_same(auto_pad):
    return auto_pad.upper().startswith("SAME")


class AllOps(torch.nn.Module):
    """The forward op, then both backward ops (raw graph ops, the problem's layouts).

    With auto_pad SAME_* the backward ops' pads come from the diff_dst size, so they get
    the default src size (and backward-weights the backward-data result as its src)."""

    def __init__(self, p: Problem, w, b):
        super().__init__()
        self.a = p.attrs()
        self.w = torch.nn.Parameter(w)
        self.b = None if b is None else torch.nn.Parameter(b)

    def forward(self, x, dy):
        a = self.a
        y = torch.ops.graph.conv_transpose(x, self.w, self.b, **a)
        if _is_same(a["auto_pad"]):
            dx = torch.ops.graph.conv_transpose_backward_data(dy, self.w, **a)
            src = dx
        else:
            dx = torch.ops.graph.conv_transpose_backward_data(dy, self.w, **a,
                                                              src_shape=x.shape)
            src = x
        dw = torch.ops.graph.conv_transpose_backward_weights(src, dy, **a,
                                                             weights_shape=self.w.shape)
        return y, dx, dw

    def reference(self, x, dy):
        a = self.a
        y = P.ref_conv_transpose(x, self.w.detach(), None if self.b is None
                                 else self.b.detach(), **a)
        if _is_same(a["auto_pad"]):
            dx = P.ref_conv_transpose_backward_data(dy, self.w.detach(), **a)
            src = dx.float()
        else:
            dx = P.ref_conv_transpose_backward_data(dy, self.w.detach(), **a,
                                                    src_shape=list(x.shape))
            src = x
        dw = P.ref_conv_transpose_backward_weights(src, dy, weights_shape=list(self.w.shape),
                                                   **a)
        return y, dx, dw


# --------------------------------------------------------------------------
# Raw ops: forward + backward-data + backward-weights per problem
# --------------------------------------------------------------------------

CASES = P.SAMPLE_PROBLEMS + [
    Problem(N=2, IC=2, OC=3, src_sp=(5,), K=(3,), strides=(3,), dilations=(2,),
            pads_begin=(1,), pads_end=(2,), output_padding=(1,), auto_pad="VALID",
            data_format="NXC", weights_format="OIX", bias=True, name="1d_valid_NXC_OIX_bias"),
    Problem(N=1, IC=4, OC=6, src_sp=(3, 4), K=(3, 2), strides=(2, 2), dilations=(1, 1),
            pads_begin=(0, 0), pads_end=(0, 0), output_padding=(1, 1), groups=2,
            auto_pad="same_upper", data_format="NXC", weights_format="XIO", bias=True,
            name="2d_same_upper_lowercase_op1_g2_NXC_XIO_bias"),
    # output_padding >= stride (allowed while < dilation) and > pads_end: Pad + Slice path
    Problem(N=2, IC=3, OC=2, src_sp=(4, 3), K=(2, 3), strides=(1, 2), dilations=(3, 3),
            pads_begin=(1, 2), pads_end=(0, 1), output_padding=(2, 2), bias=True,
            name="2d_op_ge_stride_bias"),
    # dilated kernel shorter than the stride with SAME (total pad 0), output_padding 2
    Problem(N=2, IC=2, OC=2, src_sp=(4,), K=(1,), strides=(3,), dilations=(1,),
            pads_begin=(0,), pads_end=(0,), output_padding=(2,), auto_pad="SAME_LOWER",
            data_format="NXC", weights_format="XOI", name="1d_same_lower_k_lt_s_NXC_XOI"),
    Problem(N=1, IC=3, OC=6, src_sp=(2, 3, 2), K=(3, 2, 2), strides=(2, 1, 2),
            dilations=(1, 2, 1), pads_begin=(0, 0, 0), pads_end=(0, 0, 0), groups=3,
            auto_pad="SAME_LOWER", weights_format="OIX", bias=True,
            name="3d_same_lower_g3_NCX_OIX_bias"),
    Problem(N=2, IC=4, OC=8, src_sp=(3, 4), K=(3, 3), strides=(2, 2), dilations=(2, 1),
            pads_begin=(1, 0), pads_end=(0, 3), output_padding=(1, 1), groups=4,
            data_format="NXC", weights_format="XIO", name="2d_depthwise_x2_asym_NXC_XIO"),
    Problem(N=3, IC=2, OC=3, src_sp=(3, 2, 2), K=(2, 2, 3), strides=(1, 2, 3),
            dilations=(2, 1, 1), pads_begin=(2, 1, 0), pads_end=(0, 0, 2),
            output_padding=(1, 1, 2), data_format="NXC", weights_format="IOX", bias=True,
            name="3d_asym_op_NXC_IOX_bias"),
]


@pytest.mark.parametrize("p", CASES, ids=[c.ident() for c in CASES])
def test_graph_ops_export(tco, p):
    x, w, b = P.problem_tensors(p, torch.float32, seed=3)
    dy = P.diff_dst_tensor(p, torch.float32, seed=4)
    model = AllOps(p, w, b)
    with torch.no_grad():
        want = model(x, dy)
    _close(want, [t.float() for t in model.reference(x, dy)])

    prog = _export(model, (x, dy))
    ops = _ops(prog)
    assert ops.count("ConvTranspose") == 1 and ops.count("Conv") == 2, ops
    _close(_run(prog, x, dy), want)


def test_backprop_data_export(tco):
    """The older-spec op (filter_format) exports like backward-data."""
    p = P.SAMPLE_PROBLEMS[3]
    x, w_iox, _ = P.problem_tensors(p.__class__(**{**p.__dict__, "weights_format": "IOX"}),
                                    torch.float32, seed=5)
    dy = P.diff_dst_tensor(p, torch.float32, seed=6)
    filt = P.weights_from_iox(w_iox, "XIO").contiguous()
    a = p.attrs()
    del a["weights_format"]

    class M(torch.nn.Module):
        def forward(self, dy, filt):
            return torch.ops.graph.conv_transpose_backprop_data(
                dy, filt, **a, filter_format="XIO", src_shape=list(x.shape))

    want = M()(dy, filt)
    _close([want], [P.ref_conv_transpose_backward_data(
        dy, filt, **a, weights_format="XIO", src_shape=list(x.shape)).float()])
    prog = _export(M(), (dy, filt))
    assert "Conv" in _ops(prog)
    _close(_run(prog, dy, filt), [want])


# --------------------------------------------------------------------------
# The nn.Modules (drop-ins for torch.nn.ConvTranspose*d)
# --------------------------------------------------------------------------

MODULES = [
    # (S, in, out, kernel, kwargs, input shape)
    (1, 3, 4, 3, dict(stride=2, padding=1, output_padding=1), (2, 3, 7)),
    (1, 4, 2, 4, dict(stride=3, dilation=2, output_padding=2, groups=2, bias=False), (4, 5)),
    (2, 4, 6, (3, 2), dict(stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2,
                           dilation=(1, 2)), (2, 4, 4, 5)),
    (3, 2, 4, 2, dict(stride=2, padding=(0, 1, 0), dilation=(1, 1, 2), groups=2),
     (1, 2, 3, 2, 3)),
]


@pytest.mark.parametrize("case", MODULES, ids=[f"{c[0]}d-{i}" for i, c in enumerate(MODULES)])
def test_module_export(tco, case):
    S, cin, cout, k, kw, shape = case
    tct = P.tct()
    mod = getattr(tct, f"ConvTranspose{S}d")(cin, cout, k, **kw).eval()
    ref = getattr(torch.nn, f"ConvTranspose{S}d")(cin, cout, k, **kw).eval()
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = mod(x)
        _close([want], [ref(x)])
    prog = _export(mod, (x,))
    ops = _ops(prog)
    assert ops.count("ConvTranspose") == 1, ops
    _close(_run(prog, x), [want])


def test_module_output_size_export(tco):
    """forward(x, output_size) picks output_padding at trace time."""
    tct = P.tct()

    class Up(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = tct.ConvTranspose2d(3, 2, 3, stride=2, padding=1)

        def forward(self, x):
            return self.up(x, output_size=[8, 7])

    m = Up().eval()
    x = torch.randn(1, 3, 4, 4, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        want = m(x)
    assert list(want.shape) == [1, 2, 8, 7]
    prog = _export(m, (x,))
    _close(_run(prog, x), [want])


# --------------------------------------------------------------------------
# Dynamic batch, the entry points, import isolation
# --------------------------------------------------------------------------


class Net(torch.nn.Module):
    """A small decoder with the library's module plus both raw backward ops."""

    def __init__(self):
        super().__init__()
        tct = P.tct()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.up = tct.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                      groups=2)
        self.a = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
                      output_padding=[1, 1], groups=2, data_format="NCX",
                      weights_format="IOX")

    def forward(self, x):
        h = torch.relu(self.conv(x))
        y = self.up(h)
        dh = torch.ops.graph.conv_transpose_backward_data(y, self.up.weight, **self.a,
                                                          src_shape=h.shape)
        dw = torch.ops.graph.conv_transpose_backward_weights(
            h, y, **self.a, weights_shape=self.up.weight.shape)
        return y, dh, dw


def test_dynamic_batch(tco):
    m = Net().eval()
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 5, 4, generator=gen)
    batch = torch.export.Dim("batch", min=1, max=64)
    prog = _export(m, (x,), dynamic_shapes={"x": {0: batch}})
    dim0 = prog.model_proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim0.dim_param and not dim0.HasField("dim_value")
    _ops(prog)
    for n in (1, 3):
        xn = torch.randn(n, 3, 5, 4, generator=gen)
        with torch.no_grad():
            want = m(xn)
        _close(_run(prog, xn), want)


def test_dynamic_spatial(tco):
    """Batch, H and W dynamic: one graph runs on new sizes (odd sizes too)."""
    m = Net().eval()
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 5, 4, generator=gen)
    dims = {0: torch.export.Dim("N"), 2: torch.export.Dim("H"), 3: torch.export.Dim("W")}
    prog = _export(m, (x,), dynamic_shapes={"x": dims})
    shape = prog.model_proto.graph.input[0].type.tensor_type.shape.dim
    assert all(d.dim_param and not d.HasField("dim_value") for i, d in enumerate(shape) if i != 1)
    _ops(prog)
    for size in [(3, 3, 7, 6), (1, 3, 4, 9)]:
        xn = torch.randn(*size, generator=gen)
        with torch.no_grad():
            want = m(xn)
        _close(_run(prog, xn), want)


def test_entry_points(tco, tmp_path):
    """tco.export (file written) and custom_translation_table give the same graph."""
    m = Net().eval()
    x = torch.randn(2, 3, 5, 4, generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        want = m(x)
    f = tmp_path / "net.onnx"
    prog = tco.export(m, (x,), f, verbose=False)
    assert f.exists() and f.stat().st_size > 0
    _close(_run(prog, x), want)
    prog2 = torch.onnx.export(m, (x,), dynamo=True, verbose=False,
                              custom_translation_table=tco.translation_table())
    assert _ops(prog2) == _ops(prog)
    _close(_run(prog2, x), want)
    # torch.onnx.export with no extra argument at all (dynamo=True is torch's default)
    assert tco.register() is True
    prog3 = torch.onnx.export(m, (x,), verbose=False)
    assert _ops(prog3) == _ops(prog)
    assert set(tco.translation_table()) == {
        torch.ops.graph.conv_transpose.default,
        torch.ops.graph.conv_transpose_backward_data.default,
        torch.ops.graph.conv_transpose_backprop_data.default,
        torch.ops.graph.conv_transpose_backward_weights.default,
    }
    with pytest.raises(ValueError, match="dynamo"):
        tco.export(m, (x,), dynamo=False)


def test_import_does_not_load_onnx():
    code = ("import sys, torch_convtranspose\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('onnx', 'onnxscript', 'onnxruntime', 'onnx_ir')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=P.subprocess_env())
