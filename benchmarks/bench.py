#!/usr/bin/env python
"""Side-by-side benchmark: torch_convtranspose's ops against PyTorch's own
transposed convolution, in one process, with the same thread count.

Passes (what is timed, one call each):
  fwd    ours: torch.ops.graph.conv_transpose(src, W, bias)
         torch: F.conv_transpose{1,2,3}d(src, W, bias)
  bwd_d  ours: torch.ops.graph.conv_transpose_backward_data(diff_dst, W, src_shape=...)
         torch: torch.ops.aten.convolution_backward(diff_dst, src, W, transposed=True,
                output_mask=[True, False, False]) -- the call autograd makes for the input
                gradient of F.conv_transpose*d, and nothing else
  bwd_w  ours: torch.ops.graph.conv_transpose_backward_weights(src, diff_dst, weights_shape=...)
         torch: the same aten.convolution_backward with output_mask=[False, True, False]

Layouts: nxc = our data_format="NXC" on contiguous (N, X..., C) tensors; torch gets
the same memory as an NCX view (channels_last / channels_last_3d strides; for 1D a
permuted, non-contiguous view) and channels-last weights (as after
model.to(memory_format=channels_last)). ncx = data_format="NCX", contiguous tensors.
Weights: weights_format="IOX" (torch's ConvTranspose weight layout). Forward with bias.

Data types (--dtype f32|bf16|f16|all, default f32; a comma list works too): every
tensor of the problem (src, weights, bias, diff_dst) in that dtype, drawn once in f32
and rounded, for ours and torch alike. A 16-bit row times our op and torch's in that
dtype, interleaved as for f32 (the order changed every round), and our f32 op on the
same case (interleaved with them;
with --dtype all the f32 row's timing of ours, measured just before, is reused).

Pads torch can't express (pads_end > pads_begin + output_padding, the "crop" tag):
torch runs with the closest padding/output_padding that gives a larger output and
the forward result is cropped (a view); for the backward passes torch gets
diff_dst zero-padded to its larger output shape (built before timing).

Columns:
  torch ms, ours ms  min / median over the timed calls (after warm-up), milliseconds
  ratio              torch min / ours min (> 1: ours faster)
  GF/s ours, torch   2*N*IC*(OC/g)*prod(K)*prod(I_src) / min time (the same for every pass)
  %pk ours, torch    GF/s as % of the f32 FMA peak measured at the start of this run
                     (torch_convtranspose.fma_peak_gflops, same thread count, best of 3)
  extra MB ours      peak RSS growth during one call minus the result's size, and that as %
                     of the result's size (malloc_trim, then VmHWM reset via
                     /proc/self/clear_refs; page-granular, small values are noise)
  extra MB torch     the same for torch's call
  torch backend      torch._C._select_conv_backend for the problem (MkldnnTranspose = oneDNN)
  check              ours vs torch, allclose(rtol=1e-3, atol=1e-3*max|torch|); MISMATCH or
                     ERROR rows are flagged and left out of the summary

16-bit rows (printed with a dt column, also on f32 rows, when a 16-bit dtype is run):
  ratio              torch min / ours min, torch in the same dtype
  f32/o              our f32 min / our 16-bit min (> 1: our 16-bit op faster than our f32)
  %pk                f32 rows only (the peak is an f32 FMA peak); GF/s as for f32
  check              ours and torch's 16-bit results, each against torch's f32 computation
                     on the same (already rounded) inputs: |x - ref| <= rtol*|ref| +
                     atol*max|ref| with rtol = 2u and atol = u/4 + sqrt(R)*2^-22 (u: the
                     dtype's unit roundoff, 2^-8 bf16, 2^-11 f16: the output's rounding;
                     R: the reduction length, IC/g*prod(K) fwd, OC/g*prod(K) bwd_d,
                     N*prod(I_src) bwd_w: the f32 summation order). Ours off: MISMATCH, as
                     for f32; torch's own 16-bit result off is only noted ("torch off")

Second peer (--peers, default auto: when onnxruntime is installed): onnxruntime's
ConvTranspose (benchmarks/peers.py), forward f32 only, on NCX data (its only layout;
the nxc rows' ours and torch read channels-last), timed interleaved with ours and
torch; its result is checked against torch's. Rows gain "ort/o" = onnxruntime min /
ours min (> 1: ours faster), the summary a per-layout table of it.

Summary: per pass and layout (and all together) the geometric mean of the ratios
(of the minima, and of the medians: geo(med)), the worst and best case, and the
geometric mean % of the FMA peak, ours and torch's; then, when the peak was
measured, for the compute-bound cases (tag "deep": 128+ channels per group on both
sides) the median and minimum % of the FMA peak, ours and torch's. With 16-bit
dtypes: that per dtype (%peak for f32 only), and for 16-bit also the geometric mean
and the worst case of f32/o (our f32 time / our 16-bit time).

Exit status 1 if any result differs from torch's (or an op failed).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import gc
import itertools
import math
import os
import platform
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# numpy's OpenBLAS (imported with torch, unused by either side's convolutions)
# otherwise starts a worker thread that wakes now and then: 1.3 % of the CPU
# samples of a timing loop on 2 cores, stolen from whichever threads are timed.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import cases as cases_mod  # noqa: E402
import peers  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from memory import _vm_hwm_kb  # noqa: E402  (one reader of the peak RSS, shared)

PASSES = ("fwd", "bwd_d", "bwd_w")
PASS_ALIASES = {
    "fwd": "fwd",
    "forward": "fwd",
    "bwd_d": "bwd_d",
    "bwd_data": "bwd_d",
    "backward_data": "bwd_d",
    "bwdd": "bwd_d",
    "bwd_w": "bwd_w",
    "bwd_weights": "bwd_w",
    "backward_weights": "bwd_w",
    "bwdw": "bwd_w",
}
LAYOUTS = ("nxc", "ncx")
DTYPES = ("f32", "bf16", "f16")
DTYPE_ALIASES = {
    "f32": "f32",
    "fp32": "f32",
    "float32": "f32",
    "float": "f32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "f16": "f16",
    "fp16": "f16",
    "float16": "f16",
    "half": "f16",
}
TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# Unit roundoff of the 16-bit dtypes (8 and 11 bits of precision): their results are
# checked against an f32 computation with rtol = 2u, atol = (u/4 + sqrt(R) * 2^-22) * max|ref|.
UNIT_ROUNDOFF = {"bf16": 2.0**-8, "f16": 2.0**-11}
RTOL = 1e-3
ATOL = 1e-3  # times max|torch result|

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

# c10::ConvBackend (aten/src/ATen/native/ConvUtils.h); the Python enum leaves some unnamed.
_CONV_BACKENDS = [
    "CudaDepthwise2d",
    "CudaDepthwise3d",
    "Cudnn",
    "CudnnTranspose",
    "Empty",
    "Miopen",
    "MiopenDepthwise",
    "MiopenTranspose",
    "Mkldnn",
    "MkldnnTranspose",
    "MkldnnEmpty",
    "NnpackSpatial",
    "Overrideable",
    "Slow2d",
    "Slow3d",
    "SlowDilated2d",
    "SlowDilated3d",
    "SlowTranspose2d",
    "SlowTranspose3d",
    "Winograd3x3Depthwise",
    "Xnnpack2d",
    "Mps",
    "MpsTranspose",
]


# --------------------------------------------------------------------------- ops


def load_ops(use_stub: bool, isa: str | None = None):
    """(namespace with the three ops, package module or None, description)."""
    if use_stub:
        import stub_ops

        return stub_ops, None, "STUB (plain PyTorch stand-ins; 'ours' timings are torch's)"
    try:
        import torch_convtranspose as pkg
    except ImportError as e:
        sys.exit(
            f"bench.py: cannot import torch_convtranspose ({e}); build/install the package "
            "first, or run with --stub to exercise the harness"
        )
    ops = torch.ops.graph
    try:
        for name in (
            "conv_transpose",
            "conv_transpose_backward_data",
            "conv_transpose_backward_weights",
        ):
            getattr(ops, name)
    except (AttributeError, RuntimeError) as e:
        sys.exit(
            f"bench.py: torch_convtranspose imported from {getattr(pkg, '__file__', pkg)} "
            f"but torch.ops.graph lacks its ops ({e})"
        )
    if isa:
        try:
            torch.ops.torch_convtranspose.set_isa(isa)
        except (AttributeError, RuntimeError) as e:
            sys.exit(f"bench.py: --isa {isa}: {e}")
    desc = f"torch_convtranspose {getattr(pkg, '__version__', '')}".strip()
    isa = _active_isa(pkg)
    if isa:
        desc += f", ISA {isa}"
    try:
        desc += f", uarch {torch.ops.torch_convtranspose.get_uarch()}"
    except (AttributeError, RuntimeError):
        pass
    return ops, pkg, desc


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), for the run logs."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return platform.processor() or "?"


def _active_isa(pkg):
    try:
        return str(torch.ops.torch_convtranspose.get_isa())
    except (AttributeError, RuntimeError):
        return os.environ.get("TORCH_CONVTRANSPOSE_ISA")


def rescale_peak(rows, peak: float, new_peak: float) -> float:
    """Recomputes the rows' %peak against new_peak (their peak_gflops too); returns it."""
    for r in rows:
        for who in ("torch", "ours"):
            if r.get(f"{who}_pct_peak") is not None:
                r[f"{who}_pct_peak"] *= peak / new_peak
        if r.get("peak_gflops"):
            r["peak_gflops"] = new_peak
    return new_peak


