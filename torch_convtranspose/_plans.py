"""The call plans: how each call of the ops is computed (route, layout changes,
workspace, the driver's tiles), one line per call."""

import contextlib
from typing import Iterator, List

import torch

from . import _library  # noqa: F401  (loads the extension)


@contextlib.contextmanager
def plans(execute: bool = True) -> Iterator[List[str]]:
    """Context manager collecting the plan line of every call of the ops made
    inside it (in any thread), in call order; the list it yields is filled when
    the block exits. execute=False is a dry run: each call builds and records its
    plan and returns an uninitialized result without running a kernel, so the
    plans of large problems are cheap. TORCH_CONVTRANSPOSE_VERBOSE=1 prints the
    same lines to stderr, prefixed ``torch_convtranspose plan:``."""
    lines: List[str] = []
    torch.ops.torch_convtranspose.plans_begin(execute)
    try:
        yield lines
    finally:
        lines.extend(torch.ops.torch_convtranspose.plans_end())
