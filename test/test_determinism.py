"""Reproducibility (SPEC section 5): the same inputs give the same bits on every
call, whatever else runs on the machine, and for any thread count.

Backward-weights is the pass with cross-thread reductions: every path of it
(planar NCX dot tiles and GEMMs, channels-last NXC, dense NCX through
channels-last buffers in pieces, the reference kernel for the other dtypes)
is called repeatedly with 1 to 4 threads on random (non-integer) data, and
the raw bits must agree across calls and thread counts. Forward and
backward-data are checked across thread counts too. torch.set_num_threads
reaches the kernels (they take at::get_num_threads()); 3 and 4 threads on this
2-core machine also make the threads' timing vary from call to call."""

import os
import subprocess
import sys

import problems as P
import pytest
import torch

THREADS = [1, 2, 3, 4]
REPEATS = 20  # calls per thread count for backward-weights


def _p(name, N, IC, OC, sp, K, s, d=None, pb=None, pe=None, op=(), g=1, df="NCX", wf="IOX"):
    S = len(sp)
    return P.Problem(N=N, IC=IC, OC=OC, src_sp=tuple(sp), K=tuple(K), strides=tuple(s),
                     dilations=tuple(d or (1,) * S), pads_begin=tuple(pb or (0,) * S),
                     pads_end=tuple(pe or (0,) * S), output_padding=tuple(op), groups=g,
                     data_format=df, weights_format=wf, name=name)


# (problem, ncx_path). The comments say which backward-weights path each case
# takes (AVX-512 and AVX2 alike unless noted).
CASES = [
    # Planar dot tiles, few channels (issue #24: 151 bit patterns in 200 calls).
    (_p("planar_dot_2d_3ch_k2s2", 4, 3, 3, (96, 96), (2, 2), (2, 2)), "planar"),
    (_p("planar_dot_1d_k3s3", 2, 4, 6, (300,), (3,), (3,), wf="OIX"), "planar"),
    (_p("planar_dot_3d_g2", 2, 4, 6, (4, 6, 20), (3, 3, 3), (2, 2, 2), pb=(1, 1, 1),
        pe=(1, 1, 1), g=2, wf="XIO"), "planar"),
    (_p("planar_auto_rgb_k7s2d2", 2, 64, 3, (9, 40), (7, 7), (2, 2), d=(2, 2), pb=(3, 3),
        pe=(2, 2), op=(1, 1)), "auto"),
    # Planar GEMMs (src channels >= 8, long rows).
    (_p("planar_gemm_2d_k3s2", 2, 16, 8, (16, 64), (3, 3), (2, 2), pb=(1, 1), pe=(1, 1)),
     "planar"),
    (_p("planar_gemm_1x1", 2, 32, 16, (8, 64), (1, 1), (1, 1), wf="XOI"), "planar"),
    # Channels-last, NXC tensors: small gradient copies, grouped, depthwise,
    # fused innermost taps, packed wide tiles, 1D / 3D.
    (_p("nxc_2d_k3s2", 2, 16, 8, (12, 12), (3, 3), (2, 2), df="NXC", wf="XOI"), None),
    (_p("nxc_2d_iox_k4s2", 2, 24, 40, (10, 9), (4, 4), (2, 2), pb=(1, 1), pe=(1, 1), df="NXC"),
     None),
    (_p("nxc_grouped_g4", 2, 16, 16, (9, 9), (3, 3), (1, 1), d=(2, 2), pb=(2, 2), pe=(2, 2),
        g=4, df="NXC", wf="XIO"), None),
    (_p("nxc_depthwise_g16", 2, 16, 16, (12, 12), (4, 4), (2, 2), pb=(1, 1), pe=(1, 1), g=16,
        df="NXC", wf="OIX"), None),
    (_p("nxc_fused_64to3_k4s2", 2, 64, 3, (16, 16), (4, 4), (2, 2), pb=(1, 1), pe=(1, 1),
        df="NXC", wf="XOI"), None),
    (_p("nxc_packed_128to128_k2s2", 2, 128, 128, (8, 8), (2, 2), (2, 2), df="NXC"), None),
    (_p("nxc_1d_k16s8", 1, 64, 32, (96,), (16,), (8,), pb=(4,), pe=(4,), df="NXC", wf="XOI"),
     None),
    (_p("nxc_3d_k3s2", 2, 8, 16, (6, 6, 6), (3, 3, 3), (2, 2, 2), pb=(1, 1, 1), pe=(1, 1, 1),
        df="NXC", wf="OIX"), None),
    # Dense NCX through channels-last buffers: whole tensors, and in pieces
    # (batch chunks; slabs of the outer axis), adding the piece gradients.
    (_p("ncx_cl_2d_k3s2", 2, 16, 8, (12, 12), (3, 3), (2, 2)), "channels_last"),
    (_p("ncx_pieces_batch_k2s2", 8, 32, 32, (32, 32), (2, 2), (2, 2)), "channels_last"),
    (_p("ncx_pieces_slabs_k2s2", 1, 64, 64, (64, 64), (2, 2), (2, 2), wf="XOI"),
     "channels_last"),
]

ISAS = ["avx512", "avx2"]


def _bits(t):
    t = t.contiguous()
    return t.view(torch.int32 if t.element_size() == 4 else
                  torch.int64 if t.element_size() == 8 else torch.int16)


class _threads:
    def __init__(self, n):
        self.n, self.old = n, None

    def __enter__(self):
        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)
        return False


