"""The torch-style layer: memory format (channels_last kept, no layout copy), convert /
revert of torch's ConvTranspose layers, TorchScript and torch.fx, and the errors for
common mistakes. References are torch's own modules and functional ops."""

import copy
from typing import Tuple

import problems as P
import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

TORCH_MODS = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d,
              3: torch.nn.ConvTranspose3d}
TORCH_FNS = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
CL = {2: torch.channels_last, 3: torch.channels_last_3d}
TOL = dict(atol=1e-5, rtol=1e-5)


def _ours(S):
    m = P.tct()
    return {1: m.ConvTranspose1d, 2: m.ConvTranspose2d, 3: m.ConvTranspose3d}[S]


def _ours_fn(S):
    m = P.tct()
    return {1: m.conv_transpose1d, 2: m.conv_transpose2d, 3: m.conv_transpose3d}[S]


def _pair(S, cin=4, cout=6, k=3, **kw):
    """torch's module and ours with the same parameters (float32)."""
    kw.setdefault("stride", 2)
    torch.manual_seed(7)
    ref = TORCH_MODS[S](cin, cout, k, **kw)
    mine = _ours(S)(cin, cout, k, **kw)
    mine.load_state_dict(ref.state_dict())
    return ref, mine


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------
# memory format
# --------------------------------------------------------------------------

def _cl_weight(mod, S):
    with torch.no_grad():
        mod.weight.set_(mod.weight.detach().contiguous(memory_format=CL[S]))


# (input layout, weight layout, input builder): "cl" = channels_last(_3d)
MF_CASES = [
    ("cl", "std", "batched"),
    ("std", "cl", "batched"),
    ("cl", "cl", "batched"),
    ("cl", "std", "n1"),          # N = 1: channels_last strides, still unambiguous
    ("cl", "std", "space1"),      # 1x1(x1) spatial: ambiguous strides, torch's tie-break
    ("cl", "std", "sliced"),      # a non-dense channels_last view (every other channel)
    ("perm", "std", "unbatched"),  # unbatched, channels-innermost strides
    ("std", "cl", "unbatched"),
]


def _mf_input(S, layout, kind):
    """A leaf tensor and the view of it that goes in."""
    spatial = (1,) * S if kind == "space1" else (3, 4, 3)[:S]
    n = 1 if kind == "n1" else 2
    cin = 8 if kind == "sliced" else 4
    leaf = _randn(n, cin, *spatial, seed=S)
    if layout == "cl":
        leaf = leaf.contiguous(memory_format=CL[S])
    if kind == "sliced":
        return leaf, lambda t: t[:, ::2]
    if kind == "unbatched":
        leaf = leaf[0]
        if layout == "perm":  # (C, X...) with C innermost in memory
            leaf = leaf.movedim(0, -1).contiguous().movedim(-1, 0)
    return leaf, lambda t: t


@pytest.mark.parametrize("S", [2, 3])
@pytest.mark.parametrize("x_layout,w_layout,kind", MF_CASES,
                         ids=[f"{a}-{b}-{c}" for a, b, c in MF_CASES])
def test_memory_format_matches_torch(S, x_layout, w_layout, kind):
    ref, mine = _pair(S, groups=2)
    if w_layout == "cl":
        _cl_weight(ref, S)
        _cl_weight(mine, S)
    leaf, view = _mf_input(S, x_layout, kind)
    lr = leaf.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
    lm = leaf.detach().clone(memory_format=torch.preserve_format).requires_grad_(True)
    assert lr.stride() == lm.stride() == leaf.stride()
    xr, xm = view(lr), view(lm)
    yr, ym = ref(xr), mine(xm)
    assert ym.shape == yr.shape
    assert ym.stride() == yr.stride(), (ym.stride(), yr.stride())
    torch.testing.assert_close(ym, yr, **TOL)
    # the gradient of the output in the output's own layout, as autograd would pass it
    dy = torch.empty_like(yr).copy_(_randn(*yr.shape, seed=11))
    gr = torch.autograd.grad(yr, [xr, ref.weight, ref.bias], dy, retain_graph=True)
    gm = torch.autograd.grad(ym, [xm, mine.weight, mine.bias], dy, retain_graph=True)
    assert gm[0].stride() == gr[0].stride(), (gm[0].stride(), gr[0].stride())
    for a, b in zip(gm, gr):
        torch.testing.assert_close(a, b, **TOL)
    # accumulated into .grad: the layouts torch gives (input, weight, bias)
    yr.backward(dy)
    ym.backward(dy)
    for a, b in ((lm, lr), (mine.weight, ref.weight), (mine.bias, ref.bias)):
        assert a.grad.stride() == b.grad.stride()
        torch.testing.assert_close(a.grad, b.grad, **TOL)


