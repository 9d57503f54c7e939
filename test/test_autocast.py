"""Autocast on CPU (SPEC section 5): the ops behave like torch's own conv_transpose,
run in autocast's dtype with every floating input cast, gradients in the parameters'
dtype; checked against torch's modules under the same autocast."""

import copy

import problems as P
import pytest
import torch

DTYPES = [torch.bfloat16, torch.float16]


def _models(seed=0):
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(4, 2, 3, stride=1, padding=1, bias=False))
    tct = P.tct()
    ours = copy.deepcopy(ref)
    for i in (2, 4):
        m = ref[i]
        layer = tct.ConvTranspose2d(m.in_channels, m.out_channels, m.kernel_size, m.stride,
                                    m.padding, bias=m.bias is not None)
        layer.load_state_dict(m.state_dict())
        ours[i] = layer
    return ref, ours


@pytest.mark.parametrize("dtype", DTYPES)
def test_sequential_matches_torch(dtype):
    ref, ours = _models()
    x = torch.randn(2, 3, 6, 6)
    outs, grads = [], []
    for model in (ref, ours):
        with torch.autocast("cpu", dtype=dtype):
            y = model(x)
        assert y.dtype == dtype
        y.float().square().sum().backward()
        outs.append(y.float())
        grads.append([p.grad for p in model.parameters()])
    tol = dict(atol=0.05, rtol=0.05) if dtype == torch.float16 else dict(atol=0.1, rtol=0.05)
    torch.testing.assert_close(outs[1], outs[0], **tol)
    for g_ours, g_ref in zip(grads[1], grads[0]):
        assert g_ours.dtype == torch.float32
        torch.testing.assert_close(g_ours, g_ref, atol=0.5, rtol=0.1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_raw_ops_cast_every_floating_input(dtype):
    """Each op under autocast equals the op called on inputs cast by hand."""
    P.tct()
    p = P.SAMPLE_PROBLEMS[1]
    a = p.attrs()
    x, w, b = P.problem_tensors(p, torch.float32, seed=0, integer=True)
    dy = P.diff_dst_tensor(p, torch.float32, seed=1, integer=True)
    lo = lambda t: t.to(dtype)  # noqa: E731
    cases = [
        (lambda x, w, b, dy: torch.ops.graph.conv_transpose(x, w, b, **a), (x, w, b, dy)),
        (lambda x, w, b, dy: torch.ops.graph.conv_transpose_backward_data(
            dy, w, src_shape=p.src_shape(), **a), (x, w, b, dy)),
        (lambda x, w, b, dy: torch.ops.graph.conv_transpose_backward_weights(
            x, dy, weights_shape=p.w_shape(), **a), (x, w, b, dy)),
    ]
    for f, args in cases:
        with torch.autocast("cpu", dtype=dtype):
            got = f(*args)
        want = f(*map(lo, args))
        assert got.dtype == dtype
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_mixed_dtypes_under_autocast_and_float64():
    """Under autocast, an f32 weight meets a bf16 activation without error (the failure
    users hit in a Sequential); float64 is left alone, as autocast does."""
    P.tct()
    p = P.SAMPLE_PROBLEMS[0]
    a = p.attrs()
    x, w, b = P.problem_tensors(p, torch.float32, seed=2, integer=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.ops.graph.conv_transpose(x.bfloat16(), w, b, **a)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), P.ref_conv_transpose(x, w, b, **a), atol=0.5,
                               rtol=0.01)
    x64, w64, b64 = (t.double() for t in (x, w, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y64 = torch.ops.graph.conv_transpose(x64, w64, b64, **a)
    assert y64.dtype == torch.float64
    torch.testing.assert_close(y64, P.ref_conv_transpose(x64, w64, b64, **a))
    with pytest.raises(RuntimeError, match="all floating tensors must share one dtype"):
        torch.ops.graph.conv_transpose(x.bfloat16(), w, b, **a)


def test_autocast_under_compile():
    ref, ours = _models(1)
    x = torch.randn(1, 3, 5, 5)

    def run(model):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    eager = run(ours)
    compiled = torch.compile(run, backend="aot_eager", fullgraph=True)(ours)
    assert compiled.dtype == torch.bfloat16
    torch.testing.assert_close(compiled, eager)