def fma_peak(pkg, threads: int, tries: int = 1):
    """(f32 FMA peak in GFLOP/s of `threads` threads or None, the ISA it was measured with).

    Measured with the active ISA; when that is 'reference' (peak 0), with the best
    ISA the CPU has, so that %peak still says how far from the machine's limit we are.
    The best of `tries` measurements of 0.2 s: a busy moment on a shared machine only
    lowers the reading (by up to 10 % on a 2-core VM), which would inflate every %peak.
    """
    f = getattr(pkg, "fma_peak_gflops", None) if pkg is not None else None
    if f is None:
        return None, None
    try:
        isa = pkg.get_isa() if hasattr(pkg, "get_isa") else None

        def best_of():
            return max(float(f(nthreads=threads, seconds=0.2)) for _ in range(max(1, tries)))

        v = best_of()
        if v <= 0 and hasattr(pkg, "use_isa"):
            best = [i for i in ("avx512", "avx2") if i in pkg.available_isas()]
            if best:
                isa = best[0]
                with pkg.use_isa(isa):
                    v = best_of()
    except Exception:
        return None, None
    return (v, isa) if v > 0 else (None, None)


# ------------------------------------------------------------------- measurement


_libc = None


def _malloc_trim():
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6")
        _libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _steady_heap():
    """Serve large blocks from the heap and keep freed memory (glibc mallopt).

    By default glibc maps each block over its (adaptive) threshold afresh and
    returns freed memory at the heap's top: a call whose outputs or scratch
    land there faults every page in again (measured here: 4x slower calls of
    a layer with a 4 MiB output, torch's and ours alike, in a process that
    had not yet run larger layers). Fixed thresholds make every timed call see
    the same warm heap, whichever cases ran before; extra_memory still trims
    it (malloc_trim) before each measurement. False where unavailable.
    """
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = _libc.mallopt(m_mmap_threshold, 1 << 30) == 1
        return ok and _libc.mallopt(m_trim_threshold, 1 << 30) == 1
    except (OSError, AttributeError):
        return False


def extra_memory(fn, out_bytes):
    """Peak RSS growth during one call of fn, minus the result's size (bytes), or None.

    Free heap memory is first returned to the OS (malloc_trim) so that the call's
    allocations show up as new resident pages; VmHWM is reset via clear_refs.
    """
    try:
        _malloc_trim()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _vm_hwm_kb()
        out = fn()
        peak = _vm_hwm_kb()
        del out
    except OSError:
        return None
    if base is None or peak is None:
        return None
    return (peak - base) * 1024 - out_bytes


def time_pair(fns, reps, warmup, budget, min_reps):
    """Times the callables of `fns` (dict name -> fn) interleaved, one call per sample.

    Returns ({name: first result}, {name: [seconds per call, ...]}). After warm-up,
    rounds of one call each are taken until `budget` seconds are spent (at least
    min_reps, at most `reps`; 20x more when a round takes under 5 ms: the minimum of
    single calls is the statistic most robust to other processes' interference).
    The order changes every round (every permutation in turn), so that no
    callable always runs right after the same other one: a call right after a
    long single-threaded one (torch's 16-bit fallbacks on CPUs without native
    16-bit kernels) finds the OpenMP threads asleep and the caches cold, and our
    16-bit op, always timed right after torch's, ran small layers 2-5x slower
    than when timed after our f32 op (AMD Zen 3: a 20 us depthwise layer 0.144
    against 0.029 ms).
    """
    results = {k: f() for k, f in fns.items()}  # also the first warm-up call
    for _ in range(max(0, warmup - 1)):
        t0 = time.perf_counter()
        for f in fns.values():
            f()
        if time.perf_counter() - t0 > 1.0:  # slow: enough warm-up
            break
    samples = {k: [] for k in fns}
    # every order in turn (with 3 callables a rotation alone would still put
    # one right after the same other in 2 rounds of 3)
    orders = list(itertools.permutations(fns))

    def one_round(r):
        for k in orders[r % len(orders)]:
            t0 = time.perf_counter()
            fns[k]()
            samples[k].append(time.perf_counter() - t0)

    one_round(0)
    cap = reps if sum(s[0] for s in samples.values()) >= 0.005 else 20 * reps
    t_start = time.perf_counter()
    n = 1
    while n < cap and (n < min_reps or time.perf_counter() - t_start < budget):
        one_round(n)
        n += 1
    return results, samples


def time_rotated(fns, budget, min_rounds, max_rounds, stat=min):
    """{name: stat of its seconds per call} (default the minimum): rounds of one
    call each, the order rotated every round (the call right after another op's
    starts with colder caches), at least min_rounds, then until `budget` seconds,
    at most max_rounds. For the side scripts (ncx_paths.py, benchmark_mode.py, busy.py)."""
    names = list(fns)
    samples = {k: [] for k in names}
    t_start = time.perf_counter()
    r = 0
    while r < max_rounds and (r < min_rounds or time.perf_counter() - t_start < budget):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            t0 = time.perf_counter()
            fns[k]()
            samples[k].append(time.perf_counter() - t0)
        r += 1
    return {k: stat(v) for k, v in samples.items()}


def side_arg_parser(doc, budget):
    """The side scripts' common options (cases, passes, layouts, threads, timing)."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--filter", default=None, help="regular expression on case name or tags")
    ap.add_argument("--passes", default="fwd,bwd_d,bwd_w")
    ap.add_argument("--layouts", default="nxc,ncx")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="the benchmark's few small cases")
    ap.add_argument("--budget", type=float, default=budget, help="seconds per case and pass")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def side_setup(args, what):
    """A side script's start: threads, our ops, the heap, and its header line
    (package, CPU, threads, then `what`). Returns (ops, package)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    ops, pkg, desc = load_ops(use_stub=False)
    _steady_heap()
    print(f"{desc}; CPU {cpu_name()}; {torch.get_num_threads()} threads; {what}")
    return ops, pkg