@pytest.mark.parametrize("S", [2, 3])
def test_functional_keeps_channels_last(S):
    x = _randn(2, 4, *(3, 4, 3)[:S], seed=1).contiguous(memory_format=CL[S])
    w = _randn(4, 3, *(3,) * S, seed=2)
    b = _randn(6, seed=3)
    for xx, ww in ((x, w), (x.contiguous(), w.contiguous(memory_format=CL[S]))):
        want = TORCH_FNS[S](xx, ww, b, stride=2, padding=1, output_padding=1, groups=2)
        got = _ours_fn(S)(xx, ww, b, stride=2, padding=1, output_padding=1, groups=2)
        assert got.stride() == want.stride()
        assert got.is_contiguous(memory_format=CL[S])
        torch.testing.assert_close(got, want, **TOL)


def test_1d_channels_innermost_input():
    """No channels_last for 1D: any strides in, a contiguous result, as torch."""
    ref, mine = _pair(1)
    x = _randn(2, 7, 4, seed=4).transpose(1, 2)  # (N, C, L) with C innermost
    yr, ym = ref(x), mine(x)
    assert ym.stride() == yr.stride() and ym.is_contiguous()
    torch.testing.assert_close(ym, yr, **TOL)


COPY_OPS = ("aten::copy_", "aten::contiguous", "aten::clone", "aten::_to_copy", "aten::to",
            "aten::empty_like", "aten::reshape")


@pytest.mark.parametrize("S", [2, 3])
def test_channels_last_needs_no_layout_copy(S):
    """A channels_last input runs as NXC on the permuted view: the op's NXC result,
    permuted back, is the output (no copy of input, output or gradients)."""
    _, mine = _pair(S)
    x = _randn(2, 4, *(3, 4, 3)[:S], seed=5).contiguous(memory_format=CL[S])
    x.requires_grad_(True)
    y = mine(x)
    dy = _randn(*y.shape, seed=6).contiguous(memory_format=CL[S])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = mine(x)
        y.backward(dy)
    names = {e.name for e in prof.events()}
    assert "graph::conv_transpose" in names
    assert "graph::conv_transpose_backward_data" in names
    assert not names.intersection(COPY_OPS), sorted(names.intersection(COPY_OPS))
    # the result is the op's dense NXC output, viewed back as channels_last
    nxc = [0] + list(range(2, S + 2)) + [1]
    assert y.permute(nxc).is_contiguous()
    assert y.is_contiguous(memory_format=CL[S])
    assert x.grad.is_contiguous(memory_format=CL[S])


def test_channels_last_detection_matches_torch():
    """The layout rule is torch's own (Tensor.suggest_memory_format), ties included."""
    from torch._prims_common import suggest_memory_format

    from torch_convtranspose.functional import _strides_like_channels_last
    cases = []
    for shape in [(2, 3, 4, 5), (1, 3, 4, 5), (2, 1, 4, 5), (2, 3, 1, 1), (2, 3, 1, 5),
                  (1, 1, 1, 1), (2, 3, 4, 5, 6), (2, 3, 1, 1, 1), (1, 3, 2, 1, 2)]:
        t = torch.zeros(shape)
        cases += [t, t.contiguous(memory_format=CL[t.dim() - 2])]
        cases.append(t.transpose(1, -1))
    base = torch.zeros(2, 8, 4, 6).contiguous(memory_format=torch.channels_last)
    cases += [base[:, ::2], base[..., ::2], base[:1, :, :1], torch.zeros(4, 3).expand(2, 3, 4, 3)
              .permute(0, 3, 1, 2), torch.zeros(2, 3, 4, 0).contiguous(memory_format=CL[2])]
    for t in cases:
        want = suggest_memory_format(t) in (torch.channels_last, torch.channels_last_3d)
        assert _strides_like_channels_last(t) == want, (t.shape, t.stride())


