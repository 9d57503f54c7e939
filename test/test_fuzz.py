"""Property-based fuzzing of the three passes (issue #24).

Random valid problems with extreme shapes: size-1 and size-0 axes (batch, channels), odd
channel counts and groups, every data / weights layout and auto_pad variant, and strides or
dilations up to 2**59 on tiny inputs, whose huge pads bring the result back to a few
positions (index sums i*s - pb + k*d far from 0 that still land in range). Every ISA path is
compared EXACTLY against an independent reference on integer-valued data (exact in every
dtype here). The reference is the SPEC section 3 index map evaluated directly, position by
position, so it costs nothing for huge strides; where the plain-PyTorch oracle of SPEC
section 7 (test/problems.py) is affordable the two references are checked against each
other too. Runtime is bounded and reproducible: derandomized hypothesis, a fixed number of
examples per pass, no example database.
"""

from __future__ import annotations

import itertools

import problems as P
import pytest
import torch
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

HUGE = [2**10 + 1, 2**31 + 3, 2**40, 2**59]
MAX_OUT = {1: 12, 2: 6, 3: 4}  # result positions per axis
DTYPES = [torch.float32, torch.float32, torch.float64, torch.bfloat16, torch.float16]


@st.composite
def problems(draw):
    """A valid problem (NCX/IOX terms, formats drawn) with small tensors."""
    S = draw(st.sampled_from([1, 1, 2, 2, 3]))
    g = draw(st.sampled_from([1, 1, 2, 3]))
    icg = draw(st.sampled_from([1, 1, 3, 2, 1, 3, 2, 5, 1, 0]))
    ocg = draw(st.sampled_from([1, 3, 2, 1, 3, 1, 2, 5, 1, 0]))
    N = draw(st.sampled_from([1, 2, 3, 1, 2, 3, 1, 2, 0]))
    maxI, maxK = {1: (5, 4), 2: (3, 3), 3: (2, 2)}[S]
    isz, K, s, d, op, pb, pe = [], [], [], [], [], [], []
    for _ in range(S):
        i = draw(st.integers(1, maxI))
        k = draw(st.integers(1, maxK))
        sa = draw(st.sampled_from([1, 1, 2, 3] + HUGE))
        da = draw(st.sampled_from([1, 1, 2, 3] + HUGE))
        limit = max(sa, da)
        o = draw(st.sampled_from([0, 0, min(1, limit - 1), limit - 1]))
        full = sa * (i - 1) + P.eff_kernel(k, da) + o  # the size without pads
        if full > MAX_OUT[S] or draw(st.booleans()):
            # pads that bring the result back to a few positions
            total = full - draw(st.integers(1, min(MAX_OUT[S], full)))
            b = draw(st.sampled_from([0, total, total // 2, total // 3 + 1]))
            b = min(b, total)
            pads = (b, total - b)
        else:
            pads = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        assume(full + pads[0] + pads[1] < 2**62)  # SPEC'd index range (kMaxExtent)
        for lst, v in zip((isz, K, s, d, op, pb, pe), (i, k, sa, da, o) + pads):
            lst.append(v)
    p = P.Problem(N=N, IC=g * icg, OC=g * ocg, src_sp=tuple(isz), K=tuple(K), strides=tuple(s),
                  dilations=tuple(d), pads_begin=tuple(pb), pads_end=tuple(pe),
                  output_padding=tuple(op) if draw(st.booleans()) or any(op) else (), groups=g,
                  data_format=draw(st.sampled_from(P.DATA_FORMATS)),
                  weights_format=draw(st.sampled_from(P.WEIGHTS_FORMATS)),
                  bias=draw(st.booleans()))
    # auto_pad variants whose result stays small (None always qualifies once pads fit)
    ok = []
    for mode in P.AUTO_PADS:
        q = P.Problem(**{**p.__dict__, "auto_pad": mode})
        if all(1 <= o <= MAX_OUT[S] for o in q.out_spatial()):
            ok.append(q)
    assume(ok)
    q = draw(st.sampled_from(ok))
    # coverage, shown by --hypothesis-show-statistics
    event(f"auto_pad {q.auto_pad}")
    event(f"S={S}, groups {g}")
    if 0 in (N, icg, ocg):
        event("a zero batch or channel size")
    if max(s + d + pb + pe + op) >= 2**20:
        event("an attribute >= 2**20")
    return P.Problem(**{**q.__dict__, "auto_pad": P.mixed_case(q.auto_pad, _Rng(draw))})


class _Rng:
    """random.Random's random() for P.mixed_case, drawn through hypothesis."""

    def __init__(self, draw):
        self.draw = draw

    def random(self):
        return self.draw(st.sampled_from([0.0, 0.9]))


# --------------------------------------------------------------------------
# The reference: SPEC section 3's index map, evaluated directly (NCX/IOX, float64).
# --------------------------------------------------------------------------

def _taps(p: P.Problem, pb, out_sp):
    """(i, k, o) for every src position i and tap k whose o = i*s - pb + k*d is in range."""
    for i in itertools.product(*[range(v) for v in p.src_sp]):
        for k in itertools.product(*[range(v) for v in p.K]):
            o = tuple(i[a] * p.strides[a] - pb[a] + k[a] * p.dilations[a] for a in range(p.S))
            if all(0 <= o[a] < out_sp[a] for a in range(p.S)):
                yield i, k, o


def _blocks(p: P.Problem):
    icg, ocg = p.IC // p.groups, p.OC // p.groups
    for gi in range(p.groups):
        yield slice(gi * icg, (gi + 1) * icg), slice(gi * ocg, (gi + 1) * ocg)


def index_map_forward(p, x, w, b, pb, out_sp):
    y = torch.zeros([p.N, p.OC] + list(out_sp), dtype=torch.float64)
    for i, k, o in _taps(p, pb, out_sp):
        for ci, co in _blocks(p):
            y[(slice(None), co) + o] += x[(slice(None), ci) + i] @ w[(ci, slice(None)) + k]
    if b is not None:
        y += b.reshape([1, -1] + [1] * p.S)
    return y


def index_map_backward_data(p, dy, w, pb, out_sp):
    dx = torch.zeros([p.N, p.IC] + list(p.src_sp), dtype=torch.float64)
    for i, k, o in _taps(p, pb, out_sp):
        for ci, co in _blocks(p):
            dx[(slice(None), ci) + i] += dy[(slice(None), co) + o] @ w[(ci, slice(None)) + k].T
    return dx


def index_map_backward_weights(p, x, dy, pb, out_sp):
    dw = torch.zeros(p.w_shape_iox(), dtype=torch.float64)
    for i, k, o in _taps(p, pb, out_sp):
        for ci, co in _blocks(p):
            dw[(ci, slice(None)) + k] += x[(slice(None), ci) + i].T @ dy[(slice(None), co) + o]
    return dw


def _oracle_affordable(p: P.Problem) -> bool:
    """The SPEC section 7 oracle builds the unpadded result: only for small ones (and
    torch's convolutions take strides and dilations below 2**31 only)."""
    return all(max(p.strides[a], p.dilations[a]) < 2**31
               and p.strides[a] * (p.src_sp[a] - 1) + P.eff_kernel(p.K[a], p.dilations[a]) <= 64
               for a in range(p.S))


def _tensors(p: P.Problem, seed):
    g = torch.Generator().manual_seed(seed)
    x = P.make_tensor(p.src_shape_ncx(), torch.float64, g, integer=True)
    w = P.make_tensor(p.w_shape_iox(), torch.float64, g, integer=True)
    b = P.make_tensor([p.OC], torch.float64, g, integer=True) if p.bias else None
    dy = P.make_tensor(p.dst_shape_ncx(), torch.float64, g, integer=True)
    return x, w, b, dy


def _layout(p, x=None, w=None, dtype=torch.float32):
    if x is not None:
        return P.data_from_ncx(x, p.data_format).to(dtype).contiguous()
    return P.weights_from_iox(w, p.weights_format).to(dtype).contiguous()


def _run_isas(call, want64, dtype):
    """call() under every available ISA, each compared exactly with want64."""
    for isa in P.tct().available_isas():
        with P.use_isa(isa):
            got = call()
        try:
            P.assert_result(got, want64, dtype, exact=True)
        except AssertionError as e:
            raise AssertionError(f"ISA {isa}: {e}") from None


# --------------------------------------------------------------------------
# The three passes
# --------------------------------------------------------------------------

@SETTINGS
@given(p=problems(),
       dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_fuzz_forward(p, dtype, seed):
    x, w, b, _ = _tensors(p, seed)
    pb, _ = p.resolved_pads()
    want = index_map_forward(p, x, w, b, pb, p.out_spatial())
    if _oracle_affordable(p):
        a = p.attrs(data_format="NCX", weights_format="IOX")
        torch.testing.assert_close(P.ref_conv_transpose(x, w, b, **a), want, rtol=0, atol=0)
    xs, ws = _layout(p, x=x, dtype=dtype), _layout(p, w=w, dtype=dtype)
    bs = None if b is None else b.to(dtype)
    want = P.data_from_ncx(want, p.data_format).contiguous()
    _run_isas(lambda: torch.ops.graph.conv_transpose(xs, ws, bs, **p.attrs()), want, dtype)


def _backward_pads(p: P.Problem):
    """The backward ops' pads (auto_pad from the diff_dst size D), and whether D is
    consistent with the src size under them (else the ops must refuse)."""
    D = p.out_spatial()
    pb, pe = P.bwd_pads(p, D)
    # P.bwd_consistent tries each output_padding in turn: too slow for huge strides
    extra = [D[a] - P.forward_size(p.src_sp[a], p.K[a], p.strides[a], p.dilations[a], pb[a],
                                   pe[a], 0) for a in range(p.S)]
    consistent = all(0 <= extra[a] < max(p.strides[a], p.dilations[a]) for a in range(p.S))
    return pb, pe, D, consistent


@SETTINGS
@given(p=problems(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
       full_src_shape=st.booleans())
def test_fuzz_backward_data(p, dtype, seed, full_src_shape):
    _, w, _, dy = _tensors(p, seed)
    pb, pe, D, consistent = _backward_pads(p)
    dys, ws = _layout(p, x=dy, dtype=dtype), _layout(p, w=w, dtype=dtype)
    src_shape = p.src_shape() if full_src_shape else list(p.src_sp)

    def call(**extra):
        return torch.ops.graph.conv_transpose_backward_data(dys, ws, **p.attrs(), **extra)

    if not consistent:
        event("inconsistent (auto_pad SAME): an error")
        with pytest.raises(RuntimeError, match="inconsistent"):
            call(src_shape=src_shape)
        return
    want = index_map_backward_data(p, dy, w, pb, D)
    if _oracle_affordable(p):
        a = p.attrs(data_format="NCX", weights_format="IOX")
        ref = P.ref_conv_transpose_backward_data(dy, w, **a, src_shape=p.src_shape_ncx())
        torch.testing.assert_close(ref, want, rtol=0, atol=0)
    want = P.data_from_ncx(want, p.data_format).contiguous()
    _run_isas(lambda: call(src_shape=src_shape), want, dtype)
    inferred = [P.backward_data_default_size(D[a], p.K[a], p.strides[a], p.dilations[a], pb[a],
                                             pe[a]) for a in range(p.S)]
    if inferred == list(p.src_sp):  # without src_shape the same size is inferred
        _run_isas(call, want, dtype)


@SETTINGS
@given(p=problems(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
       shape_input=st.booleans())
def test_fuzz_backward_weights(p, dtype, seed, shape_input):
    x, _, _, dy = _tensors(p, seed)
    pb, _, D, consistent = _backward_pads(p)
    xs, dys = _layout(p, x=x, dtype=dtype), _layout(p, x=dy, dtype=dtype)
    ws_input = torch.tensor(p.w_shape()) if shape_input else None
    ws_attr = [] if shape_input else p.w_shape()

    def call():
        return torch.ops.graph.conv_transpose_backward_weights(xs, dys, ws_input, **p.attrs(),
                                                               weights_shape=ws_attr)

    if not consistent:
        event("inconsistent (auto_pad SAME): an error")
        with pytest.raises(RuntimeError, match="inconsistent"):
            call()
        return
    want = index_map_backward_weights(p, x, dy, pb, D)
    if _oracle_affordable(p):
        a = p.attrs(data_format="NCX", weights_format="IOX")
        ref = P.ref_conv_transpose_backward_weights(x, dy, **a, weights_shape=p.w_shape_iox())
        torch.testing.assert_close(ref, want, rtol=0, atol=0)
    _run_isas(call, P.weights_from_iox(want, p.weights_format).contiguous(), dtype)


def test_index_map_reference_matches_naive_loops():
    """The fuzz reference agrees with test/problems.py's naive loops on a grouped problem."""
    p = P.Problem(N=2, IC=4, OC=6, src_sp=(3, 2), K=(2, 3), strides=(2, 1), dilations=(1, 2),
                  pads_begin=(1, 0), pads_end=(0, 2), output_padding=(1, 0), groups=2,
                  bias=True)
    x, w, b, _ = _tensors(p, 5)
    want = P.naive_forward(x, w, b, p.strides, p.pads_begin, p.pads_end, p.dilations,
                           p.output_padding, p.groups)
    got = index_map_forward(p, x, w, b, p.pads_begin, p.out_spatial())
    torch.testing.assert_close(got, want, rtol=0, atol=0)


_HUGE_STRIDE_SCRIPT = """
import resource, sys
import torch
import torch_convtranspose as tct
hard = resource.getrlimit(resource.RLIMIT_AS)[1]  # 8 GiB: a MemoryError, not the OOM killer
resource.setrlimit(resource.RLIMIT_AS, (8 << 30 if hard < 0 else min(8 << 30, hard), hard))
tct.set_isa(sys.argv[1])
s = 2**31 + 3  # src size 2, pads_end s: dst has one position, o = 0
y = torch.ops.graph.conv_transpose(torch.ones(1, 1, 2), torch.ones(1, 1, 1), strides=[s],
                                   pads_begin=[0], pads_end=[s], dilations=[1],
                                   data_format="NCX", weights_format="IOX")
assert y.flatten().tolist() == [1.0], y
"""


@pytest.mark.parametrize("isa", P.isa_param_names())
def test_forward_fast_path_huge_stride(isa):
    """A huge stride on a tiny input: one result position. The fast paths once built one
    stride phase per stride value (std::bad_alloc at 2**31, found by this fuzz); they now
    build at most one per output position, in the NXC and both NCX routes."""
    import subprocess
    import sys

    P.require_isa(isa)
    for route in ("auto", "planar", "channels_last"):
        proc = subprocess.run([sys.executable, "-c", _HUGE_STRIDE_SCRIPT, isa],
                              capture_output=True, text=True, timeout=120,
                              env=P.subprocess_env(TORCH_CONVTRANSPOSE_NCX=route))
        assert proc.returncode == 0, (route, proc.stderr[-2000:])
