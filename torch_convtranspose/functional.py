"""Functional API: thin wrappers over the dispatcher ops (SPEC §1), and
torch-style ``conv_transpose{1,2,3}d`` with the signature of
``torch.nn.functional.conv_transpose{1,2,3}d``.

TorchScript: the four raw wrappers compile to their dispatcher ops (registered as
TorchScript builtins below, so their keyword-only attributes keep working); the torch-style
wrappers compile as they are (``BroadcastingList`` arguments, as in torch.nn.functional).
torch.fx: the torch-style wrappers and the modules reach the op through one leaf function
(``torch.fx.wrap``), so unbatched inputs, channels_last and the rank check happen at run
time, not at trace time."""

from typing import List, Optional, Sequence

import torch
import torch.fx
from torch import Tensor
from torch._jit_internal import BroadcastingList1, BroadcastingList2, BroadcastingList3


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


def _int_list(value: Optional[List[int]], n: int, name: str, default: int) -> List[int]:
    """An argument of a torch-style wrapper as n ints. Eager: None (the default), an int or
    a sequence of n ints. TorchScript: BroadcastingList has already made it a list."""
    if value is None:
        return [default] * n
    if not torch.jit.is_scripting():
        if isinstance(value, str):
            raise ValueError("{} must be an int or {} ints for transposed convolution, got "
                             "{!r}".format(name, n, value))
        if isinstance(value, int):
            return [value] * n
        out = [int(v) for v in value]
        if len(out) != n:
            raise ValueError("{} must be an int or {} ints, got {!r}".format(name, n, value))
        return out
    if len(value) != n:
        raise ValueError("{} must be an int or {} ints, got {}".format(name, n, value))
    return value


def _strides_like_channels_last(t: Tensor) -> bool:
    """Whether ``t.suggest_memory_format()`` is channels_last (4-D) / channels_last_3d (5-D):
    c10's is_channels_last_strides_{2d_s4,3d_s5}, which torch's own convolutions use to pick
    the output layout (ambiguous strides, e.g. N111 or C=1 views, count as contiguous)."""
    rank = t.dim()
    if rank == 4:
        order = [1, 3, 2, 0]
    elif rank == 5:
        order = [1, 4, 3, 2, 0]
    else:
        return False
    sizes = t.shape
    strides = t.stride()
    if strides[1] == 0:
        return False
    low = 0
    for d in order:
        if sizes[d] == 0 or strides[d] < low:
            return False
        if d == 0 and low == strides[1]:
            return False
        low = strides[d] * sizes[d] if sizes[d] > 1 else strides[d]
    return True


