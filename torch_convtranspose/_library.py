"""Loads the C++ extension and wraps its kernel-selection utilities."""

import contextlib
import glob
import os
from typing import Iterator, List, Optional

import torch


def _load() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "_C*.so")))
    if not found:
        raise ImportError(
            f"torch_convtranspose: the compiled extension (_C*.so) is missing in {here}; "
            "build it with `pip install --no-build-isolation -e .` (see README)"
        )
    torch.ops.load_library(found[0])
    return found[0]


LIBRARY_PATH = _load()

from . import _vmap  # noqa: E402  (batching rules need the ops registered)

_vmap.register()


def available_isas() -> List[str]:
    """Kernel implementations this CPU can run, e.g. ['reference', 'avx2', 'avx512']."""
    return list(torch.ops.torch_convtranspose.available_isas())


def get_isa() -> str:
    """The implementation in use for f32 (other dtypes always run 'reference')."""
    return torch.ops.torch_convtranspose.get_isa()


def set_isa(name: str) -> None:
    """Forces an implementation for this process: 'reference', 'avx2', 'avx512',
    'avx512_bf16' or 'avx512_amx' (available_isas() lists this CPU's). The last
    two differ from 'avx512' in bf16 only (its VDPBF16PS or AMX tiles).

    The environment variable TORCH_CONVTRANSPOSE_ISA sets the initial choice."""
    torch.ops.torch_convtranspose.set_isa(name)


@contextlib.contextmanager
def use_isa(name: str) -> Iterator[None]:
    """Context manager: run with the given implementation, then restore the previous one."""
    previous = get_isa()
    set_isa(name)
    try:
        yield
    finally:
        set_isa(previous)


def get_uarch() -> str:
    """The microarchitecture whose measured choices the plans use: 'zen3', 'zen4',
    'zen5', 'zen2', 'intel_amx', 'intel_avx512', 'intel' or 'generic'. Detected from
    CPUID unless forced (set_uarch, TORCH_CONVTRANSPOSE_UARCH)."""
    return torch.ops.torch_convtranspose.get_uarch()


def detected_uarch() -> str:
    """The microarchitecture CPUID reports (whatever is forced)."""
    return torch.ops.torch_convtranspose.detected_uarch()


def set_uarch(name: str) -> None:
    """Forces the per-microarchitecture choices of another CPU for this process
    (the kernels stay this CPU's ISA): to try them, or to pin plans in tests."""
    torch.ops.torch_convtranspose.set_uarch(name)


@contextlib.contextmanager
def use_uarch(name: str) -> Iterator[None]:
    """Context manager: run with the given uarch's choices, then restore the previous one."""
    previous = get_uarch()
    set_uarch(name)
    try:
        yield
    finally:
        set_uarch(previous)


def get_ncx_path() -> str:
    """How dense channels-first (NCX) f32 tensors reach the kernels:
    'auto', 'planar' or 'channels_last'."""
    return torch.ops.torch_convtranspose.get_ncx_path()


def set_ncx_path(name: str) -> None:
    """Forces how dense NCX f32 tensors are computed, for this process:
    'planar' (in place, forward and backward-data), 'channels_last' (through
    transposed buffers) or 'auto' (the default: whichever is expected to be
    faster). The environment variable TORCH_CONVTRANSPOSE_NCX sets the initial choice."""
    torch.ops.torch_convtranspose.set_ncx_path(name)


@contextlib.contextmanager
def use_ncx_path(name: str) -> Iterator[None]:
    """Context manager: run with the given NCX path, then restore the previous one."""
    previous = get_ncx_path()
    set_ncx_path(name)
    try:
        yield
    finally:
        set_ncx_path(previous)


def fma_peak_gflops(nthreads: Optional[int] = None, seconds: float = 0.2) -> float:
    """f32 FMA peak of this machine in GFLOP/s, measured now with the active ISA
    (0.0 for 'reference'). nthreads defaults to torch.get_num_threads()."""
    n = torch.get_num_threads() if nthreads is None else nthreads
    return float(torch.ops.torch_convtranspose.fma_peak_gflops(n, seconds))