def side_args(ap, argv=None):
    """Parses side_arg_parser's options: passes and layouts as lists."""
    args = ap.parse_args(argv)
    args.passes = [PASS_ALIASES[p.strip().lower()] for p in args.passes.split(",")]
    args.layouts = [x.strip().lower() for x in args.layouts.split(",")]
    args.mb = None  # select_cases: the cases' own batch sizes
    return args


def compare(ours, ref):
    """(ok, max |ours - ref| / max |ref|) with allclose(rtol, atol * max|ref|)."""
    if tuple(ours.shape) != tuple(ref.shape):
        raise ValueError(f"result shape {tuple(ours.shape)} != torch's {tuple(ref.shape)}")
    ours, ref = ours.float(), ref.float()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    scale = scale if scale > 0 else 1.0
    diff = (ours - ref).abs()
    err = diff.max().item() / scale if diff.numel() else 0.0
    ok = bool(torch.isfinite(ours).all()) and bool((diff <= ATOL * scale + RTOL * ref.abs()).all())
    return ok, err


def reduction_length(case, pass_):
    """Terms summed into one result element (an upper bound for the forward)."""
    c = case
    return {
        "fwd": c.ic // c.groups * math.prod(c.k) + 1,  # + bias
        "bwd_d": c.oc // c.groups * math.prod(c.k),
        "bwd_w": c.n * math.prod(c.in_sp),
    }[pass_]


def lowp_tolerance(dtype, red_len):
    """(rtol, atol as a multiple of max|ref|) for a `dtype` result against an f32 one.

    rtol: twice the dtype's unit roundoff u (the output's rounding, with room);
    atol: u/4 at the output's largest magnitude (results near 0: f16's subnormal
    spacing, flushed subnormal inputs), plus the difference two f32 summation orders
    of `red_len` terms can make (about sqrt(R) * 2^-24; four times that). A result
    summed in f32 and rounded once passes with a wide margin; one rounded twice (two
    halves of the reduction rounded, then their sum) fails on random data.
    """
    u = UNIT_ROUNDOFF[dtype]
    return 2.0 * u, u / 4 + math.sqrt(max(1, red_len)) * 2.0**-22


def compare_lowp(x, ref, dtype, red_len):
    """(ok, max |x - ref| / max |ref|): a 16-bit result `x` against the f32 `ref`
    computed from the same rounded inputs, with lowp_tolerance(dtype, red_len).
    Elements where `ref` rounds to +-inf in `dtype` may be that inf."""
    if tuple(x.shape) != tuple(ref.shape):
        raise ValueError(f"result shape {tuple(x.shape)} != the reference's {tuple(ref.shape)}")
    rtol, atol = lowp_tolerance(dtype, red_len)
    x, ref = x.float(), ref.float()
    scale = ref.abs().max().item() if ref.numel() else 0.0
    scale = scale if scale > 0 else 1.0
    same = x == ref.to(TORCH_DTYPE[dtype]).float()  # also the overflows
    diff = torch.where(same, torch.zeros_like(x), (x - ref).abs())
    err = diff.max().item() / scale if diff.numel() else 0.0
    finite = bool((torch.isfinite(x) | same).all())
    return finite and bool((diff <= atol * scale + rtol * ref.abs()).all()), err


def torch_backend(x, w, tp, case):
    try:
        b = torch._C._select_conv_backend(
            x,
            w,
            bias=None,
            stride=list(case.strides),
            padding=list(tp.padding),
            dilation=list(case.dil),
            transposed=True,
            output_padding=list(tp.output_padding),
            groups=case.groups,
            bias_sizes=None,
        )
    except Exception:
        return "?"
    name = str(b).split(".")[-1]
    if "?" in name:
        try:
            name = _CONV_BACKENDS[int(b)]
        except (ValueError, IndexError, TypeError):
            name = "?"
    return name


# --------------------------------------------------------------------- one case


class Problem:
    """Tensors and the six callables of one (case, layout), in one dtype.

    The inputs (src, weights, bias, diff_dst; NCX) are drawn from `gen` in f32, or
    given (`inputs`), and rounded to `dtype` ("f32", "bf16", "f16")."""

    def __init__(self, case, layout, ops, gen, dtype="f32", inputs=None):
        self.case, self.layout, self.dtype = case, layout, dtype
        c = case
        tp = self.tp = cases_mod.torch_params(c)
        nsp = c.nsp
        if inputs is None:
            x = torch.randn((c.n, c.ic) + c.in_sp, generator=gen)
            w = torch.randn(c.weights_shape, generator=gen) / math.sqrt(
                c.ic // c.groups * math.prod(c.k)
            )
            bias = torch.randn(c.oc, generator=gen)
            gy = torch.randn((c.n, c.oc) + c.out_sp, generator=gen)
            inputs = (x, w, bias, gy)
        tdt = TORCH_DTYPE[dtype]
        x, w, self.bias, gy = (t.to(tdt) for t in inputs)
        self.w = w
        if layout == "nxc":
            self.x_ours = x.movedim(1, -1).contiguous()
            self.gy_ours = gy.movedim(1, -1).contiguous()
            self.x_t = self.x_ours.movedim(-1, 1)  # channels-last strides
            cl = {2: torch.channels_last, 3: torch.channels_last_3d}.get(nsp)
            self.w_t = w.contiguous(memory_format=cl) if cl else w
        else:
            self.x_ours = self.x_t = x
            self.gy_ours = gy
            self.w_t = w
        # for cast(): NCX views of the tensors kept anyway (no second copy held)
        self.inputs = (
            self.x_t,
            w,
            self.bias,
            self.gy_ours.movedim(-1, 1) if layout == "nxc" else gy,
        )
        self.crop = (slice(None), slice(None)) + tuple(
            slice(b, b + n) for b, n in zip(tp.crop_start, tp.out_sp)
        )
        if tp.needs_crop:
            full = (
                torch.zeros((c.n,) + tp.torch_out_sp + (c.oc,), dtype=tdt).movedim(-1, 1)
                if layout == "nxc"
                else torch.zeros((c.n, c.oc) + tp.torch_out_sp, dtype=tdt)
            )
            full[self.crop] = gy
            self.gy_t = full
        else:
            self.gy_t = self.gy_ours.movedim(-1, 1) if layout == "nxc" else self.gy_ours
        self.kw = dict(
            strides=list(c.strides),
            pads_begin=list(c.pads_begin),
            pads_end=list(c.pads_end),
            dilations=list(c.dil),
            output_padding=list(c.output_padding),
            groups=c.groups,
            data_format="NXC" if layout == "nxc" else "NCX",
            weights_format="IOX",
        )
        self.ops = ops
        self.conv_t = _CONV_T[nsp]
        self.tkw = dict(
            stride=list(c.strides),
            padding=list(tp.padding),
            dilation=list(c.dil),
            output_padding=list(tp.output_padding),
            groups=c.groups,
        )

    # torch
    def torch_fwd(self):
        k = self.tkw
        y = self.conv_t(
            self.x_t,
            self.w_t,
            self.bias,
            stride=k["stride"],
            padding=k["padding"],
            output_padding=k["output_padding"],
            groups=k["groups"],
            dilation=k["dilation"],
        )
        return y[self.crop] if self.tp.needs_crop else y

    def _torch_bwd(self, mask):
        k = self.tkw
        return torch.ops.aten.convolution_backward(
            self.gy_t,
            self.x_t,
            self.w_t,
            None,
            k["stride"],
            k["padding"],
            k["dilation"],
            True,
            k["output_padding"],
            k["groups"],
            mask,
        )

    def torch_bwd_d(self):
        return self._torch_bwd([True, False, False])[0]

    def torch_bwd_w(self):
        return self._torch_bwd([False, True, False])[1]

    # ours
    def ours_fwd(self):
        return self.ops.conv_transpose(self.x_ours, self.w, self.bias, **self.kw)

    def ours_bwd_d(self):
        return self.ops.conv_transpose_backward_data(
            self.gy_ours, self.w, src_shape=list(self.x_ours.shape), **self.kw
        )

    def ours_bwd_w(self):
        return self.ops.conv_transpose_backward_weights(
            self.x_ours, self.gy_ours, None, weights_shape=list(self.w.shape), **self.kw
        )

    def ours_as_ncx(self, pass_, out):
        return out.movedim(-1, 1) if self.layout == "nxc" and pass_ != "bwd_w" else out

    def cast(self, dtype):
        """The same problem (same inputs, rounded) in `dtype`."""
        return Problem(self.case, self.layout, self.ops, None, dtype, inputs=self.inputs)

    def f32_reference(self, pass_):
        """torch's f32 result of `pass_` on this problem's (rounded) inputs, NCX."""
        p = self.cast("f32")
        out = getattr(p, "torch_" + pass_)()
        del p
        return out

    def out_bytes(self, pass_):
        c = self.case
        n = {
            "fwd": c.n * c.oc * math.prod(c.out_sp),
            "bwd_d": c.n * c.ic * math.prod(c.in_sp),
            "bwd_w": math.prod(c.weights_shape),
        }[pass_]
        return TORCH_DTYPE[self.dtype].itemsize * n


