"""oneDNN Graph ConvTranspose ops for PyTorch on CPU.

Importing this package registers the dispatcher ops ``torch.ops.graph.conv_transpose``,
``conv_transpose_backward_data``, ``conv_transpose_backprop_data`` and
``conv_transpose_backward_weights`` (CPU, Meta and Autograd kernels, all in C++).
"""

from . import _library  # noqa: F401  (loads the extension, registers the ops)
from ._benchmark import (
    benchmark_results,
    clear_benchmark_cache,
    get_benchmark,
    save_benchmark_cache,
    set_benchmark,
    use_benchmark,
)
from ._library import (
    available_isas,
    detected_uarch,
    fma_peak_gflops,
    get_isa,
    get_ncx_path,
    get_uarch,
    set_isa,
    set_ncx_path,
    set_uarch,
    use_isa,
    use_ncx_path,
    use_uarch,
)
from ._plans import plans
from ._version import __version__  # noqa: F401
from .convert import convert, revert
from .functional import (
    conv_transpose,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    conv_transpose_backprop_data,
    conv_transpose_backward_data,
    conv_transpose_backward_weights,
)
from .modules import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d

__all__ = [
    "conv_transpose",
    "conv_transpose_backward_data",
    "conv_transpose_backprop_data",
    "conv_transpose_backward_weights",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "convert",
    "revert",
    "available_isas",
    "get_isa",
    "set_isa",
    "use_isa",
    "get_ncx_path",
    "set_ncx_path",
    "use_ncx_path",
    "fma_peak_gflops",
    "get_uarch",
    "detected_uarch",
    "set_uarch",
    "use_uarch",
    "plans",
    "set_benchmark",
    "get_benchmark",
    "use_benchmark",
    "benchmark_results",
    "clear_benchmark_cache",
    "save_benchmark_cache",
]
