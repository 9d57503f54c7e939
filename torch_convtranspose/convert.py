"""Swap torch's ``nn.ConvTranspose{1,2,3}d`` layers for this library's, and back.

    model = torch_convtranspose.convert(model)   # torch's layers now run this library
    model = torch_convtranspose.revert(model)    # and back (e.g. before exporting the
                                                 # model to an environment without it)

The swap changes the class of each matching layer in place (this library's modules are
subclasses of torch's that add no state and only override ``forward`` and ``extra_repr``),
so each layer stays the same object: its Parameter objects (an optimizer built before the
swap keeps updating them), buffers, hooks, training flag, attributes and state_dict keys
are kept, and so are other references to the layer.
"""

import copy
from typing import Dict, List, Tuple, Type

import torch

from . import modules as _ours

_TO_OURS: Dict[Type[torch.nn.Module], Type[torch.nn.Module]] = {
    torch.nn.ConvTranspose1d: _ours.ConvTranspose1d,
    torch.nn.ConvTranspose2d: _ours.ConvTranspose2d,
    torch.nn.ConvTranspose3d: _ours.ConvTranspose3d,
}
_TO_TORCH: Dict[Type[torch.nn.Module], Type[torch.nn.Module]] = {
    v: k for k, v in _TO_OURS.items()}


def _swap(model: torch.nn.Module, table: Dict[Type[torch.nn.Module], Type[torch.nn.Module]],
          inplace: bool, check_padding_mode: bool) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError("cannot convert a ScriptModule: convert the eager model, then script it")
    if not inplace:
        model = copy.deepcopy(model)
    # Exact classes only: subclasses of torch's layers (user classes, parametrized layers,
    # quantization-aware ones) have their own forward and are left alone.
    found: List[Tuple[str, torch.nn.Module]] = [
        (name, m) for name, m in model.named_modules(remove_duplicate=True)
        if type(m) in table]
    if check_padding_mode:
        for name, m in found:  # check every layer before changing any
            if m.padding_mode != "zeros":
                raise ValueError(
                    f"cannot convert {name or 'the model'} ({type(m).__name__}): "
                    f"padding_mode={m.padding_mode!r}, only 'zeros' is supported (as in "
                    f"torch's own transposed convolutions)")
    for _, m in found:
        m.__class__ = table[type(m)]
    return model


def convert(model: torch.nn.Module, inplace: bool = True) -> torch.nn.Module:
    """Make every ``torch.nn.ConvTranspose{1,2,3}d`` in ``model`` (the model itself
    included, at any depth: Sequential, ModuleList, ModuleDict, attributes) run this
    library's kernels, and return the model.

    Only layers of exactly torch's classes are converted; subclasses and layers already
    converted are left as they are. Each converted layer keeps its identity, Parameter
    objects, hooks, training flag and attributes (see the module docstring).
    ``inplace=False`` converts a deep copy instead (with new Parameters).

    Raises ValueError, before changing anything, when a layer has a padding_mode other
    than 'zeros' (which torch's own layer rejects too), naming the layer.
    """
    return _swap(model, _TO_OURS, inplace, check_padding_mode=True)


def revert(model: torch.nn.Module, inplace: bool = True) -> torch.nn.Module:
    """The reverse of ``convert``: every ``torch_convtranspose.ConvTranspose{1,2,3}d`` in
    ``model`` becomes a ``torch.nn.ConvTranspose{1,2,3}d`` again (same objects, same
    Parameters), e.g. to save, script or export a model for an environment without this
    library. Returns the model; ``inplace=False`` reverts a deep copy."""
    return _swap(model, _TO_TORCH, inplace, check_padding_mode=False)