# --------------------------------------------------------------------------
# convert / revert
# --------------------------------------------------------------------------

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.ConvTranspose2d(4, 6, 3, stride=2),
                                       torch.nn.ReLU(), torch.nn.ConvTranspose2d(6, 4, 2))
        self.blocks = torch.nn.ModuleList([torch.nn.ConvTranspose1d(4, 4, 3),
                                           torch.nn.Linear(3, 3)])
        self.heads = torch.nn.ModuleDict({"vol": torch.nn.ConvTranspose3d(2, 3, 2, bias=False)})
        self.plain = torch.nn.ConvTranspose2d(4, 4, 1, groups=2)

    def forward(self, x2, x1, x3):
        return (self.plain(self.seq(x2)), self.blocks[0](x1), self.heads["vol"](x3))


def _net_inputs():
    return _randn(2, 4, 5, 5, seed=20), _randn(2, 4, 7, seed=21), _randn(1, 2, 3, 3, 3, seed=22)


def _conv_layers(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.modules.conv
                                                                    ._ConvTransposeNd)]


def test_convert_keeps_parameters_and_matches_torch():
    tct = P.tct()
    torch.manual_seed(0)
    net = Net()
    ref = copy.deepcopy(net)
    params = {n: p for n, p in net.named_parameters()}
    keys = list(net.state_dict())
    hook_calls = []
    net.seq[0].register_forward_hook(lambda m, i, o: hook_calls.append(type(m)))
    net.heads["vol"].eval()
    net.plain.extra_flag = "kept"
    layers = dict(_conv_layers(net))
    out = tct.convert(net)
    assert out is net
    for name, m in _conv_layers(net):
        assert m is layers[name]  # same objects, now running this library
        assert type(m).__module__ == "torch_convtranspose.modules"
        assert "impl=torch_convtranspose" in repr(m)
    assert "impl=torch_convtranspose" in repr(net) and "impl=" not in repr(ref)
    assert type(net.blocks[1]) is torch.nn.Linear
    for n, p in net.named_parameters():
        assert p is params[n], n
    assert list(net.state_dict()) == keys
    assert not net.heads["vol"].training and net.seq[0].training
    assert net.plain.extra_flag == "kept" and net.seq[0].padding_mode == "zeros"
    xs = _net_inputs()
    for a, b in zip(net(*xs), ref(*xs)):
        torch.testing.assert_close(a, b, **TOL)
    assert hook_calls and hook_calls[-1] is tct.ConvTranspose2d


def test_optimizer_built_before_convert_updates_converted_layers():
    tct = P.tct()
    torch.manual_seed(1)
    net = Net()
    ref = copy.deepcopy(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    tct.convert(net)
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    for model, o in ((net, opt), (ref, opt_ref)):
        o.zero_grad()
        sum(t.square().sum() for t in model(*_net_inputs())).backward()
        o.step()
    conv_params = {id(p) for _, m in _conv_layers(net) for p in m.parameters()}
    assert len(conv_params) == 9
    for (n, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
        if id(p) not in conv_params:
            continue
        assert not torch.equal(p, before[n]), n
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-4)


def test_convert_top_level_copy_and_skips():
    tct = P.tct()
    layer = torch.nn.ConvTranspose2d(2, 3, 3)
    copied = tct.convert(layer, inplace=False)
    assert type(copied) is tct.ConvTranspose2d and type(layer) is torch.nn.ConvTranspose2d
    assert copied.weight is not layer.weight and torch.equal(copied.weight, layer.weight)
    assert tct.convert(layer) is layer and type(layer) is tct.ConvTranspose2d

    class Custom(torch.nn.ConvTranspose2d):  # a subclass has its own semantics: kept
        pass

    custom = Custom(2, 2, 1)
    assert type(tct.convert(custom)) is Custom
    shared = torch.nn.ConvTranspose1d(2, 2, 1)
    seq = tct.convert(torch.nn.Sequential(shared, shared))
    assert seq[0] is seq[1] is shared and type(shared) is tct.ConvTranspose1d


def test_convert_rejects_other_padding_modes_before_changing_anything():
    tct = P.tct()
    seq = torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 2, 3), torch.nn.ConvTranspose2d(2, 2, 3))
    seq[1].padding_mode = "reflect"  # torch's constructor refuses it; set afterwards
    with pytest.raises(ValueError, match=r"'1'.*padding_mode='reflect'|1 .*padding_mode"):
        tct.convert(seq)
    assert type(seq[0]) is torch.nn.ConvTranspose2d
    with pytest.raises(TypeError, match="ScriptModule"):
        tct.convert(torch.jit.script(torch.nn.Sequential(torch.nn.ConvTranspose2d(2, 2, 3))))