def run_pass(prob, pass_, args, peak, prob32=None, f32_row=None):
    """One row: `prob`'s pass timed, ours against torch, and checked.

    16-bit problems: also our f32 time on the same case, from `f32_row` (the f32
    row of this case, pass and layout, already measured) when it has one, else timed
    here with `prob32` (the problem in f32), interleaved with the other two."""
    c = prob.case
    lowp = prob.dtype != "f32"
    f_t = getattr(prob, "torch_" + pass_)
    f_o = getattr(prob, "ours_" + pass_)
    row = {"status": "ok", "dtype": prob.dtype}
    fns = {"torch": f_t, "ours": f_o}
    peer = None
    if getattr(args, "use_ort", False) and pass_ == "fwd" and not lowp:
        try:
            x_ncx, w_iox, bias = prob.inputs[0].contiguous(), prob.w, prob.bias
            peer = peers.OrtConvTranspose(c, x_ncx, w_iox, bias, torch.get_num_threads())
            fns["ort"] = peer
        except Exception as e:  # the peer rejected the problem: note it, time the others
            row["ort_check"] = f"ERROR: {type(e).__name__}: {str(e)[:120]}"
    if lowp and f32_row is None and prob32 is not None:
        fns["ours_f32"] = getattr(prob32, "ours_" + pass_)
    try:
        res, samples = time_pair(fns, args.reps, args.warmup, args.budget, args.min_reps)
    except Exception as e:  # an op rejected the problem or crashed: report, go on
        msg = re.sub(r"\s+", " ", str(e))[:200]
        row.update(status="ERROR", error=f"{type(e).__name__}: {msg}")
        return row
    res.pop("ours_f32", None)
    if peer is not None:
        ok_p, err_p = compare(peer.result(), res["torch"])
        row["ort_check"] = "ok" if ok_p else f"MISMATCH (max rel err {err_p:.2e})"
        s_p = samples.pop("ort")
        row["ort_ms_min"], row["ort_ms_med"] = 1e3 * min(s_p), 1e3 * statistics.median(s_p)
        del peer, fns["ort"]
    if lowp:
        red = reduction_length(c, pass_)
        row["rtol"], row["atol_x_max_ref"] = lowp_tolerance(prob.dtype, red)
        try:
            ref = prob.f32_reference(pass_)
            ok, err = compare_lowp(prob.ours_as_ncx(pass_, res["ours"]), ref, prob.dtype, red)
            t_ok, t_err = compare_lowp(res["torch"], ref, prob.dtype, red)
            row["torch_max_rel_err"] = t_err
            row["torch_check"] = "ok" if t_ok else "off"
            del ref
        except ValueError as e:
            ok, err = False, float("inf")
            row["error"] = str(e)
    else:
        row["rtol"], row["atol_x_max_ref"] = RTOL, ATOL
        try:
            ok, err = compare(prob.ours_as_ncx(pass_, res["ours"]), res["torch"])
        except ValueError as e:
            ok, err = False, float("inf")
            row["error"] = str(e)
    del res
    row["status"] = "ok" if ok else "MISMATCH"
    row["max_rel_err"] = err
    gflop = c.flops * 1e-9
    for who in ("torch", "ours"):
        s = samples[who]
        row[f"{who}_ms_min"] = 1e3 * min(s)
        row[f"{who}_ms_med"] = 1e3 * statistics.median(s)
        row[f"{who}_gflops"] = gflop / min(s)
        pct = 100.0 * row[f"{who}_gflops"] / peak if peak and not lowp else None
        row[f"{who}_pct_peak"] = pct
    row["reps"] = len(samples["ours"])
    row["ratio"] = row["torch_ms_min"] / row["ours_ms_min"]
    row["ratio_med"] = row["torch_ms_med"] / row["ours_ms_med"]
    if row.get("ort_ms_min") is not None and row.get("ort_check") == "ok":
        row["ratio_ort"] = row["ort_ms_min"] / row["ours_ms_min"]
    if lowp:
        if "ours_f32" in samples:
            s = samples["ours_f32"]
            f32_min, f32_med = 1e3 * min(s), 1e3 * statistics.median(s)
            row["ours_f32_source"] = "interleaved"
        elif f32_row is not None and f32_row.get("ours_ms_min") is not None:
            f32_min, f32_med = f32_row["ours_ms_min"], f32_row["ours_ms_med"]
            row["ours_f32_source"] = "f32 row"
        else:
            f32_min = f32_med = None
        row["ours_f32_ms_min"], row["ours_f32_ms_med"] = f32_min, f32_med
        if f32_min is not None:
            row["ratio_vs_f32"] = f32_min / row["ours_ms_min"]
            row["ratio_vs_f32_med"] = f32_med / row["ours_ms_med"]
    if not args.no_memory:
        ob = prob.out_bytes(pass_)
        row["out_mb"] = ob / 2**20
        for who, f in (("ours", f_o), ("torch", f_t)):
            e = extra_memory(f, ob)
            e = None if e is None else max(0, e)  # page-granular; small results reuse the heap
            row[f"{who}_extra_mb"] = None if e is None else e / 2**20
            row[f"{who}_extra_pct_out"] = None if e is None else 100.0 * e / ob
    return row


# ------------------------------------------------------------------------ output


