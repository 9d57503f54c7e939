"""nn.Modules that drop in for ``torch.nn.ConvTranspose{1,2,3}d``: same constructor,
parameters and state_dict; forward runs this library's kernels. Scriptable, and traceable
with torch.fx (the forward is one leaf call, ``_conv_transpose_module``), also as the root
module, where torch's own modules are not. channels_last inputs or weights give
channels_last results, as with torch's modules. ``repr`` ends in
``impl=torch_convtranspose``, so ``print(model)`` tells these from torch's."""

from typing import List, Optional

import torch
import torch.fx
from torch import Tensor

from .functional import _check_input_rank, _conv_transpose_ncx

IMPL_TAG = "impl=torch_convtranspose"


def _output_padding_for_size(
    input: Tensor,
    output_size: List[int],
    stride: List[int],
    padding: List[int],
    kernel_size: List[int],
    dilation: List[int],
    spatial_dims: int,
) -> List[int]:
    """torch's ``_ConvTransposeNd._output_padding`` for a given output_size (same rule and
    messages), as a free function so that it runs inside the FX leaf."""
    has_batch_dim = input.dim() == spatial_dims + 2
    non_spatial = 2 if has_batch_dim else 1
    if len(output_size) == non_spatial + spatial_dims:
        output_size = output_size[non_spatial:]
    if len(output_size) != spatial_dims:
        raise ValueError(
            "ConvTranspose{}D: for {}D input, output_size must have {} or {} elements (got {})"
            .format(spatial_dims, input.dim(), spatial_dims, non_spatial + spatial_dims,
                    len(output_size)))
    min_sizes: List[int] = []
    max_sizes: List[int] = []
    for d in range(spatial_dims):
        size = ((input.size(d + non_spatial) - 1) * stride[d] - 2 * padding[d]
                + dilation[d] * (kernel_size[d] - 1) + 1)
        min_sizes.append(size)
        max_sizes.append(size + stride[d] - 1)
    for d in range(spatial_dims):
        if output_size[d] < min_sizes[d] or output_size[d] > max_sizes[d]:
            raise ValueError(
                "requested an output size of {}, but valid sizes range from {} to {} (for an "
                "input of {})".format(output_size, min_sizes, max_sizes,
                                      list(input.shape[non_spatial:])))
    res: List[int] = []
    for d in range(spatial_dims):
        res.append(output_size[d] - min_sizes[d])
    return res


def _conv_transpose_module(
    input: Tensor,
    weight: Tensor,
    bias: Optional[Tensor],
    output_size: Optional[List[int]],
    stride: List[int],
    padding: List[int],
    output_padding: List[int],
    kernel_size: List[int],
    groups: int,
    dilation: List[int],
    spatial_dims: int,
) -> Tensor:
    """The modules' forward (after the padding_mode check): an FX leaf, so that the rank
    check, output_size, unbatched input and memory format are decided at run time."""
    _check_input_rank(input, spatial_dims)
    if output_size is not None:
        output_padding = _output_padding_for_size(input, output_size, stride, padding,
                                                  kernel_size, dilation, spatial_dims)
    return _conv_transpose_ncx(input, weight, bias, stride, padding, output_padding, groups,
                               dilation, spatial_dims)


torch.fx.wrap("_conv_transpose_module")


class ConvTranspose1d(torch.nn.ConvTranspose1d):
    """Drop-in for ``torch.nn.ConvTranspose1d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose1d")
        return _conv_transpose_module(
            input, self.weight, self.bias, output_size, self.stride, self.padding,  # type: ignore[arg-type]
            self.output_padding, self.kernel_size, self.groups, self.dilation, 1,  # type: ignore[arg-type]
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + ", " + IMPL_TAG


class ConvTranspose2d(torch.nn.ConvTranspose2d):
    """Drop-in for ``torch.nn.ConvTranspose2d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose2d")
        return _conv_transpose_module(
            input, self.weight, self.bias, output_size, self.stride, self.padding,  # type: ignore[arg-type]
            self.output_padding, self.kernel_size, self.groups, self.dilation, 2,  # type: ignore[arg-type]
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + ", " + IMPL_TAG


class ConvTranspose3d(torch.nn.ConvTranspose3d):
    """Drop-in for ``torch.nn.ConvTranspose3d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose3d")
        return _conv_transpose_module(
            input, self.weight, self.bias, output_size, self.stride, self.padding,  # type: ignore[arg-type]
            self.output_padding, self.kernel_size, self.groups, self.dilation, 3,  # type: ignore[arg-type]
        )

    def extra_repr(self) -> str:
        return super().extra_repr() + ", " + IMPL_TAG