def test_revert_restores_torch_layers(tmp_path):
    tct = P.tct()
    torch.manual_seed(2)
    net = Net()
    params = list(net.parameters())
    xs = _net_inputs()
    want = net(*xs)
    tct.convert(net)
    reverted = tct.revert(net, inplace=False)
    assert all(type(m).__module__ == "torch_convtranspose.modules" for _, m in _conv_layers(net))
    assert tct.revert(net) is net
    for model in (net, reverted):
        assert all(type(m).__module__.startswith("torch.nn") for _, m in _conv_layers(model))
        assert "impl=" not in repr(model)
        for a, b in zip(model(*xs), want):
            torch.testing.assert_close(a, b)
    assert all(p is q for p, q in zip(net.parameters(), params))
    # a reverted model pickles without any reference to this library
    path = tmp_path / "net.pt"
    torch.save(reverted, path)
    assert b"torch_convtranspose" not in path.read_bytes()


# --------------------------------------------------------------------------
# TorchScript and torch.fx
# --------------------------------------------------------------------------

FN_CASES = [  # S, weight shape, kwargs (as torch takes them)
    (1, (4, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2, dilation=1)),
    (2, (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=1,
                           dilation=(1, 2))),
    (3, (4, 2, 2, 3, 2), dict(stride=2, padding=0, output_padding=(1, 0, 1), groups=2,
                              dilation=1)),
]


