"""ONNX export of the ``graph::`` ops (and so of the ``ConvTranspose{1,2,3}d`` modules).

Usage (torch's dynamo exporter, ``torch.onnx.export(..., dynamo=True)``)::

    import torch_convtranspose.onnx                  # registers the translations (see below)
    onnx_program = torch.onnx.export(model, (x,), dynamo=True)   # the plain torch call
    onnx_program.save("model.onnx")

    # or, without relying on the global registration:
    onnx_program = torch_convtranspose.onnx.export(model, (x,), "model.onnx")
    onnx_program = torch.onnx.export(
        model, (x,), dynamo=True,
        custom_translation_table=torch_convtranspose.onnx.translation_table())

Each op becomes standard ONNX (default domain, opset 18), no custom-domain node:

- ``graph::conv_transpose`` -> one ``ConvTranspose`` with explicit asymmetric ``pads``
  and ``output_padding``, between ``Transpose`` nodes for NXC data and for weights not in
  IOX (IOX is ONNX's own (C, M/group, k...) layout; a Transpose of a constant weight is
  folded by the exporter's optimizer).
- ``graph::conv_transpose_backward_data`` / ``conv_transpose_backprop_data`` -> one
  ``Conv`` (the adjoint of the transposed convolution is a plain strided convolution with
  the same weights, no flip), plus a ``Slice`` only where ``src_shape`` asks for fewer
  elements than the convolution gives and the pads cannot be trimmed statically.
- ``graph::conv_transpose_backward_weights`` -> one grouped ``Conv`` whose roles are
  swapped (batch <-> channels; the stride becomes the dilation and vice versa):
  ``diff_W[i, o, k] = sum_n,x src[n, i, x] * diff_dst_padded[n, o, x*s + k*d]``.

auto_pad is always resolved to explicit pads at export time (SPEC section 3). ONNX
ConvTranspose's own SAME_UPPER/SAME_LOWER is *not* used: it targets ``in*s`` (ignoring
output_padding) and so differs from this library's rule whenever output_padding > 0 or
the dilated kernel is shorter than the stride, and onnxruntime swapped UPPER/LOWER before
1.13. The forward pads depend only on kernel, stride and dilation; the backward ops' SAME
pads also on the diff_dst size, which must then be static (export says so otherwise).
Batch and spatial sizes may be dynamic elsewhere. ``output_padding`` >= stride (allowed
here while < dilation) is folded into the end pads, or done with a Pad + Slice, since
onnxruntime rejects it.

Limits: ``conv_transpose_backward_weights`` needs its kernel sizes at export time: the
``weights_shape`` attribute (a ``weights_shape_input`` tensor cannot be traced by
``torch.export`` at all, the op's shape function needs its values).

Registration: importing this module adds the translations to onnxscript's torch-lib
registry, which ``torch.onnx.export(..., dynamo=True)`` reads on every call, so the plain
torch call works. That registry is an onnxscript implementation detail; if a future
onnxscript/torch no longer reads it, :func:`export` and :func:`translation_table` (the
documented ``custom_translation_table`` hook) still work. This module imports onnxscript;
``import torch_convtranspose`` alone does not.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import onnxscript  # noqa: F401  (optional dependency: only this module imports it)
import torch
from onnxscript import opset18 as op

from . import _library  # noqa: F401  (registers torch.ops.graph.*)

__all__ = ["export", "translation_table", "register"]

_AUTO_PADS = ("NONE", "SAME_UPPER", "SAME_LOWER", "VALID")


# --------------------------------------------------------------------------
# Helpers (they run while the exporter traces; tensors are onnxscript/IR values)
# --------------------------------------------------------------------------


def _static_dims(value: Any, what: str, op_name: str) -> List[Optional[int]]:
    """The dims of an IR value: ints where static, None where dynamic."""
    shape = getattr(value, "shape", None)
    if shape is None:
        raise RuntimeError(f"ONNX export of graph::{op_name}: the rank of {what} is unknown")
    return [d if isinstance(d, int) else None for d in shape]


def _data_to_ncx_perm(fmt: str, S: int) -> Optional[List[int]]:
    """Permutation taking the data_format layout to NCX (None: already NCX)."""
    if fmt == "NCX":
        return None
    if fmt == "NXC":
        return [0, S + 1] + list(range(1, S + 1))
    raise RuntimeError(f"data_format must be 'NXC' or 'NCX', got {fmt!r}")


def _ncx_to_data_perm(fmt: str, S: int) -> Optional[List[int]]:
    if fmt == "NCX":
        return None
    return [0] + list(range(2, S + 2)) + [1]


def _iox_to_fmt_perm(fmt: str, S: int) -> List[int]:
    """p with w_fmt = w_iox.permute(p); IOX axes I=0, O=1, X=2..S+1."""
    if sorted(fmt) != ["I", "O", "X"]:
        raise RuntimeError(
            f"weights_format must be one of 'IOX', 'XOI', 'OIX', 'XIO', got {fmt!r}")
    pos = {"I": [0], "O": [1], "X": list(range(2, S + 2))}
    return [a for letter in fmt for a in pos[letter]]


def _inverse(p: Sequence[int]) -> List[int]:
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return inv


def _transpose(x, perm: Optional[List[int]]):
    if perm is None or perm == list(range(len(perm))):
        return x
    return op.Transpose(x, perm=perm)


def _weights_to_iox(w, fmt: str, S: int):
    return _transpose(w, _inverse(_iox_to_fmt_perm(fmt, S)))


def _kernel_from_shape(shape: Sequence[Optional[int]], fmt: str, S: int) -> List[Optional[int]]:
    """Kernel sizes from a weights shape given in the layout fmt."""
    p = _iox_to_fmt_perm(fmt, S)
    iox = [None] * (S + 2)
    for i, a in enumerate(p):
        iox[a] = shape[i]
    return iox[2:]


def _norm_auto_pad(auto_pad: str) -> str:
    mode = str(auto_pad).upper()
    if mode not in _AUTO_PADS:
        raise RuntimeError(f"auto_pad must be one of None, SAME_UPPER, SAME_LOWER, VALID "
                           f"(any case), got {auto_pad!r}")
    return mode


def _split_same(total: int, mode: str):
    b = total // 2 if mode == "SAME_UPPER" else (total + 1) // 2
    return b, total - b


def _need_static(values, what: str, op_name: str) -> List[int]:
    if any(v is None for v in values):
        raise RuntimeError(
            f"ONNX export of graph::{op_name}: {what} must be static (known at export "
            f"time), got {values}")
    return [int(v) for v in values]


def _common(op_name, strides, pads_begin, pads_end, dilations, auto_pad, output_padding,
            groups, data_format, weights_format):
    for what, v in (("strides", strides), ("pads_begin", pads_begin), ("pads_end", pads_end),
                    ("dilations", dilations)):
        if v is None:
            raise RuntimeError(f"graph::{op_name}: the attribute {what} is required")
    S = len(strides)
    if S not in (1, 2, 3):
        raise RuntimeError(f"graph::{op_name}: 1 to 3 spatial axes, got strides={strides}")
    fmt_d = str(data_format).upper()
    fmt_w = str(weights_format).upper()
    _data_to_ncx_perm(fmt_d, S)
    _iox_to_fmt_perm(fmt_w, S)
    op_pad = list(output_padding) if output_padding else [0] * S
    return (S, [int(v) for v in strides], [int(v) for v in pads_begin],
            [int(v) for v in pads_end], [int(v) for v in dilations], _norm_auto_pad(auto_pad),
            [int(v) for v in op_pad], int(groups), fmt_d, fmt_w)


# --------------------------------------------------------------------------
# Translations. The exporter calls them with the FX node's args and kwargs (tensors as
# IR values, attributes as Python values). Their parameters are plain keyword parameters
# with defaults (not keyword-only as in the op schemas): onnxscript parses the signature
# of every registered function on each export and logs a warning for keyword-only ones.
# --------------------------------------------------------------------------


def conv_transpose(src, weights, bias=None, strides=None, pads_begin=None, pads_end=None,
                   dilations=None, auto_pad="None", output_padding=None, groups=1,
                   data_format="NXC", weights_format="XOI"):
    """graph::conv_transpose -> [Transpose] ConvTranspose [Transpose]."""
    name = "conv_transpose"
    (S, s, pb, pe, d, mode, opad, g, fmt_d, fmt_w) = _common(
        name, strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
        data_format, weights_format)
    if mode == "VALID":
        pb, pe = [0] * S, [0] * S
    elif mode != "NONE":
        K = _need_static(_kernel_from_shape(_static_dims(weights, "weights", name), fmt_w, S),
                         "the kernel sizes (weights' spatial dims)", name)
        pb, pe = [], []
        for a in range(S):
            b, e = _split_same(max(d[a] * (K[a] - 1) + 1 - s[a], 0), mode)
            pb.append(b)
            pe.append(e)
    # output_padding and pads_end both move the end of the output window; only their
    # difference matters. onnxruntime rejects output_padding >= stride (allowed here up to
    # max(stride, dilation) - 1), so fold output_padding into pads_end first.
    for a in range(S):
        cut = min(opad[a], pe[a])
        opad[a] -= cut
        pe[a] -= cut
    # What is left past the full result is zeros (plus bias). On axes where it is still
    # >= stride (dilation > stride only): the full result (pads_begin 0), then a Pad at the
    # end and a Slice of pads_begin at the start.
    tail = [opad[a] if opad[a] >= s[a] else 0 for a in range(S)]
    cut_begin = [pb[a] if tail[a] else 0 for a in range(S)]
    opad = [opad[a] - tail[a] for a in range(S)]
    pb = [pb[a] - cut_begin[a] for a in range(S)]
    x = _transpose(src, _data_to_ncx_perm(fmt_d, S))
    w = _weights_to_iox(weights, fmt_w, S)
    fused_bias = bias is not None and not any(tail)
    inputs = [x, w, bias] if fused_bias else [x, w]
    y = op.ConvTranspose(*inputs, strides=s, dilations=d, group=g, pads=pb + pe,
                         output_padding=opad)
    if any(tail):
        y = op.Pad(y, op.Constant(value_ints=[0] * (S + 2) + [0, 0] + tail))
        if any(cut_begin):
            axes = [2 + a for a in range(S) if cut_begin[a]]
            y = op.Slice(y, op.Constant(value_ints=[cut_begin[a - 2] for a in axes]),
                         op.Constant(value_ints=[2**62] * len(axes)),
                         op.Constant(value_ints=axes))
        if bias is not None:
            y = op.Add(y, op.Reshape(bias, op.Constant(value_ints=[-1] + [1] * S)))
    return _transpose(y, _ncx_to_data_perm(fmt_d, S))


def _backward_data(name, diff_dst, weights, strides, pads_begin, pads_end, dilations,
                   auto_pad, output_padding, groups, data_format, weights_format, src_shape):
    (S, s, pb, pe, d, mode, _, g, fmt_d, fmt_w) = _common(
        name, strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
        data_format, weights_format)
    dd_dims = _static_dims(diff_dst, "diff_dst", name)
    if len(dd_dims) != S + 2:
        raise RuntimeError(f"graph::{name}: diff_dst has rank {len(dd_dims)}, "
                           f"expected {S + 2}")
    D = [dd_dims[i] for i in (range(1, S + 1) if fmt_d == "NXC" else range(2, S + 2))]
    K = _kernel_from_shape(_static_dims(weights, "weights", name), fmt_w, S)
    if mode == "VALID":
        pb, pe = [0] * S, [0] * S
    elif mode != "NONE":
        Ks = _need_static(K, "the kernel sizes (weights' spatial dims)", name)
        Ds = _need_static(D, "the diff_dst spatial sizes (auto_pad SAME_*)", name)
        pb, pe = [], []
        for a in range(S):
            r = s[a] if Ds[a] % s[a] == 0 else Ds[a] % s[a]
            b, e = _split_same(max(d[a] * (Ks[a] - 1) + 1 - r, 0), mode)
            pb.append(b)
            pe.append(e)

    # The size asked for by src_shape (full shape in data_format layout, or spatial only).
    # It is never more than the convolution gives (the op validates that diff_dst is a
    # forward result of that size), so a Slice at the end, or trimming pads_end, fits it.
    target: Optional[List[int]] = None
    dynamic_target = None  # src_shape's spatial sizes when some are symbolic
    if src_shape is not None:
        shp = list(src_shape)
        if len(shp) == S + 2:
            shp = shp[1:S + 1] if fmt_d == "NXC" else shp[2:]
        elif len(shp) != S:
            raise RuntimeError(f"graph::{name}: src_shape must have {S} or {S + 2} entries, "
                               f"got {len(shp)}")
        if all(isinstance(v, int) for v in shp):
            target = shp
        else:
            dynamic_target = shp
    slice_needed = dynamic_target is not None
    if target is not None:
        if all(v is not None for v in D) and all(v is not None for v in K):
            for a in range(S):
                eff = d[a] * (K[a] - 1) + 1
                if (D[a] + pb[a] + pe[a] - eff) // s[a] + 1 == target[a]:
                    continue
                fit = s[a] * (target[a] - 1) + eff - D[a] - pb[a]  # pads_end giving target
                if 0 <= fit <= pe[a]:
                    pe[a] = fit
                else:
                    slice_needed = True
        else:
            slice_needed = True

    x = _transpose(diff_dst, _data_to_ncx_perm(fmt_d, S))
    w = _weights_to_iox(weights, fmt_w, S)  # IOX == ONNX Conv's (M, C/group, k...)
    y = op.Conv(x, w, strides=s, dilations=d, group=g, pads=pb + pe)
    if slice_needed:
        if dynamic_target is None:
            ends = op.Constant(value_ints=target)
        else:  # symbolic sizes are INT64 scalars in the graph
            one = op.Constant(value_ints=[1])
            ends = op.Concat(*[op.Constant(value_ints=[v]) if isinstance(v, int)
                               else op.Reshape(v, one) for v in dynamic_target], axis=0)
        y = op.Slice(y, op.Constant(value_ints=[0] * S), ends,
                     op.Constant(value_ints=list(range(2, S + 2))))
    return _transpose(y, _ncx_to_data_perm(fmt_d, S))


def conv_transpose_backward_data(diff_dst, weights, strides=None, pads_begin=None,
                                 pads_end=None, dilations=None, auto_pad="None",
                                 output_padding=None, groups=1, data_format="NXC",
                                 weights_format="XOI", src_shape=None):
    """graph::conv_transpose_backward_data -> [Transpose] Conv [Slice] [Transpose]."""
    return _backward_data("conv_transpose_backward_data", diff_dst, weights, strides,
                          pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                          data_format, weights_format, src_shape)


def conv_transpose_backprop_data(output_delta, filter, strides=None, pads_begin=None,
                                 pads_end=None, dilations=None, auto_pad="None",
                                 output_padding=None, groups=1, data_format="NXC",
                                 filter_format="XIO", src_shape=None):
    """graph::conv_transpose_backprop_data (older name, filter_format) -> as backward_data."""
    return _backward_data("conv_transpose_backprop_data", output_delta, filter, strides,
                          pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                          data_format, filter_format, src_shape)


def conv_transpose_backward_weights(src, diff_dst, weights_shape_input=None, strides=None,
                                    pads_begin=None, pads_end=None, dilations=None,
                                    auto_pad="None", output_padding=None, groups=1,
                                    data_format="NXC", weights_format="XOI",
                                    weights_shape=None):
    """graph::conv_transpose_backward_weights -> Transposes, Split/Concat, one Conv."""
    name = "conv_transpose_backward_weights"
    (S, s, pb, pe, d, mode, _, g, fmt_d, fmt_w) = _common(
        name, strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
        data_format, weights_format)
    wshape: Optional[List[int]] = None
    if weights_shape_input is not None:
        const = getattr(weights_shape_input, "const_value", None)
        if const is None:
            raise RuntimeError(
                f"ONNX export of graph::{name}: weights_shape_input must be a constant "
                "(the kernel sizes must be known at export time); pass the weights_shape "
                "attribute instead")
        wshape = [int(v) for v in const.numpy().reshape(-1).tolist()]
    elif weights_shape:
        wshape = _need_static(list(weights_shape), "weights_shape", name)
    if wshape is None or len(wshape) != S + 2:
        raise RuntimeError(f"graph::{name}: needs weights_shape_input or weights_shape "
                           f"with {S + 2} entries, got {wshape}")
    K = _kernel_from_shape(wshape, fmt_w, S)
    dd_dims = _static_dims(diff_dst, "diff_dst", name)
    D = [dd_dims[i] for i in (range(1, S + 1) if fmt_d == "NXC" else range(2, S + 2))]
    if mode == "VALID":
        pb, pe = [0] * S, [0] * S
    elif mode != "NONE":
        Ds = _need_static(D, "the diff_dst spatial sizes (auto_pad SAME)", name)
        pb, pe = [], []
        for a in range(S):
            eff = d[a] * (K[a] - 1) + 1
            r = s[a] if Ds[a] % s[a] == 0 else Ds[a] % s[a]
            b, e = _split_same(max(eff - r, 0), mode)
            pb.append(b)
            pe.append(e)
    src_dims = _static_dims(src, "src", name)
    Isz = [src_dims[i] for i in (range(1, S + 1) if fmt_d == "NXC" else range(2, S + 2))]
    slice_needed = True
    if all(v is not None for v in D) and all(v is not None for v in Isz):
        slice_needed = False
        for a in range(S):
            eff = d[a] * (K[a] - 1) + 1
            fit = s[a] * (Isz[a] - 1) + eff - D[a] - pb[a]
            if 0 <= fit <= pe[a]:
                pe[a] = fit
            else:
                slice_needed = True

    # Conv input: (OC/g, g*N, D...) with channel gi*N + n; Conv weights: (IC, N, I...);
    # Conv output: (OC/g, IC, K...). Each Transpose composes the layout change with the
    # swap of the first two axes.
    swap = [1, 0] + list(range(2, S + 2))
    to_ncx = _data_to_ncx_perm(fmt_d, S) or list(range(S + 2))
    to_cnx = [to_ncx[i] for i in swap]
    if g > 1:
        parts = op.Split(diff_dst, axis=to_ncx[1], num_outputs=g)
        diff_dst = op.Concat(*parts, axis=0)
    xin = _transpose(diff_dst, to_cnx)
    wt = _transpose(src, to_cnx)
    y = op.Conv(xin, wt, strides=d, dilations=s, group=g, pads=pb + pe)
    if slice_needed:
        y = op.Slice(y, op.Constant(value_ints=[0] * S), op.Constant(value_ints=K),
                     op.Constant(value_ints=list(range(2, S + 2))))
    return _transpose(y, [swap[i] for i in _iox_to_fmt_perm(fmt_w, S)])


# --------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------


def translation_table() -> Dict[torch._ops.OpOverload, Callable]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``."""
    g = torch.ops.graph
    return {
        g.conv_transpose.default: conv_transpose,
        g.conv_transpose_backward_data.default: conv_transpose_backward_data,
        g.conv_transpose_backprop_data.default: conv_transpose_backprop_data,
        g.conv_transpose_backward_weights.default: conv_transpose_backward_weights,
    }


