"""nn.Modules that drop in for ``torch.nn.ConvTranspose{1,2,3}d``: same constructor,
parameters and state_dict; forward runs this library's kernels. Scriptable."""

from typing import List, Optional

import torch
from torch import Tensor

from .functional import _conv_transpose_ncx


class ConvTranspose1d(torch.nn.ConvTranspose1d):
    """Drop-in for ``torch.nn.ConvTranspose1d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose1d")
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 1,  # type: ignore[arg-type]
            self.dilation,  # type: ignore[arg-type]
        )
        return _conv_transpose_ncx(
            input, self.weight, self.bias, self.stride, self.padding, output_padding,  # type: ignore[arg-type]
            self.groups, self.dilation, 1,  # type: ignore[arg-type]
        )


class ConvTranspose2d(torch.nn.ConvTranspose2d):
    """Drop-in for ``torch.nn.ConvTranspose2d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose2d")
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 2,  # type: ignore[arg-type]
            self.dilation,  # type: ignore[arg-type]
        )
        return _conv_transpose_ncx(
            input, self.weight, self.bias, self.stride, self.padding, output_padding,  # type: ignore[arg-type]
            self.groups, self.dilation, 2,  # type: ignore[arg-type]
        )


class ConvTranspose3d(torch.nn.ConvTranspose3d):
    """Drop-in for ``torch.nn.ConvTranspose3d``."""

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError("Only 'zeros' padding mode is supported for ConvTranspose3d")
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, 3,  # type: ignore[arg-type]
            self.dilation,  # type: ignore[arg-type]
        )
        return _conv_transpose_ncx(
            input, self.weight, self.bias, self.stride, self.padding, output_padding,  # type: ignore[arg-type]
            self.groups, self.dilation, 3,  # type: ignore[arg-type]
        )