class Progress:
    """A one-line progress bar on stderr, weighted by the work of each step."""

    def __init__(self, total_weight, enabled=True):
        self.total = max(total_weight, 1e-9)
        self.done = 0.0
        self.t0 = time.time()
        self.tty = sys.stderr.isatty()
        self.enabled = enabled
        self.last_pct = -10

    def show(self, label):
        if not self.enabled:
            return
        frac = min(1.0, self.done / self.total)
        el = time.time() - self.t0
        eta = el / frac * (1 - frac) if frac > 0.01 else float("nan")
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        eta_s = "?" if math.isnan(eta) else _hms(eta)
        line = f"[{bar}] {100 * frac:3.0f}% {_hms(el)} elapsed, ETA {eta_s}  {label}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
            sys.stderr.flush()
        elif 100 * frac >= self.last_pct + 10:
            self.last_pct = int(100 * frac) // 10 * 10
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def advance(self, w, label=""):
        self.done += w
        self.show(label)

    def clear(self):
        if self.enabled and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _hms(s):
    s = int(s)
    return f"{s // 60}:{s % 60:02d}"


def _f(v, fmt, width):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    return format(v, fmt).rjust(width)


HEADER = (
    f"{'case':<30} {'pass':<5} {'lay':<3} {'torch ms':>17} {'ours ms':>17} {'ratio':>6} "
    f"{'GF/s ours':>9} {'torch':>7} {'%pk ours':>8} {'torch':>5} {'extra MB ours':>15} "
    f"{'torch':>7} {'torch backend':<16} check"
)
SUBHEADER = (
    f"{'':<30} {'':<5} {'':<3} {'min / med':>17} {'min / med':>17} {'t/o':>6} "
    f"{'':>9} {'':>7} {'':>8} {'':>5} {'MB (% of out)':>15} {'MB':>7}"
)


# With a 16-bit dtype in the run: a dtype column and our f32 time / our time.
HEADER_DT = (
    f"{'case':<30} {'pass':<5} {'lay':<3} {'dt':<4} {'torch ms':>17} {'ours ms':>17} "
    f"{'ratio':>6} {'vs f32':>6} {'GF/s ours':>9} {'torch':>7} {'%pk ours':>8} {'torch':>5} "
    f"{'extra MB ours':>15} {'torch':>7} {'torch backend':<16} check"
)
SUBHEADER_DT = (
    f"{'':<30} {'':<5} {'':<3} {'':<4} {'min / med':>17} {'min / med':>17} {'t/o':>6} "
    f"{'f32/o':>6} {'':>9} {'':>7} {'':>8} {'':>5} {'MB (% of out)':>15} {'MB':>7}"
)


def format_row(r, with_dtype=False):
    """One table line; with_dtype: HEADER_DT's columns (dtype, vs f32)."""
    dt = f"{r.get('dtype', 'f32'):<4} " if with_dtype else ""
    if r["status"] == "ERROR":
        return f"{r['case']:<30} {r['pass']:<5} {r['layout']:<3} {dt}ERROR: {r['error']}"
    ms = lambda a, b: f"{_f(a, '.3f', 8)}/{_f(b, '.3f', 8)}"  # noqa: E731
    ex = r.get("ours_extra_mb")
    extra = "-" if ex is None else f"{ex:.2f} ({r['ours_extra_pct_out']:.0f}%)"
    check = (
        "ok"
        if r["status"] == "ok"
        else (f"<<< MISMATCH: {r.get('error') or 'max rel err %.2e' % r['max_rel_err']} >>>")
    )
    if r.get("torch_check") == "off":
        check += f" (torch off: max rel err {r['torch_max_rel_err']:.2e})"
    if r.get("ratio_ort") is not None:
        check += f"  ort/o {r['ratio_ort']:.2f}"
    elif r.get("ort_check"):
        check += f"  ort: {r['ort_check']}"
    vs32 = f"{_f(r.get('ratio_vs_f32'), '.2f', 6)} " if with_dtype else ""
    return (
        f"{r['case']:<30} {r['pass']:<5} {r['layout']:<3} {dt}"
        f"{ms(r['torch_ms_min'], r['torch_ms_med'])} {ms(r['ours_ms_min'], r['ours_ms_med'])} "
        f"{_f(r['ratio'], '.2f', 6)} {vs32}{_f(r['ours_gflops'], '.1f', 9)} "
        f"{_f(r['torch_gflops'], '.1f', 7)} {_f(r['ours_pct_peak'], '.1f', 8)} "
        f"{_f(r['torch_pct_peak'], '.0f', 5)} {extra:>15} "
        f"{_f(r.get('torch_extra_mb'), '.2f', 7)} {r['torch_backend']:<16} {check}"
    )