def export(model, args=(), f=None, **kwargs):
    """``torch.onnx.export(model, args, f, dynamo=True, **kwargs)`` with this library's
    translations added to any ``custom_translation_table`` given. Returns the
    ``torch.onnx.ONNXProgram``."""
    if kwargs.pop("dynamo", True) is False:
        raise ValueError("torch_convtranspose.onnx.export needs the dynamo exporter "
                         "(dynamo=True); the TorchScript exporter is not supported")
    table = dict(translation_table())
    table.update(kwargs.pop("custom_translation_table", None) or {})
    return torch.onnx.export(model, args, f, dynamo=True, custom_translation_table=table,
                             **kwargs)


_REGISTERED = False


def register() -> bool:
    """Adds the translations to onnxscript's torch-lib registry so that a plain
    ``torch.onnx.export(...)`` (dynamo=True, the default since torch 2.9) finds them;
    done on import of this module. Returns False (with a warning, and registering
    nothing) where that does not work with this onnxscript."""
    global _REGISTERED
    if _REGISTERED:
        return True
    try:
        from onnxscript.function_libs.torch_lib import ops as _ops  # noqa: F401  (fills it first)
        from onnxscript.function_libs.torch_lib import registration

        # Wrap into a scratch registry and parse each signature once here: the exporter
        # parses every registered function on every export, outside any try, so one that
        # fails (e.g. no source file) must never reach the shared registry.
        scratch = registration.Registry()
        wrapped = []
        for target, fn in translation_table().items():
            qualified = target.name()  # "graph::conv_transpose"
            traced = registration.torch_op(qualified, trace_only=True, registry=scratch)(fn)
            traced.function_ir  # noqa: B018  (parses the signature; raises if it cannot)
            wrapped.append((qualified, traced))
        for qualified, traced in wrapped:
            if qualified not in registration.default_registry:
                registration.default_registry.register(traced, qualified)
    except Exception as e:  # pragma: no cover - depends on the onnxscript version
        warnings.warn(
            f"torch_convtranspose.onnx: could not register with onnxscript's torch-lib "
            f"registry ({e!r}); use torch_convtranspose.onnx.export(...) or "
            "custom_translation_table=torch_convtranspose.onnx.translation_table()",
            stacklevel=2)
        return False
    _REGISTERED = True
    return True


register()

