"""The ways the fast paths move data between layouts: dense NCX tensors go through
batch-chunked transposes (chunks of about a tenth of the batch), NXC ones straight
through, other strides through whole copies. Each must give the oracle's values
exactly (integer data) on every ISA."""

import problems as P
import pytest
import torch

ATTRS = dict(strides=[2, 1], pads_begin=[1, 0], pads_end=[0, 1], dilations=[1, 2],
             output_padding=[1, 0], groups=2)


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (n, 6, 5, 7), generator=g).float()       # NCX
    w = torch.randint(-3, 4, (6, 4, 3, 3), generator=g).float()       # IOX
    b = torch.randint(-3, 4, (8,), generator=g).float()
    return x, w, b


def _views(x_ncx, fmt):
    """The same logical activation as: dense in its layout, channels_last memory
    (NCX only), and a non-contiguous slice."""
    dense = P.data_from_ncx(x_ncx, fmt).contiguous()
    out = {"dense": dense}
    if fmt == "NCX":
        out["channels_last"] = x_ncx.contiguous(memory_format=torch.channels_last)
    wide = torch.cat([dense, dense], dim=-1)
    out["sliced"] = wide[..., : dense.shape[-1]]
    return out


@pytest.mark.parametrize("n", [1, 9, 10, 11, 23])
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_forward_and_backward_layout_paths(isa, n, fmt):
    x, w, b = _data(n, seed=n)
    kw = dict(ATTRS, data_format=fmt, weights_format="IOX")
    want_y = P.oracle_forward(x.double(), w.double(), b.double(), ATTRS["strides"],
                              ATTRS["pads_begin"], ATTRS["pads_end"], ATTRS["dilations"],
                              ATTRS["output_padding"], ATTRS["groups"])
    want_dx = P.oracle_backward_data(want_y, w.double(), ATTRS["strides"], ATTRS["pads_begin"],
                                     ATTRS["pads_end"], ATTRS["dilations"], ATTRS["groups"],
                                     src_spatial=list(x.shape[2:]))
    want_dw = P.oracle_backward_weights(x.double(), want_y, list(w.shape), ATTRS["strides"],
                                        ATTRS["pads_begin"], ATTRS["pads_end"],
                                        ATTRS["dilations"], ATTRS["groups"])
    y_ncx = want_y.float()
    for name, xv in _views(x, fmt).items():
        y = torch.ops.graph.conv_transpose(xv, w, b, **kw)
        assert y.is_contiguous()
        assert torch.equal(P.data_to_ncx(y, fmt).double(), want_y), name
        for dname, dv in _views(y_ncx, fmt).items():
            dx = torch.ops.graph.conv_transpose_backward_data(
                dv, w, src_shape=P.data_shape_from_ncx(list(x.shape), fmt), **kw)
            assert torch.equal(P.data_to_ncx(dx, fmt).double(), want_dx), (name, dname)
            dw = torch.ops.graph.conv_transpose_backward_weights(
                xv, dv, weights_shape=list(w.shape), **kw)
            assert torch.equal(dw.double(), want_dw), (name, dname)
