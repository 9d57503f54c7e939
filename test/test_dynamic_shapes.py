"""Symbolic sizes (SPEC section 1): batch and spatial sizes stay symbolic in the meta
kernels and the autograd wiring, so torch.compile recompiles about as often as with
torch's own modules and torch.export with Dims on spatial axes runs on new sizes.
Values are checked against torch's functional ops."""

import problems as P
import pytest
import torch
import torch._dynamo.testing
import torch.nn.functional as F
from torch.export import Dim, export


def _count_compiles(module, inputs, star=False):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    f = torch.compile(module, backend=counter, dynamic=True if star else None)
    outs = [f(*x) if star else f(x) for x in inputs]
    return counter.frame_count, outs


def test_audio_lengths_compile_like_torch():
    """11 lengths through a vocoder-like ConvTranspose1d: no more compiles than torch's."""
    tct = P.tct()
    torch.manual_seed(0)
    ref = torch.nn.ConvTranspose1d(4, 3, 16, stride=8, padding=4)
    ours = tct.ConvTranspose1d(4, 3, 16, stride=8, padding=4)
    ours.load_state_dict(ref.state_dict())
    inputs = [torch.randn(2, 4, L) for L in range(20, 31)]
    n_ref, _ = _count_compiles(ref, inputs)
    n_ours, outs = _count_compiles(ours, inputs)
    assert n_ours <= max(n_ref, 2)
    for x, y in zip(inputs, outs):
        torch.testing.assert_close(y, F.conv_transpose1d(x, ref.weight, ref.bias, 8, 4))


@pytest.mark.parametrize("S", [1, 2, 3])
def test_export_dynamic_spatial(S):
    tct = P.tct()
    torch.manual_seed(S)
    cls = [tct.ConvTranspose1d, tct.ConvTranspose2d, tct.ConvTranspose3d][S - 1]
    fn = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][S - 1]
    layer = cls(3, 4, 3, stride=2, padding=1, output_padding=1, dilation=1)
    model = torch.nn.Sequential(layer)
    sizes = [5, 6, 4][:S]
    dims = {0: Dim("N", min=1, max=8)}
    for j in range(S):
        dims[2 + j] = Dim(f"X{j}", min=2, max=32)
    ep = export(model, (torch.randn(2, 3, *sizes),), dynamic_shapes=({**dims},))
    for new in ([7, 3, 9][:S], [16, 11, 2][:S]):
        x = torch.randn(3, 3, *new)
        want = fn(x, layer.weight, layer.bias, stride=2, padding=1, output_padding=1)
        torch.testing.assert_close(ep.module()(x), want)


def test_raw_ops_symbolic_everywhere():
    """Each op with symbolic batch and spatial sizes (NXC, asymmetric pads, dilation,
    groups), compiled once and run on several sizes, equals the oracle."""
    P.tct()
    a = dict(strides=[2, 3], pads_begin=[1, 0], pads_end=[0, 2], dilations=[1, 2],
             groups=2, data_format="NXC", weights_format="XOI")
    w = torch.randn(3, 2, 3, 4)  # XOI: kernel 3x2, OC/g = 3, IC = 4

    def f(x, dy):
        y = torch.ops.graph.conv_transpose(x, w, **a)
        dx = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=x.shape, **a)
        dx2 = torch.ops.graph.conv_transpose_backward_data(y, w, **a)
        dw = torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=w.shape, **a)
        return y, dx, dx2, dw

    def torch_f(x, dy):  # the same calls of torch's own ops, for the compile count
        x = x.permute(0, 3, 1, 2)
        return F.conv_transpose2d(x, w.permute(3, 2, 0, 1), stride=(2, 3), dilation=(1, 2),
                                  groups=2)

    sizes = [(2, 4, 5), (3, 6, 3), (4, 9, 7), (5, 7, 8)]
    n_torch, _ = _count_compiles(torch_f, [(torch.randn(n, h, wd, 4), None)
                                           for n, h, wd in sizes], star=True)
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    g = torch.compile(f, backend=counter, dynamic=True, fullgraph=True)
    for n, h, wd in sizes:
        x = torch.randn(n, h, wd, 4)
        oh, ow = 2 * (h - 1) + 3 - 1, 3 * (wd - 1) + 3 - 2
        dy = torch.randn(n, oh, ow, 6)
        got = g(x, dy)
        want = (P.ref_conv_transpose(x, w, **a),
                P.ref_conv_transpose_backward_data(dy, w, src_shape=list(x.shape), **a),
                P.ref_conv_transpose_backward_data(got[0], w, **a),
                P.ref_conv_transpose_backward_weights(x, dy, weights_shape=list(w.shape), **a))
        for gt, wt in zip(got, want):
            torch.testing.assert_close(gt.double(), wt, atol=1e-4, rtol=1e-4)
    assert counter.frame_count <= n_torch


