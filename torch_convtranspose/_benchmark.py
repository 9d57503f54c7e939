"""Benchmark mode, like ``torch.backends.cudnn.benchmark``: the first call of a
problem times the candidate plans (each ISA the CPU offers up to the active
one; for channels-first tensors both NCX paths) on the call's own tensors and
keeps the fastest for that problem, for the rest of the process and, with a
cache file, for later processes. Every candidate computes the same values
(up to the order of float sums); only the speed differs."""

import contextlib
from typing import Dict, Iterator, List, Optional

import torch

from . import _library  # noqa: F401  (loads the extension)

_ops = torch.ops.torch_convtranspose


def set_benchmark(enabled: bool, cache_file: Optional[str] = None) -> None:
    """Turns benchmark mode on or off for this process. cache_file (a path):
    its entries are loaded when it exists, and every newly timed problem's
    choice is appended to it; "" stops using a file. The environment variables
    TORCH_CONVTRANSPOSE_BENCHMARK=1 and TORCH_CONVTRANSPOSE_BENCHMARK_FILE=path
    set the initial state."""
    if cache_file is not None:
        _ops.set_benchmark_file(str(cache_file))
    _ops.set_benchmark(bool(enabled))


def get_benchmark() -> bool:
    """Whether benchmark mode is on."""
    return bool(_ops.get_benchmark())


def get_benchmark_file() -> str:
    """The cache file in use ("" for none)."""
    return str(_ops.get_benchmark_file())


@contextlib.contextmanager
def use_benchmark(enabled: bool = True, cache_file: Optional[str] = None) -> Iterator[None]:
    """Context manager: benchmark mode on (or off) inside, the previous state after."""
    previous, previous_file = get_benchmark(), get_benchmark_file()
    set_benchmark(enabled, cache_file)
    try:
        yield
    finally:
        if cache_file is not None:
            _ops.set_benchmark_file(previous_file)
        _ops.set_benchmark(previous)


def benchmark_results() -> List[Dict[str, object]]:
    """The problems benchmark mode has seen, in the order it saw them: for each,
    ``key`` (the call spec: pass, dtype, layouts, ISA, NCX path setting,
    threads, problem, weights format), ``chosen`` (e.g. "isa=avx512
    ncx_path=planar", the plan the calls run), ``source`` ("timed" in this
    process, or "file") and ``candidates``: {label: fastest time in ms}
    (0.0 for entries read from a file)."""
    out = []
    for line in _ops.benchmark_entries():
        key, chosen, source, *cands = line.split("\t")
        candidates = {}
        for c in cands:
            label, ms = c.rsplit("=", 1)
            candidates[label] = float(ms)
        out.append({"key": key, "chosen": chosen, "source": source, "candidates": candidates})
    return out


def clear_benchmark_cache() -> None:
    """Forgets every choice (the next call of each problem is timed again)."""
    _ops.clear_benchmark_cache()


def save_benchmark_cache(path: str) -> None:
    """Writes every choice to path (one line per problem), for set_benchmark(cache_file=...)."""
    _ops.save_benchmark_cache(str(path))
