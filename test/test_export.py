"""TorchScript, torch.compile, torch.export of code using torch.ops.graph.*, and the
torch-style functional wrappers / nn.Modules as drop-ins for torch's."""

from typing import Optional

import problems as P
import pytest
import torch
import torch.nn.functional as F

ATTRS = dict(strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 2], dilations=[1, 2],
             auto_pad="None", output_padding=[1, 0], groups=2, data_format="NCX",
             weights_format="IOX")


class GraphOpsModule(torch.nn.Module):
    """Forward op, then both backward ops on its result (NCX/IOX, 2D, g=2)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(4, 3, 2, 3, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(6, generator=g))

    def forward(self, x: torch.Tensor):
        y = torch.ops.graph.conv_transpose(
            x, self.weight, self.bias, strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 2],
            dilations=[1, 2], auto_pad="None", output_padding=[1, 0], groups=2,
            data_format="NCX", weights_format="IOX")
        dx = torch.ops.graph.conv_transpose_backward_data(
            y, self.weight, strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 2],
            dilations=[1, 2], groups=2, data_format="NCX", weights_format="IOX",
            src_shape=x.shape)
        dw = torch.ops.graph.conv_transpose_backward_weights(
            x, y, strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 2], dilations=[1, 2],
            groups=2, data_format="NCX", weights_format="IOX",
            weights_shape=self.weight.shape)
        return y, dx, dw


def _input(n=2, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, 3, 4, generator=g, dtype=dtype)


def _expected(mod, x):
    w = mod.weight.detach().double()
    b = mod.bias.detach().double()
    xd = x.double()
    y = P.ref_conv_transpose(xd, w, b, **ATTRS)
    dx = P.ref_conv_transpose_backward_data(y, w, **ATTRS, src_shape=list(x.shape))
    dw = P.ref_conv_transpose_backward_weights(xd, y, weights_shape=list(w.shape), **ATTRS)
    return y, dx, dw


def _close(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)


def test_eager_module_matches_oracle():
    P.tct()
    mod = GraphOpsModule()
    x = _input()
    _close(mod(x), _expected(mod, x))


def _graph_fn(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]) -> torch.Tensor:
    return torch.ops.graph.conv_transpose(
        x, w, b, strides=[2], pads_begin=[0], pads_end=[1], dilations=[1],
        auto_pad="same_upper", output_padding=[1], groups=1, data_format="NXC",
        weights_format="XOI")


def test_torchscript_function():
    P.tct()
    _scripted_fn = torch.jit.script(_graph_fn)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, 3, generator=g)
    w = torch.randn(3, 4, 3, generator=g)
    b = torch.randn(4, generator=g)
    want = P.ref_conv_transpose(x, w, b, strides=[2], pads_begin=[0], pads_end=[1],
                                dilations=[1], auto_pad="same_upper", output_padding=[1])
    torch.testing.assert_close(_scripted_fn(x, w, b).double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_scripted_fn(x, w, None).double(), want - b.double(),
                               atol=1e-5, rtol=1e-5)


def test_torchscript_module_save_load(tmp_path):
    P.tct()
    mod = GraphOpsModule()
    scripted = torch.jit.script(mod)
    path = tmp_path / "graph_ops.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    x = _input(3)
    want = mod(x)
    got = loaded(x)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    _close(got, _expected(mod, x))
    assert "graph::conv_transpose" in str(loaded.graph) or "graph.conv_transpose" in loaded.code


@pytest.mark.parametrize("backend,dynamic,batches", [
    ("aot_eager", False, (2, 3)), ("aot_eager", True, (2, 3)), ("inductor", False, (2,))])
def test_torch_compile_fullgraph(backend, dynamic, batches):
    P.tct()
    torch._dynamo.reset()
    mod = GraphOpsModule()
    cmod = torch.compile(mod, fullgraph=True, backend=backend, dynamic=dynamic)
    for n in batches:
        x = _input(n).requires_grad_(True)
        got = cmod(x)
        want = mod(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        # backward through the compiled module (incl. double-backward pieces)
        loss_c = sum((t * t).sum() for t in got)
        loss_e = sum((t * t).sum() for t in want)
        gc = torch.autograd.grad(loss_c, [x, mod.weight, mod.bias])
        ge = torch.autograd.grad(loss_e, [x, mod.weight, mod.bias])
        for a, b in zip(gc, ge):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def _all_ops_fn(x, w, b):
    """Every op with every tensor an input (so weights/bias shapes are symbolic too)."""
    a = dict(strides=[2], pads_begin=[1], pads_end=[0], dilations=[1], output_padding=[1],
             data_format="NCX", weights_format="IOX")
    y = torch.ops.graph.conv_transpose(x, w, b, **a)
    dx = torch.ops.graph.conv_transpose_backward_data(y, w, **a, src_shape=x.shape)
    dx2 = torch.ops.graph.conv_transpose_backprop_data(
        y, w, strides=[2], pads_begin=[1], pads_end=[0], dilations=[1], data_format="NCX",
        filter_format="IOX", src_shape=x.shape)
    dw = torch.ops.graph.conv_transpose_backward_weights(x, y, **a, weights_shape=w.shape)
    return y, dx, dx2, dw


def test_torch_compile_dynamic_all_inputs():
    P.tct()
    torch._dynamo.reset()
    cf = torch.compile(_all_ops_fn, fullgraph=True, backend="aot_eager", dynamic=True)
    g = torch.Generator().manual_seed(3)
    for n, c, length in ((2, 3, 5), (3, 4, 7)):
        x = torch.randn(n, c, length, generator=g, requires_grad=True)
        w = torch.randn(c, 2, 3, generator=g, requires_grad=True)
        b = torch.randn(2, generator=g, requires_grad=True)
        got = cf(x, w, b)
        want = _all_ops_fn(x, w, b)
        for u, v in zip(got, want):
            torch.testing.assert_close(u, v, atol=1e-5, rtol=1e-5)
        gc = torch.autograd.grad(sum(t.sum() for t in got), [x, w, b])
        ge = torch.autograd.grad(sum(t.sum() for t in want), [x, w, b])
        for u, v in zip(gc, ge):
            torch.testing.assert_close(u, v, atol=1e-4, rtol=1e-4)


def test_torch_export():
    P.tct()
    mod = GraphOpsModule()
    x = _input(2)
    ep = torch.export.export(mod, (x,))
    text = str(ep.graph)
    assert "graph.conv_transpose" in text
    got = ep.module()(x)
    for g, w in zip(got, mod(x)):
        assert torch.equal(g, w)


def test_torch_export_dynamic_batch():
    P.tct()
    mod = GraphOpsModule()
    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(mod, (_input(2),), dynamic_shapes=({0: batch},))
    for n in (2, 5):
        x = _input(n)
        got = ep.module()(x)
        for g, w in zip(got, mod(x)):
            assert torch.equal(g, w)


# --------------------------------------------------------------------------
# torch-style functional wrappers and nn.Modules as drop-ins
# --------------------------------------------------------------------------

TORCH_STYLE = [
    # (S, in, out, kernel, stride, padding, output_padding, groups, dilation, bias, input spatial)
    (1, 4, 6, 3, 2, 1, 1, 2, 1, True, (7,)),
    (1, 3, 2, 4, 3, 0, 2, 1, 2, False, (5,)),
    (2, 4, 4, (3, 2), (2, 1), (1, 0), (1, 0), 2, (1, 2), False, (4, 5)),
    (2, 2, 3, 3, 1, 1, 0, 1, 1, True, (5, 5)),
    (2, 6, 6, 3, 2, 1, 1, 6, 1, True, (4, 3)),  # depthwise
    (3, 2, 3, 2, 2, 0, 1, 1, 2, True, (2, 3, 2)),
    (3, 4, 2, (1, 2, 3), (1, 2, 1), (0, 1, 1), (0, 1, 0), 2, 1, False, (3, 2, 3)),
]
TS_IDS = [f"{c[0]}d-{i}" for i, c in enumerate(TORCH_STYLE)]
_TORCH_MODS = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d,
               3: torch.nn.ConvTranspose3d}
_TORCH_FNS = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _pair(S, cfg, cls_map):
    S, cin, cout, k, s, p, op, g, d, bias, _ = cfg
    kw = dict(stride=s, padding=p, output_padding=op, groups=g, bias=bias, dilation=d,
              padding_mode="zeros")
    torch.manual_seed(123)
    ref = _TORCH_MODS[S](cin, cout, k, **kw)
    torch.manual_seed(123)
    mine = cls_map[S](cin, cout, k, **kw)
    return ref, mine


def _tct_mods():
    m = P.tct()
    return {1: m.ConvTranspose1d, 2: m.ConvTranspose2d, 3: m.ConvTranspose3d}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", TORCH_STYLE, ids=TS_IDS)
def test_module_drop_in(cfg, dtype):
    ref, mine = _pair(cfg[0], cfg, _tct_mods())
    assert isinstance(mine, torch.nn.Module)
    # same parameters (names, shapes) -> state dicts interchange
    assert {k: v.shape for k, v in mine.state_dict().items()} == \
        {k: v.shape for k, v in ref.state_dict().items()}
    mine.load_state_dict(ref.state_dict())
    ref, mine = ref.to(dtype), mine.to(dtype)
    g = torch.Generator().manual_seed(5)
    x = torch.randn((2, cfg[1]) + cfg[10], generator=g, dtype=dtype)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    xr = x.clone().requires_grad_(True)
    xm = x.clone().requires_grad_(True)
    yr, ym = ref(xr), mine(xm)
    torch.testing.assert_close(ym, yr, **tol)
    dy = torch.randn(yr.shape, generator=g, dtype=dtype)
    gr = torch.autograd.grad(yr, [xr] + list(ref.parameters()), dy)
    gm = torch.autograd.grad(ym, [xm] + list(mine.parameters()), dy)
    for a, b in zip(gm, gr):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("cfg", TORCH_STYLE, ids=TS_IDS)
def test_module_same_seed_same_init(cfg):
    ref, mine = _pair(cfg[0], cfg, _tct_mods())
    for (n1, p1), (n2, p2) in zip(ref.named_parameters(), mine.named_parameters()):
        assert n1 == n2
        assert torch.equal(p1, p2), n1


@pytest.mark.parametrize("cfg", [c for c in TORCH_STYLE if c[4] != 1],
                         ids=[i for i, c in zip(TS_IDS, TORCH_STYLE) if c[4] != 1])
def test_module_output_size(cfg):
    ref, mine = _pair(cfg[0], cfg, _tct_mods())
    mine.load_state_dict(ref.state_dict())
    ref.output_padding = (0,) * cfg[0]
    mine.output_padding = (0,) * cfg[0]
    ref, mine = ref.double(), mine.double()
    x = torch.randn((1, cfg[1]) + cfg[10], dtype=torch.float64,
                    generator=torch.Generator().manual_seed(9))
    base = ref(x).shape[2:]
    stride = ref.stride
    for extra in range(max(stride)):
        size = [b + min(extra, s - 1) for b, s in zip(base, stride)]
        for out_size in (size, [1, cfg[1]] + size):
            yr = ref(x, output_size=out_size)
            ym = mine(x, output_size=out_size)
            assert list(ym.shape[2:]) == size
            torch.testing.assert_close(ym, yr, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("cfg", TORCH_STYLE, ids=TS_IDS)
def test_functional_torch_style(cfg, dtype):
    m = P.tct()
    S, cin, cout, k, s, p, op, g, d, bias, sp = cfg
    fn = {1: m.conv_transpose1d, 2: m.conv_transpose2d, 3: m.conv_transpose3d}[S]
    ks = (k,) * S if isinstance(k, int) else k
    gen = torch.Generator().manual_seed(3)
    x = torch.randn((2, cin) + sp, generator=gen, dtype=dtype)
    w = torch.randn((cin, cout // g) + ks, generator=gen, dtype=dtype)
    b = torch.randn(cout, generator=gen, dtype=dtype) if bias else None
    want = _TORCH_FNS[S](x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    got = fn(x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    tol = dict(atol=1e-12, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, want, **tol)
    # positional arguments in torch's order
    got2 = fn(x, w, b, s, p, op, g, d)
    torch.testing.assert_close(got2, want, **tol)


def test_functional_defaults():
    m = P.tct()
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1, 3, 4, 4, generator=gen)
    w = torch.randn(3, 2, 3, 3, generator=gen)
    torch.testing.assert_close(m.conv_transpose2d(x, w), F.conv_transpose2d(x, w))
    # the graph-style wrapper with its defaults (NXC data, XOI weights)
    xn = x.permute(0, 2, 3, 1)
    wx = w.permute(2, 3, 1, 0)
    y = m.conv_transpose(xn, wx, strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0],
                         dilations=[1, 1])
    torch.testing.assert_close(y.permute(0, 3, 1, 2), F.conv_transpose2d(x, w))
