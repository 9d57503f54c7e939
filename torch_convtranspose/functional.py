"""Functional API: thin wrappers over the dispatcher ops (SPEC §1), and
torch-style ``conv_transpose{1,2,3}d`` with the signature of
``torch.nn.functional.conv_transpose{1,2,3}d``."""

from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor

_IntOrSeq = Union[int, Sequence[int]]


def conv_transpose(
    src: Tensor,
    weights: Tensor,
    bias: Optional[Tensor] = None,
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str = "None",
    output_padding: Sequence[int] = (),
    groups: int = 1,
    data_format: str = "NXC",
    weights_format: str = "XOI",
) -> Tensor:
    """Transposed convolution (oneDNN Graph ``ConvTranspose``), 1D/2D/3D.

    Args:
        src: (N, X..., IC) for data_format "NXC", (N, IC, X...) for "NCX".
        weights: (K..., OC/g, IC) for "XOI"; (IC, OC/g, K...) for "IOX" (the layout of
            ``torch.nn.ConvTranspose*d.weight``); "OIX" and "XIO" are accepted too.
        bias: optional (OC,).
        strides, pads_begin, pads_end, dilations: one entry per spatial axis
            (dilation 1 = dense).
        auto_pad: "None", "SAME_UPPER", "SAME_LOWER" or "VALID" (any case); overrides pads.
        output_padding: extra size at the end of each axis, < max(stride, dilation); () = 0.
        groups: channel groups (IC and OC divisible by it).

    Returns dst, contiguous in the data_format layout, with OC = weights' O dim x groups and
    spatial size ``stride*(I-1) + dilation*(K-1) + 1 + output_padding - pads_begin - pads_end``.
    Differentiable in src, weights and bias (twice).
    """
    return torch.ops.graph.conv_transpose(
        src, weights, bias, strides=list(strides), pads_begin=list(pads_begin),
        pads_end=list(pads_end), dilations=list(dilations), auto_pad=auto_pad,
        output_padding=list(output_padding), groups=groups, data_format=data_format,
        weights_format=weights_format,
    )


def conv_transpose_backward_data(
    diff_dst: Tensor,
    weights: Tensor,
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str = "None",
    output_padding: Sequence[int] = (),
    groups: int = 1,
    data_format: str = "NXC",
    weights_format: str = "XOI",
    src_shape: Optional[Sequence[int]] = None,
) -> Tensor:
    """Gradient of ``conv_transpose`` with respect to src (a strided convolution).

    ``src_shape`` is the full shape of the result in the data_format layout (or only its
    spatial sizes); without it, each spatial size is
    ``floor((D + pads_begin + pads_end - dilation*(K-1) - 1) / stride) + 1``.
    With auto_pad, pads come from the diff_dst size D (SPEC §3). Attributes as in
    ``conv_transpose``; differentiable in diff_dst and weights."""
    return torch.ops.graph.conv_transpose_backward_data(
        diff_dst, weights, strides=list(strides), pads_begin=list(pads_begin),
        pads_end=list(pads_end), dilations=list(dilations), auto_pad=auto_pad,
        output_padding=list(output_padding), groups=groups, data_format=data_format,
        weights_format=weights_format, src_shape=None if src_shape is None else list(src_shape),
    )


def conv_transpose_backprop_data(
    output_delta: Tensor,
    filter: Tensor,
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str = "None",
    output_padding: Sequence[int] = (),
    groups: int = 1,
    data_format: str = "NXC",
    filter_format: str = "XIO",
    src_shape: Optional[Sequence[int]] = None,
) -> Tensor:
    """The older spec's name of ``conv_transpose_backward_data``: the same computation,
    with the filter layout given by ``filter_format`` (default "XIO")."""
    return torch.ops.graph.conv_transpose_backprop_data(
        output_delta, filter, strides=list(strides), pads_begin=list(pads_begin),
        pads_end=list(pads_end), dilations=list(dilations), auto_pad=auto_pad,
        output_padding=list(output_padding), groups=groups, data_format=data_format,
        filter_format=filter_format, src_shape=None if src_shape is None else list(src_shape),
    )


def conv_transpose_backward_weights(
    src: Tensor,
    diff_dst: Tensor,
    weights_shape_input: Optional[Tensor] = None,
    *,
    strides: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str = "None",
    output_padding: Sequence[int] = (),
    groups: int = 1,
    data_format: str = "NXC",
    weights_format: str = "XOI",
    weights_shape: Sequence[int] = (),
) -> Tensor:
    """Gradient of ``conv_transpose`` with respect to the weights, returned in the
    ``weights_format`` layout. The shape comes from ``weights_shape_input`` (a 1-D integer
    tensor) when given, else from ``weights_shape`` (both in the weights_format layout).
    Differentiable in src and diff_dst."""
    return torch.ops.graph.conv_transpose_backward_weights(
        src, diff_dst, weights_shape_input, strides=list(strides), pads_begin=list(pads_begin),
        pads_end=list(pads_end), dilations=list(dilations), auto_pad=auto_pad,
        output_padding=list(output_padding), groups=groups, data_format=data_format,
        weights_format=weights_format, weights_shape=list(weights_shape),
    )


def _tuple(value: _IntOrSeq, n: int, name: str) -> List[int]:
    if isinstance(value, int):
        return [value] * n
    out = [int(v) for v in value]
    if len(out) != n:
        raise ValueError(f"{name} must be an int or {n} ints, got {value!r}")
    return out


def _conv_transpose_ncx(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    stride: List[int],
    padding: List[int],
    output_padding: List[int],
    groups: int,
    dilation: List[int],
    spatial_dims: int,
) -> Tensor:
    """torch.nn.functional.conv_transpose{1,2,3}d semantics on the graph op (NCX data,
    IOX weights, symmetric padding, unbatched input allowed). Scriptable."""
    unbatched = input.dim() == spatial_dims + 1
    if unbatched:
        input = input.unsqueeze(0)
    out = torch.ops.graph.conv_transpose(
        input, weight, bias, strides=stride, pads_begin=padding, pads_end=padding,
        dilations=dilation, output_padding=output_padding, groups=groups,
        data_format="NCX", weights_format="IOX",
    )
    if unbatched:
        out = out.squeeze(0)
    return out


def _conv_transpose_nd(n, input, weight, bias, stride, padding, output_padding, groups,
                       dilation):
    if isinstance(padding, str):
        raise ValueError(f"padding must be an int or {n} ints for transposed convolution, "
                         f"got {padding!r}")
    return _conv_transpose_ncx(
        input, weight, bias, _tuple(stride, n, "stride"), _tuple(padding, n, "padding"),
        _tuple(output_padding, n, "output_padding"), groups, _tuple(dilation, n, "dilation"), n,
    )


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Drop-in for ``torch.nn.functional.conv_transpose1d`` (NCL data, (IC, OC/g, K)
    weights) running this library's kernels."""
    return _conv_transpose_nd(1, input, weight, bias, stride, padding, output_padding, groups,
                              dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Drop-in for ``torch.nn.functional.conv_transpose2d``."""
    return _conv_transpose_nd(2, input, weight, bias, stride, padding, output_padding, groups,
                              dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Drop-in for ``torch.nn.functional.conv_transpose3d``."""
    return _conv_transpose_nd(3, input, weight, bias, stride, padding, output_padding, groups,
                              dilation)
