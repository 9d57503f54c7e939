"""Batching rules for torch.vmap over the graph ops (per-sample gradients, model
ensembles), so that a vmapped call is one op call instead of a loop of B calls.

A vmapped dim on the activations alone folds into the batch N. Otherwise (vmapped
weights, bias, or both activations of backward-weights) the B problems become one
problem with B times the groups: channel b*C + c of the folded tensors belongs to
group b*g + c // (C/g), which is exactly how the ops split channels group-major."""

from typing import List, Optional, Sequence

import torch
from torch import Tensor


def _spatial_rank(t: Tensor, batched: bool) -> int:
    return t.dim() - 2 - int(batched)


def _channel_dim(data_format: str, S: int) -> int:
    return 1 if data_format.upper() == "NCX" else S + 1


def _weights_i_dim(weights_format: str, S: int) -> int:
    return {"IOX": 0, "OIX": 1, "XOI": S + 1, "XIO": S}[weights_format.upper()]


def _batched(t: Optional[Tensor], dim: Optional[int], B: int) -> Optional[Tensor]:
    """t with its vmapped dim first, expanded to B where it has none."""
    if t is None:
        return None
    if dim is None:
        return t.unsqueeze(0).expand(B, *t.shape)
    return t.movedim(dim, 0)


def _fold_channels(t: Tensor, c: int) -> Tensor:
    """(B, *shape) -> shape with dim c of size B * shape[c] (b-major)."""
    return t.movedim(0, c).flatten(c, c + 1)


def _unfold_channels(t: Tensor, c: int, B: int) -> Tensor:
    """Inverse of _fold_channels: dim c of size B * C -> (B, ...) with C at c."""
    return t.unflatten(c, (B, -1)).movedim(c, 0)


def _fold_batch(t: Tensor, dim: int) -> Tensor:
    return t.movedim(dim, 0).flatten(0, 1)


def _attrs(kwargs):
    return (kwargs.get("data_format", "NXC"), kwargs.get("weights_format", "XOI"),
            kwargs.get("groups", 1))


def _conv_transpose_vmap(info, in_dims, src, weights, bias=None, **kwargs):
    B = info.batch_size
    src_dim, w_dim = in_dims[0], in_dims[1]
    b_dim = in_dims[2] if len(in_dims) > 2 else None  # in_dims covers the args passed
    data_format, weights_format, groups = _attrs(kwargs)
    if w_dim is None and b_dim is None:
        out = torch.ops.graph.conv_transpose(_fold_batch(src, src_dim), weights, bias, **kwargs)
        return out.unflatten(0, (B, -1)), 0
    S = _spatial_rank(weights, w_dim is not None)
    c = _channel_dim(data_format, S)
    x = _fold_channels(_batched(src, src_dim, B), c)
    w = _fold_channels(_batched(weights, w_dim, B), _weights_i_dim(weights_format, S))
    b = None if bias is None else _batched(bias, b_dim, B).flatten()
    out = torch.ops.graph.conv_transpose(x, w, b, **{**kwargs, "groups": groups * B})
    return _unfold_channels(out, c, B), 0


def _with_batch(shape: Optional[Sequence], S: int, factor_dim: int, factor: int):
    """src_shape (full rank) with one entry multiplied; spatial-only shapes unchanged."""
    if shape is None or len(shape) != S + 2:
        return shape
    out: List = list(shape)
    out[factor_dim] = out[factor_dim] * factor
    return out


def _backward_data_vmap(info, in_dims, diff_dst, weights, **kwargs):
    B = info.batch_size
    dd_dim, w_dim = in_dims
    data_format, weights_format, groups = _attrs(kwargs)
    S = _spatial_rank(weights, w_dim is not None)
    src_shape = kwargs.get("src_shape")
    if w_dim is None:
        kw = {**kwargs, "src_shape": _with_batch(src_shape, S, 0, B)}
        out = torch.ops.graph.conv_transpose_backward_data(_fold_batch(diff_dst, dd_dim),
                                                           weights, **kw)
        return out.unflatten(0, (B, -1)), 0
    c = _channel_dim(data_format, S)
    dy = _fold_channels(_batched(diff_dst, dd_dim, B), c)
    w = _fold_channels(_batched(weights, w_dim, B), _weights_i_dim(weights_format, S))
    kw = {**kwargs, "groups": groups * B, "src_shape": _with_batch(src_shape, S, c, B)}
    out = torch.ops.graph.conv_transpose_backward_data(dy, w, **kw)
    return _unfold_channels(out, c, B), 0


def _backward_weights_vmap(info, in_dims, src, diff_dst, weights_shape_input=None, **kwargs):
    B = info.batch_size
    src_dim, dd_dim = in_dims[0], in_dims[1]
    if len(in_dims) > 2 and in_dims[2] is not None:
        raise NotImplementedError(
            "conv_transpose_backward_weights: vmap over weights_shape_input is not supported; "
            "pass the weights_shape attribute")
    data_format, weights_format, groups = _attrs(kwargs)
    S = _spatial_rank(src, src_dim is not None)
    shape = list(kwargs.get("weights_shape") or [])
    if weights_shape_input is not None:
        shape = [int(v) for v in weights_shape_input.tolist()]
    c = _channel_dim(data_format, S)
    i = _weights_i_dim(weights_format, S)
    x = _fold_channels(_batched(src, src_dim, B), c)
    dy = _fold_channels(_batched(diff_dst, dd_dim, B), c)
    kw = {**kwargs, "groups": groups * B, "weights_shape": _with_batch(shape, S, i, B)}
    out = torch.ops.graph.conv_transpose_backward_weights(x, dy, None, **kw)
    return _unfold_channels(out, i, B), 0


def register() -> None:
    torch.library.register_vmap("graph::conv_transpose", _conv_transpose_vmap)
    torch.library.register_vmap("graph::conv_transpose_backward_data", _backward_data_vmap)
    torch.library.register_vmap("graph::conv_transpose_backward_weights",
                                _backward_weights_vmap)
