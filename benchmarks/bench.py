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
Weights: weights_format="IOX" (torch's ConvTranspose weight layout). f32, forward with bias.

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

Summary: per pass and layout (and all together) the geometric mean of the ratios
(of the minima, and of the medians: geo(med)), the worst and best case, and the
geometric mean % of the FMA peak, ours and torch's; then, when the peak was
measured, for the compute-bound cases (tag "deep": 128+ channels per group on both
sides) the median and minimum % of the FMA peak, ours and torch's.

Exit status 1 if any result differs from torch's (or an op failed).
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import gc
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
    return ops, pkg, desc


def _active_isa(pkg):
    try:
        return str(torch.ops.torch_convtranspose.get_isa())
    except (AttributeError, RuntimeError):
        return os.environ.get("TORCH_CONVTRANSPOSE_ISA")


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
    """
    results = {k: f() for k, f in fns.items()}  # also the first warm-up call
    for _ in range(max(0, warmup - 1)):
        t0 = time.perf_counter()
        for f in fns.values():
            f()
        if time.perf_counter() - t0 > 1.0:  # slow: enough warm-up
            break
    samples = {k: [] for k in fns}

    def one_round():
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            samples[k].append(time.perf_counter() - t0)

    one_round()
    cap = reps if sum(s[0] for s in samples.values()) >= 0.005 else 20 * reps
    t_start = time.perf_counter()
    n = 1
    while n < cap and (n < min_reps or time.perf_counter() - t_start < budget):
        one_round()
        n += 1
    return results, samples


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
    """Tensors and the six callables of one (case, layout)."""

    def __init__(self, case, layout, ops, gen):
        self.case, self.layout = case, layout
        c = case
        tp = self.tp = cases_mod.torch_params(c)
        nsp = c.nsp
        x = torch.randn((c.n, c.ic) + c.in_sp, generator=gen)
        w = torch.randn(c.weights_shape, generator=gen) / math.sqrt(
            c.ic // c.groups * math.prod(c.k)
        )
        self.bias = torch.randn(c.oc, generator=gen)
        gy = torch.randn((c.n, c.oc) + c.out_sp, generator=gen)
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
        self.crop = (slice(None), slice(None)) + tuple(
            slice(b, b + n) for b, n in zip(tp.crop_start, tp.out_sp)
        )
        if tp.needs_crop:
            full = (
                torch.zeros((c.n,) + tp.torch_out_sp + (c.oc,)).movedim(-1, 1)
                if layout == "nxc"
                else torch.zeros((c.n, c.oc) + tp.torch_out_sp)
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

    def out_bytes(self, pass_):
        c = self.case
        n = {
            "fwd": c.n * c.oc * math.prod(c.out_sp),
            "bwd_d": c.n * c.ic * math.prod(c.in_sp),
            "bwd_w": math.prod(c.weights_shape),
        }[pass_]
        return 4 * n


def run_pass(prob, pass_, args, peak):
    c = prob.case
    f_t = getattr(prob, "torch_" + pass_)
    f_o = getattr(prob, "ours_" + pass_)
    row = {"status": "ok"}
    try:
        res, samples = time_pair(
            {"torch": f_t, "ours": f_o}, args.reps, args.warmup, args.budget, args.min_reps
        )
    except Exception as e:  # an op rejected the problem or crashed: report, go on
        msg = re.sub(r"\s+", " ", str(e))[:200]
        row.update(status="ERROR", error=f"{type(e).__name__}: {msg}")
        return row
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
        row[f"{who}_pct_peak"] = 100.0 * row[f"{who}_gflops"] / peak if peak else None
    row["reps"] = len(samples["ours"])
    row["ratio"] = row["torch_ms_min"] / row["ours_ms_min"]
    row["ratio_med"] = row["torch_ms_med"] / row["ours_ms_med"]
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


def format_row(r):
    if r["status"] == "ERROR":
        return f"{r['case']:<30} {r['pass']:<5} {r['layout']:<3} ERROR: {r['error']}"
    ms = lambda a, b: f"{_f(a, '.3f', 8)}/{_f(b, '.3f', 8)}"  # noqa: E731
    ex = r.get("ours_extra_mb")
    extra = "-" if ex is None else f"{ex:.2f} ({r['ours_extra_pct_out']:.0f}%)"
    check = (
        "ok"
        if r["status"] == "ok"
        else (f"<<< MISMATCH: {r.get('error') or 'max rel err %.2e' % r['max_rel_err']} >>>")
    )
    return (
        f"{r['case']:<30} {r['pass']:<5} {r['layout']:<3} "
        f"{ms(r['torch_ms_min'], r['torch_ms_med'])} {ms(r['ours_ms_min'], r['ours_ms_med'])} "
        f"{_f(r['ratio'], '.2f', 6)} {_f(r['ours_gflops'], '.1f', 9)} "
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


def summary(rows, peak):
    out = [
        "",
        "Summary (ratio = torch time / our time, min over reps; > 1: ours faster; "
        "results that failed the check are left out)",
    ]
    out.append(
        f"{'pass':<6} {'layout':<6} {'cases':>5} {'geomean':>8} {'geo(med)':>8} "
        f"{'min':>6}  {'min case':<30} {'max':>6} {'%peak ours':>10} {'%peak torch':>11}"
    )
    good = [r for r in rows if r["status"] == "ok"]  # wrong answers' timings don't count
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
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        out.append("")
        out.append(f"!!! {len(bad)} FAILED CHECK(S) -- their timings are not meaningful:")
        for r in bad:
            what = r.get("error") or f"max rel err {r['max_rel_err']:.3e}"
            out.append(f"!!!   {r['case']} {r['pass']} {r['layout']}: {r['status']} {what}")
    else:
        out.append(
            f"All {len(rows)} results match torch (allclose rtol={RTOL}, " f"atol={ATOL}*max|ref|)."
        )
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


def write_plot(path, rows, title):
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
    good = [r for r in rows if r["status"] == "ok"]
    if not good:
        return "no successful results: no plot written"
    names = list(dict.fromkeys(r["case"] for r in good))
    passes = [p for p in PASSES if any(r["pass"] == p for r in good)]
    layouts = [lay for lay in LAYOUTS if any(r["layout"] == lay for r in good)]
    val = {(r["case"], r["pass"], r["layout"]): r["ratio"] for r in good}
    width = 0.8 / len(layouts)
    colors = {"nxc": "tab:blue", "ncx": "tab:orange"}
    fig, axes = plt.subplots(
        len(passes),
        1,
        sharex=True,
        squeeze=False,
        figsize=(max(8.0, 2.0 + 0.32 * len(names)), 1.0 + 3.0 * len(passes)),
    )
    for ax, p in zip(axes[:, 0], passes):
        for j, lay in enumerate(layouts):
            xs = [i + (j - (len(layouts) - 1) / 2) * width for i in range(len(names))]
            ys = [val.get((n, p, lay), float("nan")) for n in names]
            ax.bar(xs, ys, width=width, color=colors[lay], label=lay)
        ax.axhline(1.0, color="red", linewidth=1.0, linestyle="--")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylabel(f"{p}: torch / ours")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    ax = axes[-1, 0]
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=75, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(names) - 0.4)
    axes[0, 0].set_title(title + "\nratio = torch time / our time (> 1: ours faster)", fontsize=9)
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
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
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

    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"torch {torch.__version__}, {desc}")
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
    print(
        f"{len(cs)} cases x passes {','.join(args.passes)} x layouts {','.join(args.layouts)}; "
        f"reps {args.min_reps}..{args.reps} within {args.budget}s, warm-up {args.warmup}"
    )
    print()
    print(HEADER)
    print(SUBHEADER)
    sys.stdout.flush()

    steps = [(c, lay) for c in cs for lay in args.layouts]
    weight = {id(c): c.flops + 5e7 for c in cs}
    prog = Progress(
        sum(weight[id(c)] * len(args.passes) for c, _ in steps), enabled=not args.no_progress
    )
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    t_start = time.time()
    with torch.inference_mode():
        for c, lay in steps:
            prog.show(f"{c.name} {lay} (setup)")
            gc.collect()  # once here, not in the measurements (it takes ~0.1 s)
            prob = Problem(c, lay, ops, gen)
            backend = torch_backend(prob.x_t, prob.w_t, prob.tp, c)
            case_rows = []
            for p in args.passes:
                prog.show(f"{c.name} {p} {lay}")
                r = run_pass(prob, p, args, peak)
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
                case_rows.append(r)
                prog.advance(weight[id(c)], f"{c.name} {p} {lay}")
            del prob
            prog.clear()
            for r in case_rows:
                print(format_row(r))
            sys.stdout.flush()
            rows.extend(case_rows)
    prog.clear()
    peak_end = fma_peak(pkg, threads)[0]
    if peak_end and peak and peak_end > 1.1 * peak:
        print(
            f"FMA peak measured again at the end: {peak_end:.1f} GFLOP/s (> 10% above the "
            "start's: the machine was busy; %peak columns use the start's value)"
        )
    print(summary(rows, peak))
    print(f"Total time: {time.time() - t_start:.1f} s")

    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    write_csv(args.out + ".csv", rows)
    print(f"results: {args.out}.csv")
    title = (
        f"torch_convtranspose vs torch {torch.__version__} ({threads} threads, {cpu}); "
        f"geomean ratio {geomean([r['ratio'] for r in rows if r['status'] == 'ok']):.2f}"
    )
    print(write_plot(args.out + ".png", rows, title))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
