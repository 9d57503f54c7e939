"""Plain-PyTorch stand-ins for torch.ops.graph.conv_transpose* (SPEC.md section 7),
used by `bench.py --stub` to exercise the harness while the extension isn't
built. Only the attributes bench.py passes are supported (explicit pads,
weights_format="IOX", data_format NXC/NCX). The timings they produce are
torch's, not this project's.
"""

import functools

import torch
import torch.nn.functional as F

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _to_ncx(t, data_format):
    return t.movedim(-1, 1) if data_format == "NXC" else t


def _from_ncx(t, data_format):
    return t.movedim(1, -1).contiguous() if data_format == "NXC" else t.contiguous()


def _fit(t, begin, size):
    """t[..., begin:begin+size] per spatial axis, zero-extended where t is too short."""
    nsp = len(size)
    need = [max(0, b + n - t.shape[2 + a]) for a, (b, n) in enumerate(zip(begin, size))]
    if any(need):
        pad = []
        for a in reversed(range(nsp)):
            pad += [0, need[a]]
        t = F.pad(t, pad)
    idx = (slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begin, size))
    return t[idx]


def _rounded_once(fn):
    """16-bit problems computed in f32 and rounded once at the end, as ours are. (torch's
    own 16-bit kernels round partial results on some CPUs: its bf16 conv_transpose2d on
    an AVX2 Zen 3 was off by 2 units in the last place.)"""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        dt = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
        if dt not in (torch.bfloat16, torch.float16):
            return fn(*args, **kwargs)

        def up(v):
            return v.float() if isinstance(v, torch.Tensor) else v

        out = fn(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()})
        return out.to(dt)

    return run


def _check(weights_format):
    if weights_format != "IOX":
        raise NotImplementedError("stub: only weights_format='IOX'")


@_rounded_once
def conv_transpose(
    src,
    weights,
    bias=None,
    *,
    strides,
    pads_begin,
    pads_end,
    dilations,
    auto_pad="None",
    output_padding=(),
    groups=1,
    data_format="NXC",
    weights_format="XOI",
):
    _check(weights_format)
    x = _to_ncx(src, data_format)
    nsp = x.dim() - 2
    op = list(output_padding) or [0] * nsp
    y = _CONV_T[nsp](x, weights, stride=strides, dilation=dilations, groups=groups)
    out = [
        s * (i - 1) + d * (k - 1) + 1 + o - pb - pe
        for i, k, s, d, pb, pe, o in zip(
            x.shape[2:], weights.shape[2:], strides, dilations, pads_begin, pads_end, op
        )
    ]
    y = _fit(y, pads_begin, out)
    if bias is not None:
        y = y + bias.view((1, -1) + (1,) * nsp)
    return _from_ncx(y, data_format)


def _padded_diff_dst(gy, pads_begin, pads_end):
    pad = []
    for pb, pe in zip(reversed(pads_begin), reversed(pads_end)):
        pad += [pb, pe]
    return F.pad(gy, pad)


@_rounded_once
def conv_transpose_backward_data(
    diff_dst,
    weights,
    *,
    strides,
    pads_begin,
    pads_end,
    dilations,
    auto_pad="None",
    output_padding=(),
    groups=1,
    data_format="NXC",
    weights_format="XOI",
    src_shape=None,
):
    _check(weights_format)
    gy = _to_ncx(diff_dst, data_format)
    nsp = gy.dim() - 2
    gx = _CONV[nsp](
        _padded_diff_dst(gy, pads_begin, pads_end),
        weights,
        stride=strides,
        dilation=dilations,
        groups=groups,
    )
    if src_shape is not None:
        sp = src_shape[1:-1] if data_format == "NXC" else src_shape[2:]
        gx = _fit(gx, [0] * nsp, list(sp))
    return _from_ncx(gx, data_format)


@_rounded_once
def conv_transpose_backward_weights(
    src,
    diff_dst,
    weights_shape_input=None,
    *,
    strides,
    pads_begin,
    pads_end,
    dilations,
    auto_pad="None",
    output_padding=(),
    groups=1,
    data_format="NXC",
    weights_format="XOI",
    weights_shape=(),
):
    _check(weights_format)
    x = _to_ncx(src, data_format)
    gy = _padded_diff_dst(_to_ncx(diff_dst, data_format), pads_begin, pads_end)
    nsp = x.dim() - 2
    w = torch.empty(list(weights_shape), dtype=x.dtype)
    conv_out = [
        (d - dil * (k - 1) - 1) // s + 1
        for d, k, s, dil in zip(gy.shape[2:], w.shape[2:], strides, dilations)
    ]
    go = _fit(x, [0] * nsp, conv_out)
    gw = torch.ops.aten.convolution_backward(
        go,
        gy,
        w,
        None,
        list(strides),
        [0] * nsp,
        list(dilations),
        False,
        [0] * nsp,
        groups,
        [False, True, False],
    )[1]
    return gw.contiguous()