def test_backward_auto_pad_same_by_residue():
    """auto_pad SAME in the backward ops depends on D % s: sizes of each residue give
    the right values under one compiled function (it may recompile per residue)."""
    P.tct()
    a = dict(strides=[3], pads_begin=[0], pads_end=[0], dilations=[1], auto_pad="SAME_LOWER",
             data_format="NCX", weights_format="IOX")
    w = torch.randn(2, 3, 5)
    g = torch.compile(lambda dy: torch.ops.graph.conv_transpose_backward_data(dy, w, **a),
                      backend="aot_eager", dynamic=True)
    for D in range(7, 16):
        dy = torch.randn(2, 3, D)
        torch.testing.assert_close(g(dy).double(),
                                   P.ref_conv_transpose_backward_data(dy, w, **a),
                                   atol=1e-4, rtol=1e-4)


def test_training_step_compiled_on_varying_sizes():
    """Gradients through the compiled module (AOTAutograd traces the backward with
    symbolic sizes) equal torch's module's, on sizes the graph was not traced with."""
    tct = P.tct()
    torch.manual_seed(3)
    ref = torch.nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1)
    ours = tct.ConvTranspose2d(4, 3, 4, stride=2, padding=1)
    ours.load_state_dict(ref.state_dict())
    torch._dynamo.reset()
    f = torch.compile(ours, backend="aot_eager", dynamic=True)
    for h, w in [(5, 6), (7, 4), (9, 11)]:
        x = torch.randn(2, 4, h, w)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        ours.zero_grad()
        ref.zero_grad()
        f(x1).square().sum().backward()
        ref(x2).square().sum().backward()
        torch.testing.assert_close(x1.grad, x2.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=1e-3, rtol=1e-4)


def test_inconsistent_symbolic_sizes_still_fail():
    """Validation keeps working under symbolic sizes: an inconsistent src_shape is an
    error naming the op, at trace time or run time."""
    P.tct()
    a = dict(strides=[2], pads_begin=[0], pads_end=[0], dilations=[1], data_format="NCX",
             weights_format="IOX")
    w = torch.randn(2, 3, 2)

    def f(dy, x):
        return torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=x.shape, **a)

    g = torch.compile(f, backend="aot_eager", dynamic=True)
    for L in (5, 7):
        dy = torch.randn(2, 3, 2 * L)
        torch.testing.assert_close(g(dy, torch.randn(2, 2, L)).double(),
                                   P.ref_conv_transpose_backward_data(
                                       dy, w, src_shape=[2, 2, L], **a))
    with pytest.raises(Exception, match="conv_transpose_backward_data"):
        g(torch.randn(2, 3, 10), torch.randn(2, 2, 9))


def test_aot_inductor_package_dynamic(tmp_path):
    """An AOTInductor package with dynamic batch and spatial sizes runs on new sizes."""
    tct = P.tct()
    torch.manual_seed(4)
    ref = torch.nn.ConvTranspose2d(4, 3, 4, stride=2, padding=1)
    layer = tct.ConvTranspose2d(4, 3, 4, stride=2, padding=1)
    layer.load_state_dict(ref.state_dict())
    model = torch.nn.Sequential(layer, torch.nn.ReLU())
    dims = {0: Dim("N", min=1, max=16), 2: Dim("H", min=2, max=64), 3: Dim("W", min=2, max=64)}
    ep = export(model, (torch.randn(2, 4, 8, 9),), dynamic_shapes=(dims,))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "m.pt2"))
    runner = torch._inductor.aoti_load_package(path)
    for shape in [(3, 4, 5, 7), (1, 4, 16, 2)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(runner(x), torch.relu(ref(x)))


def test_huge_pads_compile_like_eager():
    """Stand-ins for symbolic sizes grow with the pads: where they would exceed the size
    limit on every axis, the sizes are specialized instead, so compile accepts what eager
    accepts."""
    P.tct()
    a = dict(strides=[2**14] * 3, pads_begin=[2**14] * 3, pads_end=[2**14] * 3,
             dilations=[1] * 3, data_format="NCX", weights_format="IOX")
    w = torch.randn(4, 2, 2, 2, 2)
    f = torch.compile(lambda x: torch.ops.graph.conv_transpose(x, w, **a), backend="aot_eager",
                      dynamic=True)
    for n in (2, 3):
        x = torch.randn(n, 4, 3, 3, 3)
        torch.testing.assert_close(f(x), torch.ops.graph.conv_transpose(x, w, **a))
