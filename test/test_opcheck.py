"""torch.library.opcheck on representative samples of every op."""

import re

import problems as P
import pytest
import torch

ALL_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor",
             "test_aot_dispatch_dynamic")


def _samples():
    """(id, op name, args, kwargs, test_utils)."""
    out = []
    for i, p in enumerate(P.SAMPLE_PROBLEMS):
        rg = i != 1  # one problem without requires_grad inputs
        x, w, b = P.problem_tensors(p, torch.float32, seed=i, requires_grad=rg)
        dy = P.diff_dst_tensor(p, torch.float32, seed=i + 10, requires_grad=rg)
        tag = f"{p.ident()}{'-grad' if rg else ''}"
        out.append((f"fwd-{tag}", "conv_transpose", (x, w, b), p.attrs(), ALL_UTILS))
        if b is not None:
            out.append((f"fwd-nobias-{tag}", "conv_transpose", (x, w, None), p.attrs(),
                        ALL_UTILS))
        out.append((f"bwd_data-srcshape-{tag}", "conv_transpose_backward_data", (dy, w),
                    p.attrs(src_shape=p.src_shape()), ALL_UTILS))
        if P.bwd_default_src_ok(p, p.out_spatial()):
            out.append((f"bwd_data-{tag}", "conv_transpose_backward_data", (dy, w), p.attrs(),
                        ALL_UTILS))
        a = p.attrs(src_shape=p.src_shape())
        a["filter_format"] = a.pop("weights_format")
        out.append((f"backprop_data-{tag}", "conv_transpose_backprop_data", (dy, w), a,
                    ALL_UTILS))
        out.append((f"bwd_w-{tag}", "conv_transpose_backward_weights", (x, dy, None),
                    p.attrs(weights_shape=p.w_shape()), ALL_UTILS))
        # the shape as a 1-D tensor input: data-dependent output shape, so only the
        # checks that do not trace with fake tensors
        out.append((f"bwd_w-shape_input-{tag}", "conv_transpose_backward_weights",
                    (x, dy, torch.tensor(p.w_shape())), p.attrs(),
                    ("test_schema", "test_autograd_registration")))
    # f64 and bf16 samples
    p = P.SAMPLE_PROBLEMS[0]
    for dt in (torch.float64, torch.bfloat16):
        x, w, b = P.problem_tensors(p, dt, seed=3, integer=True, requires_grad=True)
        out.append((f"fwd-{p.ident()}-{dt}", "conv_transpose", (x, w, b), p.attrs(), ALL_UTILS))
    return out


SAMPLES = _samples()


@pytest.mark.parametrize("sample", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_opcheck(sample):
    _, name, args, kwargs, utils = sample
    P.tct()
    op = getattr(torch.ops.graph, name).default
    torch.library.opcheck(op, args, kwargs, test_utils=utils)


def test_opcheck_covers_every_op():
    names = {s[1] for s in SAMPLES}
    assert names == {"conv_transpose", "conv_transpose_backward_data",
                     "conv_transpose_backprop_data", "conv_transpose_backward_weights"}


def test_schemas_match_spec():
    """Argument names, kinds (keyword-only) and defaults are those of SPEC section 1."""
    P.tct()

    def args_of(name):
        s = getattr(torch.ops.graph, name).default._schema
        return {a.name: a for a in s.arguments}, s

    common_kw = {"strides", "pads_begin", "pads_end", "dilations", "auto_pad", "output_padding",
                 "groups", "data_format", "weights_format"}
    expected_pos = {
        "conv_transpose": ["src", "weights", "bias"],
        "conv_transpose_backward_data": ["diff_dst", "weights"],
        "conv_transpose_backprop_data": ["output_delta", "filter"],
        "conv_transpose_backward_weights": ["src", "diff_dst", "weights_shape_input"],
    }
    extra_kw = {
        "conv_transpose": set(),
        "conv_transpose_backward_data": {"src_shape"},
        "conv_transpose_backprop_data": {"src_shape", "filter_format"},
        "conv_transpose_backward_weights": {"weights_shape"},
    }
    for name, pos in expected_pos.items():
        args, schema = args_of(name)
        positional = [a.name for a in schema.arguments if not a.kwarg_only]
        assert positional == pos, (name, str(schema))
        kw = {a.name for a in schema.arguments if a.kwarg_only}
        want = common_kw | extra_kw[name]
        if name == "conv_transpose_backprop_data":
            # "same attributes" with the older spec's filter_format; weights_format may or
            # may not also be present
            kw = kw | {"weights_format"}
        assert kw == want, (name, str(schema))
        assert len(schema.returns) == 1
        assert args["auto_pad"].default_value == "None"
        assert args["groups"].default_value == 1
        assert args["data_format"].default_value == "NXC"
        if "weights_format" in args:
            assert args["weights_format"].default_value == "XOI"
        assert list(args["output_padding"].default_value) == []
        for req in ("strides", "pads_begin", "pads_end", "dilations"):
            assert not args[req].has_default_value(), (name, req)
    a, _ = args_of("conv_transpose_backprop_data")
    assert a["filter_format"].default_value == "XIO"
    a, _ = args_of("conv_transpose_backward_weights")
    assert list(a["weights_shape"].default_value) == []
    assert a["weights_shape_input"].default_value is None
    a, _ = args_of("conv_transpose")
    assert a["bias"].default_value is None
    # sizes are SymInt so that dynamic shapes trace
    for name, arg in (("conv_transpose_backward_data", "src_shape"),
                      ("conv_transpose_backprop_data", "src_shape"),
                      ("conv_transpose_backward_weights", "weights_shape")):
        _, schema = args_of(name)
        assert re.search(r"SymInt\[\]\?? " + arg + r"\b", str(schema)), str(schema)