@pytest.mark.parametrize("S,wshape,kw", FN_CASES, ids=["1d", "2d", "3d"])
def test_scripted_functional_matches_eager_and_torch(S, wshape, kw):
    fn = _ours_fn(S)
    scripted = torch.jit.script(fn)
    x = _randn(2, 4, *(5, 4, 3)[:S], seed=30)
    w = _randn(*wshape, seed=31)
    b = _randn(wshape[1] * kw["groups"], seed=32)
    want = TORCH_FNS[S](x, w, b, **kw)
    eager = fn(x, w, b, **kw)
    torch.testing.assert_close(eager, want, **TOL)
    torch.testing.assert_close(scripted(x, w, b, **kw), eager, atol=0, rtol=0)
    # positional, defaults, and unbatched input
    args = [kw[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")]
    torch.testing.assert_close(scripted(x, w, b, *args), eager, atol=0, rtol=0)
    torch.testing.assert_close(scripted(x, w), TORCH_FNS[S](x, w), **TOL)
    torch.testing.assert_close(scripted(x[1], w, b, **kw), want[1], **TOL)


def test_scripted_callers_of_the_functional_wrappers():
    tct = P.tct()

    def torch_style(x: torch.Tensor, w: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return tct.conv_transpose2d(x, w, None, (2, 1), 1), tct.conv_transpose2d(x, w, groups=1)

    def graph_style(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        # the raw wrapper: keyword-only attributes with defaults, NXC/XOI by default
        return tct.conv_transpose(x.permute(0, 2, 3, 1), w.permute(2, 3, 1, 0), strides=[2, 1],
                                  pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
                                  output_padding=[1, 0]).permute(0, 3, 1, 2)

    x = _randn(2, 3, 4, 5, seed=33)
    w = _randn(3, 2, 3, 3, seed=34)
    want = F.conv_transpose2d(x, w, None, (2, 1), 1), F.conv_transpose2d(x, w)
    for a, b in zip(torch.jit.script(torch_style)(x, w), want):
        torch.testing.assert_close(a, b, **TOL)
    sg = torch.jit.script(graph_style)
    assert "graph::conv_transpose" in str(sg.graph)
    torch.testing.assert_close(sg(x, w), F.conv_transpose2d(x, w, None, (2, 1), 1, (1, 0)),
                               **TOL)


@pytest.mark.parametrize("S", [1, 2, 3])
def test_scripted_module_save_load(S, tmp_path):
    ref, mine = _pair(S, padding=1, output_padding=1, groups=2, dilation=1)
    scripted = torch.jit.script(mine)
    path = tmp_path / "m.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    x = _randn(2, 4, *(3, 4, 2)[:S], seed=40)
    want = ref(x)
    torch.testing.assert_close(mine(x), want, **TOL)
    for m in (scripted, loaded):
        torch.testing.assert_close(m(x), mine(x), atol=0, rtol=0)
        torch.testing.assert_close(m(x[0]), want[0], **TOL)  # unbatched
        size = [s - 1 for s in want.shape[2:]]  # output_padding 1 -> 0
        torch.testing.assert_close(m(x, size), ref(x, size), **TOL)
    if S > 1:
        xc = x.contiguous(memory_format=CL[S])
        assert loaded(xc).stride() == ref(xc).stride()


class UNetish(torch.nn.Module):
    def __init__(self, cls2, cls3):
        super().__init__()
        self.up = cls2(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.act = torch.nn.ReLU()
        self.up2 = cls2(6, 2, 2, stride=2, groups=2)
        self.vol = cls3(2, 2, 2)

    def forward(self, x):
        y = self.up2(self.act(self.up(x)))
        return y, self.vol(torch.stack([y, y], dim=-1))


def test_fx_traced_model_matches_eager_and_torch():
    tct = P.tct()
    torch.manual_seed(3)
    ref = UNetish(torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    mine = UNetish(tct.ConvTranspose2d, tct.ConvTranspose3d)
    mine.load_state_dict(ref.state_dict())
    gm = torch.fx.symbolic_trace(mine)
    leaves = [n for n in gm.graph.nodes if n.op == "call_function"
              and "_conv_transpose_module" in getattr(n.target, "__name__", "")]
    assert len(leaves) == 3
    x = _randn(2, 4, 3, 5, seed=50)
    for inp in (x, x[0], x.contiguous(memory_format=torch.channels_last)):
        want = ref(inp)
        for got in (gm(inp), mine(inp)):
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, **TOL)
    # the traced GraphModule scripts too
    sgm = torch.jit.script(gm)
    for a, b in zip(sgm(x), ref(x)):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("S", [1, 2, 3])
def test_fx_trace_root_module_and_functional(S):
    ref, mine = _pair(S, padding=1)
    gm = torch.fx.symbolic_trace(mine)  # torch's own module fails here (output_size)
    x = _randn(2, 4, *(3, 4, 2)[:S], seed=51)
    size = [s + 1 for s in ref(x).shape[2:]]
    torch.testing.assert_close(gm(x), ref(x), **TOL)
    torch.testing.assert_close(gm(x[1]), ref(x[1]), **TOL)
    torch.testing.assert_close(gm(x, size), ref(x, size), **TOL)

    fn = _ours_fn(S)

    class Fn(torch.nn.Module):
        def forward(self, x, w):
            return fn(x, w, stride=2, padding=1)

    gf = torch.fx.symbolic_trace(Fn())
    assert "conv_transpose_ncx" in gf.code
    w = ref.weight.detach()
    for inp in (x, x[0]):
        torch.testing.assert_close(gf(inp, w), TORCH_FNS[S](inp, w, stride=2, padding=1), **TOL)


# --------------------------------------------------------------------------
# error messages
# --------------------------------------------------------------------------

@pytest.mark.parametrize("S", [1, 2, 3])
def test_wrong_rank_says_what_the_module_expects(S):
    ref, mine = _pair(S)
    shapes = [(2, 4) + (3,) * (S + 1), (4,) + (3,) * (S - 1)]  # one dim too many / too few
    msg = (f"Expected {S + 1}D (unbatched) or {S + 2}D (batched) input to "
           f"conv_transpose{S}d, but got input of size: ")
    scripted = torch.jit.script(mine)
    traced = torch.fx.symbolic_trace(torch.nn.Sequential(mine))
    for shape in shapes:
        x = torch.zeros(shape)
        with pytest.raises(RuntimeError) as torch_err:
            ref(x)
        assert msg in str(torch_err.value)  # the wording is torch's
        full = msg + str(list(shape))
        for call in (mine, scripted, traced, _ours_fn(S)):
            w = ref.weight.detach()
            # a raise inside TorchScript surfaces as torch.jit.Error (not a RuntimeError)
            with pytest.raises((RuntimeError, torch.jit.Error)) as err:
                call(x) if call is not _ours_fn(S) else call(x, w)
            assert full in str(err.value), (call, str(err.value))