def _check_input_rank(input: Tensor, spatial_dims: int) -> None:
    dim = input.dim()
    if dim != spatial_dims + 1 and dim != spatial_dims + 2:
        raise RuntimeError(
            "Expected {}D (unbatched) or {}D (batched) input to conv_transpose{}d, but got "
            "input of size: {}".format(spatial_dims + 1, spatial_dims + 2, spatial_dims,
                                       list(input.shape)))


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
    IOX weights, symmetric padding, unbatched input allowed). Scriptable; an FX leaf.

    Memory format as torch's: when the (batched) input or the weights have channels_last
    strides (2D/3D), the result is channels_last. The op then runs as NXC on the permuted
    view (for a channels_last input, a dense NXC tensor: no copy), and its NXC result,
    permuted back, is the channels_last result; the input gradient comes back
    channels_last the same way. The weights stay IOX as they are."""
    _check_input_rank(input, spatial_dims)
    unbatched = input.dim() == spatial_dims + 1
    if unbatched:
        input = input.unsqueeze(0)
    if spatial_dims > 1 and (_strides_like_channels_last(input)
                             or _strides_like_channels_last(weight)):
        if spatial_dims == 2:
            to_nxc, to_ncx = [0, 2, 3, 1], [0, 3, 1, 2]
        else:
            to_nxc, to_ncx = [0, 2, 3, 4, 1], [0, 4, 1, 2, 3]
        out = torch.ops.graph.conv_transpose(
            input.permute(to_nxc), weight, bias, strides=stride, pads_begin=padding,
            pads_end=padding, dilations=dilation, output_padding=output_padding, groups=groups,
            data_format="NXC", weights_format="IOX",
        ).permute(to_ncx)
    else:
        out = torch.ops.graph.conv_transpose(
            input, weight, bias, strides=stride, pads_begin=padding, pads_end=padding,
            dilations=dilation, output_padding=output_padding, groups=groups,
            data_format="NCX", weights_format="IOX",
        )
    if unbatched:
        out = out.squeeze(0)
    return out


torch.fx.wrap("_conv_transpose_ncx")


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: Optional[BroadcastingList1[int]] = None,
    padding: Optional[BroadcastingList1[int]] = None,
    output_padding: Optional[BroadcastingList1[int]] = None,
    groups: int = 1,
    dilation: Optional[BroadcastingList1[int]] = None,
) -> Tensor:
    """Drop-in for ``torch.nn.functional.conv_transpose1d`` (NCL data, (IC, OC/g, K)
    weights) running this library's kernels. stride, padding, output_padding, dilation:
    an int or 1 int; None means torch's default (1, 0, 0, 1). Scriptable."""
    return _conv_transpose_ncx(
        input, weight, bias, _int_list(stride, 1, "stride", 1),
        _int_list(padding, 1, "padding", 0), _int_list(output_padding, 1, "output_padding", 0),
        groups, _int_list(dilation, 1, "dilation", 1), 1,
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: Optional[BroadcastingList2[int]] = None,
    padding: Optional[BroadcastingList2[int]] = None,
    output_padding: Optional[BroadcastingList2[int]] = None,
    groups: int = 1,
    dilation: Optional[BroadcastingList2[int]] = None,
) -> Tensor:
    """Drop-in for ``torch.nn.functional.conv_transpose2d``: an int or 2 ints each (None:
    torch's default); a channels_last input or weight gives a channels_last result.
    Scriptable."""
    return _conv_transpose_ncx(
        input, weight, bias, _int_list(stride, 2, "stride", 1),
        _int_list(padding, 2, "padding", 0), _int_list(output_padding, 2, "output_padding", 0),
        groups, _int_list(dilation, 2, "dilation", 1), 2,
    )


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    stride: Optional[BroadcastingList3[int]] = None,
    padding: Optional[BroadcastingList3[int]] = None,
    output_padding: Optional[BroadcastingList3[int]] = None,
    groups: int = 1,
    dilation: Optional[BroadcastingList3[int]] = None,
) -> Tensor:
    """Drop-in for ``torch.nn.functional.conv_transpose3d``: an int or 3 ints each (None:
    torch's default); a channels_last_3d input or weight gives a channels_last_3d result.
    Scriptable."""
    return _conv_transpose_ncx(
        input, weight, bias, _int_list(stride, 3, "stride", 1),
        _int_list(padding, 3, "padding", 0), _int_list(output_padding, 3, "output_padding", 0),
        groups, _int_list(dilation, 3, "dilation", 1), 3,
    )


def _register_script_builtins() -> None:
    """In TorchScript, a call of a raw wrapper compiles to its dispatcher op (same schema:
    keyword-only attributes with defaults, which TorchScript cannot compile in a Python
    function). Uses torch's private builtin table; without it, call torch.ops.graph.* in
    scripted code."""
    try:
        from torch.jit._builtins import _register_builtin
    except ImportError:  # pragma: no cover - a torch without the private table
        return
    for fn, op in ((conv_transpose, "graph::conv_transpose"),
                   (conv_transpose_backward_data, "graph::conv_transpose_backward_data"),
                   (conv_transpose_backprop_data, "graph::conv_transpose_backprop_data"),
                   (conv_transpose_backward_weights, "graph::conv_transpose_backward_weights")):
        _register_builtin(fn, op)


_register_script_builtins()
