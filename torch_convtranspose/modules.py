"""nn.Modules that drop in for ``torch.nn.ConvTranspose{1,2,3}d``: same constructor,
parameters and state_dict; forward runs this library's kernels."""

from typing import List, Optional

import torch
from torch import Tensor

from . import functional as F


class _ConvTransposeMixin:
    _dims = 0

    def forward(self, input: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        if self.padding_mode != "zeros":
            raise ValueError(
                f"Only 'zeros' padding mode is supported for {type(self).__name__}, "
                f"got padding_mode={self.padding_mode!r}"
            )
        output_padding = self._output_padding(
            input, output_size, self.stride, self.padding, self.kernel_size, self._dims,
            self.dilation,
        )
        return F._conv_transpose_nd(
            self._dims, input, self.weight, self.bias, self.stride, self.padding,
            output_padding, self.groups, self.dilation,
        )


class ConvTranspose1d(_ConvTransposeMixin, torch.nn.ConvTranspose1d):
    """Drop-in for ``torch.nn.ConvTranspose1d``."""

    _dims = 1


class ConvTranspose2d(_ConvTransposeMixin, torch.nn.ConvTranspose2d):
    """Drop-in for ``torch.nn.ConvTranspose2d``."""

    _dims = 2


class ConvTranspose3d(_ConvTransposeMixin, torch.nn.ConvTranspose3d):
    """Drop-in for ``torch.nn.ConvTranspose3d``."""

    _dims = 3