def geomean(v):
    v = [x for x in v if x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")


def compute_bound_summary(good):
    """Lines on the compute-bound ("deep") cases' % of the FMA peak: median and minimum."""
    deep = [r for r in good if "deep" in r["tags"].split(",")]
    if not deep:
        return []
    out = [
        "",
        f"Compute-bound cases ({len({r['case'] for r in deep})} layers tagged deep: "
        f"{cases_mod.DEEP_CHANNELS}+ channels per group on both sides), % of the FMA peak",
        f"{'pass':<6} {'layout':<6} {'cases':>5} {'median ours':>11} {'median torch':>12} "
        f"{'min ours':>8}  min case",
    ]
    groups = [(p, lay) for p in PASSES for lay in LAYOUTS] + [("all", "")]
    for p, lay in groups:
        rs = [r for r in deep if p == "all" or (r["pass"] == p and r["layout"] == lay)]
        if not rs:
            continue
        lo = min(rs, key=lambda r: r["ours_pct_peak"])
        where = lo["case"][:30] + ("" if p != "all" else f" {lo['pass']} {lo['layout']}")
        out.append(
            f"{p:<6} {lay:<6} {len(rs):>5} "
            f"{statistics.median(r['ours_pct_peak'] for r in rs):>11.1f} "
            f"{statistics.median(r['torch_pct_peak'] for r in rs):>12.1f} "
            f"{lo['ours_pct_peak']:>8.1f}  {where}"
        )
    return out


def ratio_summary(good, peak):
    """The f32 summary table (checked rows): geomeans per pass and layout, all
    together, and the compute-bound cases' % of the peak."""
    out = [
        f"{'pass':<6} {'layout':<6} {'cases':>5} {'geomean':>8} {'geo(med)':>8} "
        f"{'min':>6}  {'min case':<30} {'max':>6} {'%peak ours':>10} {'%peak torch':>11}"
    ]
    for p in PASSES:
        for lay in LAYOUTS:
            rs = [r for r in good if r["pass"] == p and r["layout"] == lay]
            if not rs:
                continue
            lo = min(rs, key=lambda r: r["ratio"])
            hi = max(r["ratio"] for r in rs)
            pk_o = geomean([r["ours_pct_peak"] for r in rs]) if peak else None
            pk_t = geomean([r["torch_pct_peak"] for r in rs]) if peak else None
            out.append(
                f"{p:<6} {lay:<6} {len(rs):>5} {geomean([r['ratio'] for r in rs]):>8.3f} "
                f"{geomean([r['ratio_med'] for r in rs]):>8.3f} {lo['ratio']:>6.3f}  "
                f"{lo['case'][:30]:<30} {hi:>6.3f} {_f(pk_o, '.1f', 10)} {_f(pk_t, '.1f', 11)}"
            )
    if good:
        lo = min(good, key=lambda r: r["ratio"])
        out.append(
            f"{'all':<6} {'':<6} {len(good):>5} {geomean([r['ratio'] for r in good]):>8.3f} "
            f"{geomean([r['ratio_med'] for r in good]):>8.3f} {lo['ratio']:>6.3f}  "
            f"{lo['case'][:30] + ' ' + lo['pass'] + ' ' + lo['layout']}"
        )
        out.append("(%peak columns: geometric mean over the cases of GFLOP/s / FMA peak)")
        if peak:
            out.extend(compute_bound_summary(good))
    return out


def _where(r):
    return f"{r['case'][:30]} {r['pass']} {r['layout']}"


def lowp_summary(good, dtype):
    """A 16-bit dtype's summary (checked rows of that dtype): per pass and layout
    and all together, the geomean, geo(med), min and max of torch time / our time
    (torch in the same dtype), and the geomean, geo(med) and min of our f32 time /
    our time; then the worst case of each."""
    out = [
        "",
        f"{dtype}: ratio = torch {dtype} time / our {dtype} time; f32/o = our f32 time / "
        f"our {dtype} time (> 1: our {dtype} faster than our f32); min over reps",
        f"{'pass':<6} {'layout':<6} {'cases':>5} {'geomean':>8} {'geo(med)':>8} "
        f"{'min':>6}  {'min case':<30} {'max':>6} {'f32/o geo':>9} {'geo(med)':>8} "
        f"{'min':>6}  min case",
    ]

    def line(p, lay, rs, named):
        lo = min(rs, key=lambda r: r["ratio"])
        vs = [r for r in rs if r.get("ratio_vs_f32") is not None]
        lo32 = min(vs, key=lambda r: r["ratio_vs_f32"]) if vs else None
        g32 = geomean([r["ratio_vs_f32"] for r in vs]) if vs else None
        g32m = geomean([r["ratio_vs_f32_med"] for r in vs]) if vs else None
        return (
            f"{p:<6} {lay:<6} {len(rs):>5} {geomean([r['ratio'] for r in rs]):>8.3f} "
            f"{geomean([r['ratio_med'] for r in rs]):>8.3f} {lo['ratio']:>6.3f}  "
            f"{(lo['case'][:30] if named else ''):<30} {max(r['ratio'] for r in rs):>6.3f} "
            f"{_f(g32, '.3f', 9)} {_f(g32m, '.3f', 8)} "
            f"{_f(lo32 and lo32['ratio_vs_f32'], '.3f', 6)}  "
            f"{(lo32['case'][:30] if named and lo32 else '')}"
        ).rstrip()

    for p in PASSES:
        for lay in LAYOUTS:
            rs = [r for r in good if r["pass"] == p and r["layout"] == lay]
            if rs:
                out.append(line(p, lay, rs, True))
    if not good:
        out.append(f"(no {dtype} result passed its check)")
        return out
    out.append(line("all", "", good, False))
    lo = min(good, key=lambda r: r["ratio"])
    out.append(f"worst against torch {dtype}: {lo['ratio']:.3f}  {_where(lo)}")
    vs = [r for r in good if r.get("ratio_vs_f32") is not None]
    if vs:
        lo = min(vs, key=lambda r: r["ratio_vs_f32"])
        out.append(f"worst against our f32:    {lo['ratio_vs_f32']:.3f}  {_where(lo)}")
    off = [r for r in good if r.get("torch_check") == "off"]
    if off:
        hi = max(off, key=lambda r: r["torch_max_rel_err"])
        out.append(
            f"torch's own {dtype} results outside the tolerance: {len(off)} of {len(good)} "
            f"(largest max rel err {hi['torch_max_rel_err']:.2e}, {_where(hi)})"
        )
    return out


def peer_summary(rows):
    """onnxruntime (forward, f32): geomean and worst of its time / ours per layout."""
    rs = [r for r in rows if r.get("ratio_ort") is not None and r["status"] == "ok"]
    if not rs:
        return []
    out = [
        "",
        f"onnxruntime {peers.version()} (forward, f32, NCX data): ratio = its time / ours",
        f"{'layout':<6} {'cases':>5} {'geomean':>8} {'min':>6}  {'min case':<30} {'max':>6}",
    ]
    for lay in list(LAYOUTS) + ["all"]:
        sel = [r for r in rs if lay == "all" or r["layout"] == lay]
        if not sel:
            continue
        lo = min(sel, key=lambda r: r["ratio_ort"])
        out.append(
            f"{lay:<6} {len(sel):>5} {geomean([r['ratio_ort'] for r in sel]):>8.3f} "
            f"{lo['ratio_ort']:>6.3f}  {lo['case'][:30]:<30} "
            f"{max(r['ratio_ort'] for r in sel):>6.3f}"
        )
    bad = [r for r in rows if r.get("ort_check") not in (None, "ok")]
    for r in bad:
        out.append(f"onnxruntime {r['case']} {r['layout']}: {r['ort_check']}")
    return out


def summary(rows, peak):
    dtypes = list(dict.fromkeys(r.get("dtype", "f32") for r in rows))
    multi = dtypes != ["f32"]
    out = [
        "",
        "Summary (ratio = torch time / our time, min over reps; > 1: ours faster; "
        "results that failed the check are left out)",
    ]
    for dt in dtypes:
        good = [r for r in rows if r.get("dtype", "f32") == dt and r["status"] == "ok"]
        if dt == "f32":
            if multi:
                out.extend(["", "f32: ratio = torch f32 time / our f32 time"])
            out.extend(ratio_summary(good, peak))  # wrong answers' timings don't count
        else:
            out.extend(lowp_summary(good, dt))
    out.extend(peer_summary(rows))
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        out.append("")
        out.append(f"!!! {len(bad)} FAILED CHECK(S) -- their timings are not meaningful:")
        for r in bad:
            what = r.get("error") or f"max rel err {r['max_rel_err']:.3e}"
            dt = f" {r.get('dtype', 'f32')}" if multi else ""
            out.append(f"!!!   {r['case']} {r['pass']} {r['layout']}{dt}: {r['status']} {what}")
    elif not multi:
        out.append(
            f"All {len(rows)} results match torch (allclose rtol={RTOL}, atol={ATOL}*max|ref|)."
        )
    else:
        what = []
        if "f32" in dtypes:
            what.append(f"f32 against torch (allclose rtol={RTOL}, atol={ATOL}*max|ref|)")
        lowp = [d for d in dtypes if d != "f32"]
        what.append(
            f"{'/'.join(lowp)} against torch's f32 computation on the same rounded inputs "
            "(rtol 2u, atol (u/4 + sqrt(R)*2^-22)*max|ref|; u = "
            + ", ".join(f"2^{int(math.log2(UNIT_ROUNDOFF[d]))} {d}" for d in lowp)
            + "; R: reduction length)"
        )
        out.append(f"All {len(rows)} results match: " + "; ".join(what) + ".")
    return "\n".join(out)


CSV_FIELDS = [
    "case",
    "pass",
    "layout",
    "status",
    "max_rel_err",
    "torch_ms_min",
    "torch_ms_med",
    "ours_ms_min",
    "ours_ms_med",
    "ratio",
    "ratio_med",
    "ours_gflops",
    "torch_gflops",
    "ours_pct_peak",
    "torch_pct_peak",
    "peak_gflops",
    "gflop",
    "out_mb",
    "ours_extra_mb",
    "ours_extra_pct_out",
    "torch_extra_mb",
    "torch_extra_pct_out",
    "torch_backend",
    "reps",
    "threads",
    "n",
    "ic",
    "oc",
    "groups",
    "in_sp",
    "out_sp",
    "k",
    "strides",
    "dilations",
    "pads_begin",
    "pads_end",
    "output_padding",
    "torch_padding",
    "torch_output_padding",
    "torch_crop",
    "tags",
    "source",
    "error",
    # after today's columns, so that older runs' files line up
    "dtype",
    "ours_f32_ms_min",
    "ours_f32_ms_med",
    "ratio_vs_f32",
    "ratio_vs_f32_med",
    "ours_f32_source",
    "rtol",
    "atol_x_max_ref",
    "torch_max_rel_err",
    "torch_check",
    "ort_ms_min",
    "ort_ms_med",
    "ratio_ort",
    "ort_check",
]


def write_csv(path, rows):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, tuple):
            return "x".join(str(x) for x in v)
        return "" if v is None else v

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: fmt(r.get(k)) for k in CSV_FIELDS})