def _tensors(p, dtype=torch.float32):
    x, w, _ = P.problem_tensors(p, dtype, seed=3)
    dy = P.diff_dst_tensor(p, dtype, seed=4)
    return x, w, dy


def _bwd_w(p, x, dy):
    return torch.ops.graph.conv_transpose_backward_weights(x, dy, **p.attrs(auto_pad="None"),
                                                           weights_shape=p.w_shape())


def _bwd_w_runs(p, x, dy, threads, repeats):
    """{nthreads: [bits of each call]}."""
    out = {}
    for nt in threads:
        with _threads(nt):
            out[nt] = [_bits(_bwd_w(p, x, dy)) for _ in range(repeats)]
    return out


def _check_repeatable(p, runs):
    for nt, calls in runs.items():
        for r, got in enumerate(calls[1:], 1):
            ndiff = int((got != calls[0]).sum())
            assert ndiff == 0, (
                f"{p.ident()}: backward-weights bits differ between call 0 and call {r} with "
                f"{nt} threads ({ndiff} of {got.numel()} elements)")


def _check_thread_independent(p, runs):
    nts = list(runs)
    want = runs[nts[0]][0]
    for nt in nts[1:]:
        got = runs[nt][0]
        ndiff = int((got != want).sum())
        assert ndiff == 0, (
            f"{p.ident()}: backward-weights bits differ between {nts[0]} and {nt} threads "
            f"({ndiff} of {got.numel()} elements)")


def _check_bwd_w_bits(p, x, dy, repeats=REPEATS):
    """Same bits on every call and for every thread count."""
    runs = _bwd_w_runs(p, x, dy, THREADS, repeats)
    _check_repeatable(p, runs)
    _check_thread_independent(p, runs)


@pytest.fixture(scope="module")
def busy_cpu():
    """Another process spinning on one core while the calls run, so that the
    kernels' threads are descheduled at different moments from call to call
    (as on a shared machine)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=[c[0].name for c in CASES])
def test_backward_weights_repeatable(case, isa, tct, busy_cpu):
    """The same bits on every call with a given thread count, with another
    process busy (2-4 threads: the threads' timing differs from call to call)."""
    P.require_isa(isa)
    p, path = case
    x, _, dy = _tensors(p)
    with P.use_isa(isa), tct.use_ncx_path(path or tct.get_ncx_path()):
        _check_repeatable(p, _bwd_w_runs(p, x, dy, [2, 3, 4], REPEATS))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=[c[0].name for c in CASES])
def test_backward_weights_thread_independent(case, isa, tct):
    """The same bits for 1, 2, 3 and 4 threads."""
    P.require_isa(isa)
    p, path = case
    x, _, dy = _tensors(p)
    with P.use_isa(isa), tct.use_ncx_path(path or tct.get_ncx_path()):
        _check_thread_independent(p, _bwd_w_runs(p, x, dy, THREADS, 1))


# The reference kernel: the other dtypes on any ISA, and f32 under the
# "reference" ISA.
REF_CASES = [
    (_p("ref_2d_k3s2_nxc", 2, 8, 6, (7, 9), (3, 3), (2, 2), pb=(1, 1), pe=(1, 1), df="NXC",
        wf="XOI"), torch.float64),
    (_p("ref_1d_g2_ncx", 3, 4, 6, (20,), (4,), (2,), g=2), torch.bfloat16),
    (_p("ref_3d_ncx", 2, 3, 4, (4, 5, 6), (2, 2, 2), (2, 2, 2), wf="OIX"), torch.float16),
    (_p("ref_2d_f32", 4, 3, 3, (24, 24), (2, 2), (2, 2)), torch.float32),
]


@pytest.mark.parametrize("case", REF_CASES, ids=[c[0].name for c in REF_CASES])
def test_reference_backward_weights_bits(case, tct):
    p, dtype = case
    x, _, dy = _tensors(p, dtype)
    isa = "reference" if dtype == torch.float32 else None
    with P.use_isa(isa):
        _check_bwd_w_bits(p, x, dy, repeats=5)


FWD_BWD_D_CASES = [CASES[i] for i in (0, 1, 4, 6, 8, 9, 13, 14)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", FWD_BWD_D_CASES, ids=[c[0].name for c in FWD_BWD_D_CASES])
def test_forward_and_backward_data_bits(case, isa, tct):
    P.require_isa(isa)
    p, path = case
    x, w, dy = _tensors(p)
    a = p.attrs(auto_pad="None")
    want = None
    with P.use_isa(isa), tct.use_ncx_path(path or tct.get_ncx_path()):
        for nt in THREADS:
            with _threads(nt):
                got = [_bits(torch.ops.graph.conv_transpose(x, w, None, **a)),
                       _bits(torch.ops.graph.conv_transpose_backward_data(
                           dy, w, **a, src_shape=list(x.shape)))]
            if want is None:
                want = got
                continue
            for name, g_, w_ in zip(["forward", "backward-data"], got, want):
                assert torch.equal(g_, w_), f"{p.ident()}: {name} bits differ with {nt} threads"


def test_set_num_threads_reaches_the_kernels(tct):
    """torch.set_num_threads(n) in-process sets the kernels' OpenMP team size:
    after a call with 4 threads the process has at least 4 threads."""
    p, path = CASES[0]
    x, _, dy = _tensors(p)
    with _threads(4), tct.use_ncx_path(path):
        _bwd_w(p, x, dy)
        assert len(os.listdir("/proc/self/task")) >= 4
