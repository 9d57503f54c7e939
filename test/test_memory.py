"""Extra memory of forward / backward-data on long 1D signals stays bounded (issue #24
item 4): at most a tenth of the largest tensor plus the packed weights plus a few MiB,
for the first call in a fresh process (so that buffers kept by the call count), in
both layouts; and the results stay exact (integer-valued data) on those paths.

Each measurement runs benchmarks/memory.py's child in a subprocess (VmHWM growth
during the call, minus the result). Before the fix, NXC backward-data built int64
index tables of ~32 bytes per (position, tap): I = 2**22, k4 s4 took ~630 MiB for a
16 MiB diff_src; NCX planar backward-data kept a copy of diff_dst per thread.
"""

import os
import pathlib
import sys

import pytest

BENCH_DIR = str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")

if not sys.platform.startswith("linux"):
    pytest.skip("VmHWM / clear_refs are Linux-only", allow_module_level=True)


@pytest.fixture(scope="module")
def memory():
    saved = list(sys.path)
    sys.path.insert(0, BENCH_DIR)
    try:
        import memory as m
    finally:
        sys.path[:] = saved
    return m


def _fast_isa():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import problems as P

    isas = [i for i in P.isa_param_names() if i != "reference"]
    return isas[0] if isas else None


FAST = _fast_isa()
needs_fast = pytest.mark.skipif(FAST is None, reason="no AVX2/AVX-512 kernels on this CPU")

# (name, n, ic, oc, length, k, s, p) as in benchmarks/memory.py: 2**22 positions.
CASES = [
    ("1ch_k4s4", 1, 1, 1, 1 << 22, 4, 4, 0),
    ("1ch_k16s8", 1, 1, 1, 1 << 22, 16, 8, 4),
]


def _bound_mb(r):
    return 0.1 * r["largest_mb"] + r["weights_mb"] + 8.0


@needs_fast
@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_backward_data_long_1d_extra_memory(memory, case, layout):
    spec = memory.spec_of(case, layout, "bwd_d", "ours", threads=2)
    spec["check"] = True
    r = memory.measure(spec)
    assert r["exact"], "backward-data differs from conv1d on integer data"
    assert r["first_mb"] <= _bound_mb(r), r
    assert r["second_mb"] <= _bound_mb(r), r


@needs_fast
@pytest.mark.parametrize("layout", ["nxc", "ncx"])
def test_forward_long_1d_extra_memory(memory, layout):
    case = ("4ch_k16s8", 1, 4, 4, 1 << 20, 16, 8, 4)
    spec = memory.spec_of(case, layout, "fwd", "ours", threads=2)
    spec["check"] = True
    r = memory.measure(spec)
    assert r["exact"], "forward differs from conv_transpose1d on integer data"
    assert r["first_mb"] <= _bound_mb(r), r


@needs_fast
@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_long_1d_exact_paths(isa):
    """Lazy index tables (NXC), chunked planar depthwise rows and slabs of the
    channels-last NCX route, against torch on integer data (exact)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import problems as P
    import torch
    import torch.nn.functional as F

    if isa not in P.isa_param_names():
        pytest.skip(f"{isa} not available")
    tct = P.tct()
    gen = torch.Generator().manual_seed(0)
    # (length, ic, oc, k, s, p, d, n, g, op): long enough for lazy tables / chunks / slabs.
    shapes = [
        (300_001, 1, 1, 7, 3, 5, 1, 2, 1, 2),
        (150_000, 2, 3, 16, 8, 4, 1, 1, 1, 0),
        (200_000, 2, 2, 3, 1, 1, 2, 1, 2, 0),
        (70_000, 3, 5, 4, 4, 0, 1, 1, 1, 0),
    ]
    with P.use_isa(isa):
        for L, ic, oc, k, s, p, d, n, g, op in shapes:
            x = torch.randint(-2, 3, (n, ic, L), generator=gen).float()
            w = torch.randint(-2, 3, (ic, oc // g, k), generator=gen).float()
            b = torch.randint(-2, 3, (oc,), generator=gen).float()
            y = F.conv_transpose1d(
                x, w, b, stride=s, padding=p, dilation=d, groups=g, output_padding=op
            )
            gy = torch.randint(-2, 3, y.shape, generator=gen).float()
            gx = F.conv1d(gy, w, None, stride=s, padding=p, dilation=d, groups=g)
            for fmt, path in (("NXC", "auto"), ("NCX", "planar"), ("NCX", "channels_last")):
                kw = dict(
                    strides=[s],
                    pads_begin=[p],
                    pads_end=[p],
                    dilations=[d],
                    output_padding=[op],
                    groups=g,
                    data_format=fmt,
                    weights_format="IOX",
                )
                nxc = fmt == "NXC"
                xi = x.movedim(1, -1).contiguous() if nxc else x
                gyi = gy.movedim(1, -1).contiguous() if nxc else gy
                with tct.use_ncx_path(path):
                    yo = torch.ops.graph.conv_transpose(xi, w, b, **kw)
                    go = torch.ops.graph.conv_transpose_backward_data(
                        gyi, w, src_shape=list(xi.shape), **kw
                    )
                if nxc:
                    yo, go = yo.movedim(-1, 1), go.movedim(-1, 1)
                tag = (L, k, s, p, d, n, g, op, fmt, path)
                assert torch.equal(yo, y), ("forward", tag)
                assert torch.equal(go, gx), ("backward-data", tag)


@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("pass_", ["fwd", "bwd_d"])
def test_bf16_amx_one_image_extra_memory(memory, pass_, layout):
    """bf16 on the AMX tiles, one long image: channels-last activations are
    read and the result written in place (no f32 or transposed copies); NCX
    goes in slabs of 16-bit transposes (321 MB for this 256 MB case when the
    whole image was transposed). Either way the extra memory stays within the
    f32 bound; results exact on integer data."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import problems as P

    P.require_isa("avx512_amx")
    case = ("16to8_k16s8", 1, 16, 8, 1 << 21, 16, 8, 4)
    spec = memory.spec_of(case, layout, pass_, "ours", isa="avx512_amx", threads=2, dtype="bf16")
    spec["check"] = True
    r = memory.measure(spec)
    assert r["exact"], r
    assert r["first_mb"] <= _bound_mb(r), r


@needs_fast
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("layout", ["nxc", "ncx"])
@pytest.mark.parametrize("pass_", ["fwd", "bwd_d"])
def test_16bit_f32_copies_one_image_extra_memory(memory, dtype, layout, pass_):
    """16-bit through f32 copies (f16; bf16 without AMX): one long image goes in
    slabs, so the copies stay within the f32 bound instead of widening the whole
    tensor (1.25-2.5x the largest tensor before); results exact on integer data."""
    case = ("4ch_k16s8", 1, 4, 4, 1 << 20, 16, 8, 4)
    spec = memory.spec_of(case, layout, pass_, "ours", isa=FAST, threads=2, dtype=dtype)
    spec["check"] = True
    r = memory.measure(spec)
    assert r["exact"], r
    assert r["first_mb"] <= _bound_mb(r), r