# Bar colours per layout, lighter per dtype (f32, bf16, f16); hatches tell dtypes apart too.
_PLOT_COLORS = {
    "nxc": ("tab:blue", "#6baed6", "#c6dbef"),
    "ncx": ("tab:orange", "#fdae6b", "#fdd0a2"),
}
_PLOT_HATCH = ("", "//", "..")


def write_plot(path, rows, title, key="ratio", ylabel="torch / ours", what=None):
    """Bars of r[key] per case, one panel per pass, one bar per layout (and dtype,
    when the rows hold more than f32), log scale, a line at 1."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        return (
            "matplotlib is not installed: no plot written (the project's setup must add "
            "matplotlib to the environment)"
        )
    good = [r for r in rows if r["status"] == "ok" and r.get(key) is not None]
    if not good:
        return "no successful results: no plot written"
    names = list(dict.fromkeys(r["case"] for r in good))
    passes = [p for p in PASSES if any(r["pass"] == p for r in good)]
    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in good)]
    dtypes = [d for d in DTYPES if any(r.get("dtype", "f32") == d for r in good)]
    series = [(lay, d) for lay in layouts for d in dtypes]
    val = {(r["case"], r["pass"], r["layout"], r.get("dtype", "f32")): r[key] for r in good}
    width = 0.8 / len(series)
    fig, axes = plt.subplots(
        len(passes),
        1,
        sharex=True,
        squeeze=False,
        figsize=(
            max(8.0, 2.0 + 0.32 * len(names) * max(1.0, len(series) / 2)),
            1.0 + 3.0 * len(passes),
        ),
    )
    for ax, p in zip(axes[:, 0], passes):
        for j, (lay, d) in enumerate(series):
            xs = [i + (j - (len(series) - 1) / 2) * width for i in range(len(names))]
            ys = [val.get((n, p, lay, d), float("nan")) for n in names]
            k = DTYPES.index(d)
            ax.bar(
                xs,
                ys,
                width=width,
                color=_PLOT_COLORS[lay][k],
                hatch=_PLOT_HATCH[k] or None,
                edgecolor="black" if k else None,
                linewidth=0.3 if k else None,
                label=lay if dtypes == ["f32"] else f"{lay} {d}",
            )
        ax.axhline(1.0, color="red", linewidth=1.0, linestyle="--")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylabel(f"{p}: {ylabel}")
        ax.grid(axis="y", which="both", alpha=0.3)
        if dtypes == ["f32"]:
            ax.legend(fontsize=7, loc="upper right")
        else:  # beside the panel: more bars per case
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax = axes[-1, 0]
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=75, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(names) - 0.4)
    if what is None:
        what = "ratio = torch time / our time (> 1: ours faster)"
        if dtypes != ["f32"]:
            what = "ratio = torch time / our time, torch in the same dtype (> 1: ours faster)"
    axes[0, 0].set_title(title + "\n" + what, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot: {path}"


# -------------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a few small cases (smoke test)")
    ap.add_argument(
        "--passes", default=",".join(PASSES), help="comma list of fwd,bwd_d,bwd_w (default: all)"
    )
    ap.add_argument(
        "--layouts", default=",".join(LAYOUTS), help="comma list of nxc,ncx (default: both)"
    )
    ap.add_argument(
        "--filter", default=None, help="regular expression on case name, tags or source (re.search)"
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="thread count for both (default: torch.get_num_threads())",
    )
    ap.add_argument(
        "--reps",
        type=int,
        default=10,
        help="max timed calls per op (default 10; calls under 5 ms: 20x that)",
    )
    ap.add_argument("--min-reps", type=int, default=3, help="min timed calls per op (default 3)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up calls (default 2)")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds of timed calls per case, pass and layout, ours and torch "
        "together (default 0.6; 0.3 with --quick)",
    )
    ap.add_argument("--mb", type=int, default=None, help="override every case's batch size")
    ap.add_argument(
        "--out",
        default=os.path.join(HERE, "results", "latest"),
        help="output path prefix: writes PREFIX.csv and PREFIX.png "
        "(default benchmarks/results/latest)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the extra-memory measurement")
    ap.add_argument(
        "--memory",
        action="store_true",
        help="instead of timing: extra memory of long 1D signals (memory.py's cases, tag mem; "
        "each call in a fresh process), ours vs torch, for --passes fwd/bwd_d, --layouts, "
        "--filter, --isa, --threads",
    )
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--list", action="store_true", help="list the selected cases and exit")
    ap.add_argument(
        "--stub",
        action="store_true",
        help="use plain-PyTorch stand-ins for our ops (harness development only)",
    )
    ap.add_argument(
        "--isa",
        default=None,
        help="our kernel implementation: reference, avx2, avx512 (default: the "
        "package's choice, TORCH_CONVTRANSPOSE_ISA or the best the CPU has)",
    )
    ap.add_argument(
        "--dtype",
        default="f32",
        help="f32, bf16, f16, or all (f32, bf16, f16 one after the other per case and "
        "layout), or a comma list (default f32). 16-bit rows add our f32 time / our 16-bit "
        "time, and are checked against an f32 computation on the same rounded inputs",
    )
    ap.add_argument(
        "--peers",
        default="auto",
        choices=["auto", "ort", "none"],
        help="second peer: onnxruntime's ConvTranspose (forward, f32); auto (default): "
        "when onnxruntime is installed",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.peers == "ort" and not peers.available():
        ap.error("--peers ort: onnxruntime is not installed")
    args.use_ort = args.peers == "ort" or (args.peers == "auto" and peers.available())
    try:
        names = [d.strip().lower() for d in args.dtype.split(",") if d.strip()]
        picked = {x for d in names for x in (DTYPES if d == "all" else (DTYPE_ALIASES[d],))}
    except KeyError as e:
        ap.error(f"unknown dtype {e}; choose from {', '.join(DTYPES)} or all")
    if not picked:
        ap.error("--dtype: no dtype given")
    args.dtypes = [d for d in DTYPES if d in picked]
    if args.budget is None:
        args.budget = 0.3 if args.quick else 0.6
    try:
        args.passes = list(
            dict.fromkeys(
                PASS_ALIASES[p.strip().lower()] for p in args.passes.split(",") if p.strip()
            )
        )
    except KeyError as e:
        ap.error(f"unknown pass {e}; choose from {', '.join(PASSES)}")
    args.layouts = [x.strip().lower() for x in args.layouts.split(",") if x.strip()]
    for lay in args.layouts:
        if lay not in LAYOUTS:
            ap.error(f"unknown layout {lay!r}; choose from {', '.join(LAYOUTS)}")
    return args


def select_cases(args):
    cs = cases_mod.all_cases(quick=args.quick)
    if args.filter:
        rx = re.compile(args.filter)
        cs = [
            c for c in cs if rx.search(c.name) or rx.search(",".join(c.tags)) or rx.search(c.source)
        ]
    if args.mb:
        cs = [cases_mod.Case(**{**c.__dict__, "n": args.mb}) for c in cs]
    return cs


def main(argv=None):
    args = parse_args(argv)
    if args.memory:
        import memory as memory_mod

        passes = [p for p in args.passes if p in ("fwd", "bwd_d")] or ["bwd_d", "fwd"]
        memory_mod.run_table(passes, args.layouts, args.filter, args.isa, args.threads)
        return 0
    cs = select_cases(args)
    if args.list:
        for c in cs:
            print(
                f"{c.name:<30} {c.flops / 1e9:7.3f} GFLOP  {c.describe():<58} "
                f"[{','.join(c.tags)}]  {c.source}"
            )
        return 0
    if not cs:
        sys.exit("bench.py: no case matches")
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    heap = _steady_heap()
    ops, pkg, desc = load_ops(args.stub, args.isa)
    peak, peak_isa = fma_peak(pkg, threads, tries=3)

    cpu = cpu_name()
    print(f"torch {torch.__version__}, {desc}")
    if args.use_ort and not args.stub:
        print(f"second peer: onnxruntime {peers.version()} (forward, f32; ort/o column)")
    load = os.getloadavg()[0]
    print(f"CPU: {cpu}, threads: {threads}, load average (1 min) before the run: {load:.2f}")
    print(
        "heap: glibc thresholds fixed (no first-touch faults in timed calls)"
        if heap
        else "heap: default allocator behaviour (calls may fault fresh pages in)"
    )
    if load > 0.5:
        print(
            "WARNING: other processes are using the CPU: timings (OpenMP barriers especially) "
            "will be noisy, and ratios only roughly right (--threads 1 is steadier)."
        )
    if peak:
        print(f"FMA peak (f32, {threads} threads, {peak_isa}): {peak:.1f} GFLOP/s")
    else:
        print("FMA peak: unavailable (fma_peak_gflops missing or 0): no %peak columns")
    wide = args.dtypes != ["f32"]  # the table gets a dtype column
    dts = f" x dtypes {','.join(args.dtypes)}" if wide else ""
    print(
        f"{len(cs)} cases x passes {','.join(args.passes)} x layouts {','.join(args.layouts)}"
        f"{dts}; reps {args.min_reps}..{args.reps} within {args.budget}s, warm-up {args.warmup}"
    )
    if wide:
        print(
            "16-bit rows: torch in the same dtype; vs f32 = our f32 time / our 16-bit time"
            + (
                " (our f32 from the f32 row just before)"
                if "f32" in args.dtypes
                else " (our f32 timed interleaved with both)"
            )
            + "; checked against torch's f32 computation on the same rounded inputs; "
            "%pk for f32 only"
        )
    print()
    print(HEADER_DT if wide else HEADER)
    print(SUBHEADER_DT if wide else SUBHEADER)
    sys.stdout.flush()

    steps = [(c, lay) for c in cs for lay in args.layouts]
    weight = {id(c): c.flops + 5e7 for c in cs}
    # 16-bit: their own op, and our f32 where not reused (today's scalar 16-bit path is slower)
    dt_weight = sum(1.0 if d == "f32" else 1.0 + ("f32" not in args.dtypes) for d in args.dtypes)
    prog = Progress(
        sum(weight[id(c)] * len(args.passes) * dt_weight for c, _ in steps),
        enabled=not args.no_progress,
    )
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    t_start = time.time()
    with torch.inference_mode():
        for c, lay in steps:
            prog.show(f"{c.name} {lay} (setup)")
            gc.collect()  # once here, not in the measurements (it takes ~0.1 s)
            prob32 = Problem(c, lay, ops, gen)  # f32; the 16-bit problems are it rounded
            case_rows = []
            f32_rows = {}
            for dt in args.dtypes:
                prob = prob32 if dt == "f32" else prob32.cast(dt)
                dt_rows = run_dtype(prob, prob32, f32_rows, args, peak, threads, prog, weight)
                if dt == "f32":
                    f32_rows = {r["pass"]: r for r in dt_rows}
                case_rows.extend(dt_rows)
                del prob
            del prob32
            prog.clear()
            for r in case_rows:
                print(format_row(r, with_dtype=wide))
            sys.stdout.flush()
            rows.extend(case_rows)
    prog.clear()
    peak_end = fma_peak(pkg, threads)[0]
    if peak_end and peak and peak_end > 1.1 * peak:
        print(
            f"FMA peak measured again at the end: {peak_end:.1f} GFLOP/s (> 10% above the "
            f"start's {peak:.1f}: the machine was busy then). The summary and the CSV use "
            "the higher reading (a busy moment only lowers one); the rows above, the start's."
        )
        peak = rescale_peak(rows, peak, peak_end)
    print(summary(rows, peak))
    print(f"Total time: {time.time() - t_start:.1f} s")

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    write_csv(args.out + ".csv", rows)
    print(f"results: {args.out}.csv")
    geo = {
        d: geomean([r["ratio"] for r in rows if r["status"] == "ok" and r["dtype"] == d])
        for d in args.dtypes
    }
    title = f"torch_convtranspose vs torch {torch.__version__} ({threads} threads, {cpu}); "
    if wide:
        title += "\ngeomean ratio " + ", ".join(f"{d} {g:.2f}" for d, g in geo.items())
    else:
        title += f"geomean ratio {geo['f32']:.2f}"
    print(write_plot(args.out + ".png", rows, title))
    lowp = [r for r in rows if r["dtype"] != "f32"]
    if any(r.get("ratio_vs_f32") is not None for r in lowp):
        geo32 = {
            d: geomean([r["ratio_vs_f32"] for r in lowp if r["status"] == "ok" and r["dtype"] == d])
            for d in args.dtypes
            if d != "f32"
        }
        title32 = (
            f"torch_convtranspose 16-bit vs its f32 ({threads} threads, {cpu})\ngeomean "
            + ", ".join(f"{d} {g:.2f}" for d, g in geo32.items())
        )
        print(
            write_plot(
                args.out + "_vs_f32.png",
                lowp,
                title32,
                key="ratio_vs_f32",
                ylabel="our f32 / ours",
                what="ratio = our f32 time / our 16-bit time (> 1: 16-bit faster)",
            )
        )
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def run_dtype(prob, prob32, f32_rows, args, peak, threads, prog, weight):
    """The rows of one (case, layout) in prob's dtype, one per pass."""
    c, lay = prob.case, prob.layout
    backend = torch_backend(prob.x_t, prob.w_t, prob.tp, c)
    wide = args.dtypes != ["f32"]
    rows = []
    for p in args.passes:
        label = f"{c.name} {p} {lay}" + (f" {prob.dtype}" if wide else "")
        prog.show(label)
        r = run_pass(prob, p, args, peak, prob32=prob32, f32_row=f32_rows.get(p))
        tp = prob.tp
        r.update(
            case=c.name,
            layout=lay,
            torch_backend=backend,
            threads=threads,
            peak_gflops=peak,
            gflop=c.flops * 1e-9,
            n=c.n,
            ic=c.ic,
            oc=c.oc,
            groups=c.groups,
            in_sp=c.in_sp,
            out_sp=c.out_sp,
            k=c.k,
            strides=c.strides,
            dilations=c.dil,
            pads_begin=c.pads_begin,
            pads_end=c.pads_end,
            output_padding=c.output_padding,
            torch_padding=tp.padding,
            torch_output_padding=tp.output_padding,
            torch_crop="yes" if tp.needs_crop else "",
            tags=",".join(c.tags),
            source=c.source,
        )
        r["pass"] = p
        rows.append(r)
        w = weight[id(c)] * (1.0 if prob.dtype == "f32" else 1.0 + (p not in f32_rows))
        prog.advance(w, label)
    return rows


if __name__ == "__main__":
    sys.exit(main())
