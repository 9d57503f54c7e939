"""Call plans (issue #20): each call of the ops builds one plan (route, layout
changes, workspace, the driver's own plan) and describe() prints it in one line.

The golden file test/golden/plans_calls.txt holds the plan of every benchmark
case (benchmarks/cases.py, full and quick) and of the memory benchmarks' long
signals and large tensors, for the three passes, NXC and NCX (each NCX path),
AVX2 and AVX-512, and 1, 2, 4 and 16 threads, built by dry runs
(plans(execute=False)). Equal plans mean equal work: a refactor must leave them
unchanged; a rule meant to change rewrites the file (TCT_UPDATE_GOLDEN=1) and
says so in its commit message. The route parts (the lines without the drivers'
`driver={...}`) are compared on their own too, so that a change inside a
driver shows as such."""

import os
import pathlib
import subprocess
import sys

import problems as P
import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "test" / "golden" / "plans_calls.txt"
BENCH_DIR = str(ROOT / "benchmarks")
ISAS = ("avx2", "avx512")
THREADS = (1, 2, 4, 16)
PASSES = ("fwd", "bwd_d", "bwd_w")


def _bench_modules():
    saved = list(sys.path)
    sys.path.insert(0, BENCH_DIR)
    try:
        import cases
        import memory
        import memory_bwd_weights
    finally:
        sys.path[:] = saved
    return cases, memory, memory_bwd_weights


# The golden plans hold the choices of no particular CPU (no AMD NCX rule, no
# Zen 3 tile speeds): pinned, so that they compare on any CPU with the ISAs.
UARCH = "generic"


def _golden_cases():
    """(case, layouts, ncx paths) to plan: the benchmark's cases in both layouts
    and every NCX path, the memory benchmarks' cases as they run there."""
    cases, memory, mbw = _bench_modules()
    try:
        bench = cases.all_cases() + cases.all_cases(quick=True)
    except SystemExit as e:  # the benchdnn descriptors are missing
        pytest.skip(str(e))
    out = [(c, ("nxc", "ncx"), ("auto", "planar", "channels_last")) for c in bench]
    for name, n, ic, oc, length, k, s, p in memory.MEM_CASES:
        out.append((cases.model(name, n, ic, oc, (length,), k, s, p), ("nxc", "ncx"), ("auto",)))
    for name, (n, ic, oc, sp, k, s, pads, df, path) in mbw.CASES.items():
        out.append((cases.model("bww_" + name, n, ic, oc, sp, k, s, pads), (df.lower(),),
                    (path or "auto",)))
    return out


def _kwargs(case, layout):
    return dict(strides=list(case.strides), pads_begin=list(case.pads_begin),
                pads_end=list(case.pads_end), dilations=list(case.dil),
                output_padding=list(case.output_padding), groups=case.groups,
                data_format=layout.upper(), weights_format="IOX")


def _call(case, layout, pass_, dtype=torch.float32):
    """One call of the pass on uninitialized tensors of the case's shapes."""
    kw = _kwargs(case, layout)
    e = lambda shape: torch.empty(shape, dtype=dtype)  # noqa: E731
    if pass_ == "fwd":
        torch.ops.graph.conv_transpose(e(case.src_shape(layout)), e(case.weights_shape), None,
                                       **kw)
    elif pass_ == "bwd_d":
        torch.ops.graph.conv_transpose_backward_data(
            e(case.dst_shape(layout)), e(case.weights_shape),
            src_shape=list(case.src_shape(layout)), **kw)
    else:
        torch.ops.graph.conv_transpose_backward_weights(
            e(case.src_shape(layout)), e(case.dst_shape(layout)),
            weights_shape=list(case.weights_shape), **kw)


def _isa_of(line):
    """The ISA field of a golden line ('case pass layout path isa tN: plan')."""
    return line.split(": ", 1)[0].split()[4]


def _plan_lines():
    # The ISAs this CPU has are compared (an AVX2-only CPU checks the avx2
    # lines): set_isa cannot force an ISA the CPU lacks.
    tct = P.tct()
    isas = [i for i in ISAS if i in tct.available_isas()]
    if not isas:
        pytest.skip(f"the golden plans need one of {', '.join(ISAS)} on this CPU")
    lines = []
    threads = torch.get_num_threads()
    try:
        for case, layouts, paths in _golden_cases():
            for pass_ in PASSES:
                for layout in layouts:
                    for path in paths if layout == "ncx" else ("auto",):
                        for isa in isas:
                            # the forced NCX paths change routes, not the threads' part
                            for t in THREADS if path == "auto" else (2,):
                                torch.set_num_threads(t)
                                with tct.use_isa(isa), tct.use_ncx_path(path), \
                                        tct.use_uarch(UARCH), tct.plans(execute=False) as got:
                                    _call(case, layout, pass_)
                                assert len(got) == 1, got
                                lines.append(f"{case.name} {pass_} {layout} {path} {isa} t{t}: "
                                             f"{got[0]}")
    finally:
        torch.set_num_threads(threads)
    return lines


def _routes_only(line):
    """The line without the drivers' own plans (driver={...}, driver_last={...})."""
    out, i = [], 0
    while True:
        found = [k for k in (line.find("driver={", i), line.find("driver_last={", i)) if k >= 0]
        if not found:
            return "".join(out) + line[i:]
        e = line.index("{", min(found))
        out.append(line[i:e] + "{...}")
        depth = 0
        while True:
            depth += {"{": 1, "}": -1}.get(line[e], 0)
            e += 1
            if depth == 0:
                break
        i = e


@pytest.fixture(scope="module")
def plan_lines():
    return _plan_lines()


def _golden(lines):
    """The golden lines of the ISAs in lines (TCT_UPDATE_GOLDEN=1: rewritten from
    lines first; the other ISAs' lines stay as they are, in their places)."""
    isas = {_isa_of(ln) for ln in lines}
    if os.environ.get("TCT_UPDATE_GOLDEN") == "1":
        old = GOLDEN.read_text().splitlines() if GOLDEN.exists() else []
        if {_isa_of(ln) for ln in old} <= isas:
            new = lines
        else:  # merge: each old line of a compared ISA replaced in order
            mine = iter(lines)
            new = [next(mine) if _isa_of(ln) in isas else ln for ln in old]
            assert next(mine, None) is None and len(new) == len(old), (
                "the plan list changed: rewrite the golden on a CPU with every ISA")
        GOLDEN.write_text("\n".join(new) + "\n")
    return [ln for ln in GOLDEN.read_text().splitlines() if _isa_of(ln) in isas]


def _first_difference(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"line {i + 1}:\n  got:  {g}\n  want: {w}"
    return f"{len(got)} lines, golden has {len(want)}"


def test_routes_match_golden(plan_lines):
    got = [_routes_only(line) for line in plan_lines]
    want = [_routes_only(line) for line in _golden(plan_lines)]
    assert got == want, _first_difference(got, want)


def test_plans_match_golden(plan_lines):
    want = _golden(plan_lines)
    if plan_lines != want and [_routes_only(ln) for ln in plan_lines] == [
            _routes_only(ln) for ln in want]:
        pytest.fail("only the drivers' own plans (driver={...}) differ from the golden, the "
                    "routes are the same; the drivers' goldens (test_plans_*.cpp) say whether "
                    "their work changed. " + _first_difference(plan_lines, want))
    assert plan_lines == want, _first_difference(plan_lines, want)


def test_routes_only_strips_drivers():
    line = "route=nxc ws_in=4 driver={conv a={x} b=1} driver_last={conv} last={route=x driver={y}}"
    assert _routes_only(line) == (
        "route=nxc ws_in=4 driver={...} driver_last={...} last={route=x driver={...}}")


# Small problems on every kind of route: planar, channels-last (view, transpose,
# copy), the strided 1x1 forms (gathered: 2**19 floats of diff_dst), NXC.
SMALL = [
    # (src NCX shape, OC, K, strides, pads, groups)
    ((2, 8, 12, 12), 4, (4, 4), (2, 2), (1, 1), 1),
    ((3, 16, 6, 7), 24, (3, 3), (1, 2), (1, 0), 2),
    ((2, 8, 64, 64), 16, (1, 1), (2, 2), (0, 0), 1),
    ((4, 256, 7, 7), 512, (1, 1), (2, 2), (0, 0), 1),
    ((1, 4, 300), 6, (3,), (3,), (0,), 1),
]


def _small_calls(tct, execute):
    """Every pass of SMALL in NXC, dense NCX, channels_last memory and a sliced NCX
    view; the plan lines and the results."""
    lines, results = [], []
    gen = torch.Generator().manual_seed(0)
    for shape, oc, k, s, pads, g in SMALL:
        S = len(k)
        x = torch.randint(-2, 3, shape, generator=gen).float()
        w = torch.randint(-2, 3, (shape[1], oc // g) + k, generator=gen).float()
        op = [1 if st > 1 else 0 for st in s]
        kw = dict(strides=list(s), pads_begin=list(pads), pads_end=list(pads),
                  dilations=[1] * S, output_padding=op, groups=g, weights_format="IOX")
        views = {"ncx": x, "nxc": x.movedim(1, -1).contiguous(),
                 "sliced": torch.cat([x, x], dim=-1)[..., : shape[-1]]}
        if S == 2:
            views["channels_last"] = x.contiguous(memory_format=torch.channels_last)
        for name, xv in views.items():
            fmt = "NXC" if name == "nxc" else "NCX"
            with tct.plans(execute=execute) as got:
                y = torch.ops.graph.conv_transpose(xv, w, None, data_format=fmt, **kw)
                dy = torch.ones_like(y) if execute else y
                dx = torch.ops.graph.conv_transpose_backward_data(
                    dy, w, src_shape=list(xv.shape), data_format=fmt, **kw)
                dw = torch.ops.graph.conv_transpose_backward_weights(
                    xv, dy, weights_shape=list(w.shape), data_format=fmt, **kw)
            assert len(got) == 3, got
            lines += got
            results += [y, dx, dw]
    return lines, results


def test_dry_run_plans_like_the_calls(tct):
    """plans(execute=True) records the same lines as the dry run, whose results
    are left unwritten."""
    ran, _ = _small_calls(tct, execute=True)
    dry, _ = _small_calls(tct, execute=False)
    assert ran == dry
    routes = " ".join(ran)
    for field in ("to_nxc=copy", "to_nxc=view", "to_nxc=transpose", "s1x1=gather",
                  "s1x1=expand"):
        if tct.get_isa() != "reference":
            assert field in routes, field


def test_plans_nest_and_collect_in_order(tct):
    x = torch.ones(1, 4, 5)
    w = torch.ones(4, 2, 3)
    kw = dict(strides=[2], pads_begin=[0], pads_end=[0], dilations=[1], data_format="NCX",
              weights_format="IOX")
    with tct.plans() as outer:
        torch.ops.graph.conv_transpose(x, w, None, **kw)
        with tct.plans(execute=False) as inner:
            y = torch.ops.graph.conv_transpose(x, w, None, **kw)
            torch.ops.graph.conv_transpose_backward_data(y, w, src_shape=[1, 4, 5], **kw)
        y = torch.ops.graph.conv_transpose(x, w, None, **kw)
    assert len(inner) == 2 and len(outer) == 4
    assert outer[1:3] == inner
    assert inner[1].startswith("pass=backward_data ")
    assert torch.equal(y, torch.nn.functional.conv_transpose1d(x, w, stride=2))


def test_bwd_weights_plan_is_the_gradient_layouts(tct):
    """A backward-weights plan line names the gradient's layout and shows the
    driver plan for it (the driver follows the gradient's strides: with the
    taps innermost, IOX, the tiles write a scratch that a final pass
    transposes; XOI takes them directly)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 8, 16, generator=gen)
    dy = torch.randn(2, 15, 15, 24, generator=gen)
    kw = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
              data_format="NXC")
    got = {}
    for wf, shape in (("IOX", [16, 24, 3, 3]), ("XOI", [3, 3, 24, 16])):
        with tct.plans() as lines:
            got[wf] = torch.ops.graph.conv_transpose_backward_weights(
                x, dy, weights_shape=shape, weights_format=wf, **kw)
        assert len(lines) == 1 and f" weights={wf} " in lines[0] + " ", lines
        if tct.get_isa() != "reference":
            assert ("taps_inner=1" if wf == "IOX" else "taps_inner=0") in lines[0], lines[0]
    w = torch.zeros(16, 24, 3, 3, requires_grad=True)
    y = torch.nn.functional.conv_transpose2d(x.permute(0, 3, 1, 2), w, stride=2, padding=1)
    (ref,) = torch.autograd.grad(y, w, dy.permute(0, 3, 1, 2))
    torch.testing.assert_close(got["IOX"], ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got["XOI"].permute(3, 2, 0, 1), ref, rtol=1e-4, atol=1e-4)


VERBOSE_SCRIPT = r"""
import sys, torch, torch_convtranspose as tct
x = torch.randn(2, 8, 6, 6, requires_grad=True)
w = torch.randn(8, 4, 3, 3, requires_grad=True)
kw = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
          output_padding=[1, 1], data_format="NCX", weights_format="IOX")
with tct.plans() as lines:
    y = torch.ops.graph.conv_transpose(x, w, None, **kw)    # forward
    y.sum().backward()                                       # backward-data, backward-weights
    torch.ops.graph.conv_transpose(x.detach().half(), w.detach().half(), None, **kw)
    torch.ops.graph.conv_transpose(x.detach().to("meta"), w.detach().to("meta"), None, **kw)
sys.stderr.flush()
print("\n".join(lines))
"""


def test_verbose_prints_one_plan_line_per_call():
    env = dict(os.environ, TORCH_CONVTRANSPOSE_VERBOSE="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", VERBOSE_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    prefix = "torch_convtranspose plan: "
    printed = [ln[len(prefix):] for ln in r.stderr.splitlines() if ln.startswith(prefix)]
    recorded = r.stdout.splitlines()
    assert len(printed) == 4, r.stderr  # the meta call has no plan
    assert printed == recorded
    assert [ln.split()[0] for ln in printed] == [
        "pass=forward", "pass=backward_data", "pass=backward_weights", "pass=forward"]
    assert "dtype=f16" in printed[3] and "route=convert16" in printed[3]
    assert "f32={pass=forward dtype=f32" in printed[3]


def test_verbose_off_by_default():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CONVTRANSPOSE_VERBOSE"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", VERBOSE_SCRIPT], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "torch_convtranspose plan:" not in r.stderr
    assert len(r.stdout.splitlines()) == 4


# bf16 on AMX (issue #21): the plans of every benchmark case, both layouts, three
# passes, 1 and 16 threads, on isa avx512_amx: which problems take the AMX tiles
# (amx={...}), their chunks, out16 and the drivers' plans. Recorded on an AMX CPU;
# skipped elsewhere (set_isa cannot force an ISA the CPU lacks).
GOLDEN_AMX = ROOT / "test" / "golden" / "plans_calls_bf16_amx.txt"


def test_bf16_amx_plans_match_golden():
    tct = P.tct()
    P.require_isa("avx512_amx")
    lines = []
    threads = torch.get_num_threads()
    try:
        for case, layouts, _ in _golden_cases():
            for pass_ in PASSES:
                for layout in layouts:
                    for t in (1, 16):
                        torch.set_num_threads(t)
                        with tct.use_isa("avx512_amx"), tct.use_ncx_path("auto"), \
                                tct.use_uarch(UARCH), \
                                tct.plans(execute=False) as got:
                            _call(case, layout, pass_, torch.bfloat16)
                        assert len(got) == 1, got
                        lines.append(f"{case.name} {pass_} {layout} t{t}: {got[0]}")
    finally:
        torch.set_num_threads(threads)
    if os.environ.get("TCT_UPDATE_GOLDEN") == "1":
        GOLDEN_AMX.write_text("\n".join(lines) + "\n")
    want = GOLDEN_AMX.read_text().splitlines()
    assert sum("amx={" in ln for ln in lines) > len(lines) // 3  # the route is exercised
    assert lines == want, _first_difference(lines, want)



def test_recent_plans_are_kept_per_input(tct):
    # The drivers keep a thread's last plans by every input of their builder
    # (plan_memo.h). Calls in an order where each differs from the one before
    # in one input only (op, ISA, uarch, threads, weights layout: the memo would
    # hand out the previous plan if that input were left out of its key): every
    # result exact against the plain-torch oracle (integer data) and every plan
    # line the one the same call gets with the memo flushed first (the plans of
    # other problems in between).
    def one_change_order(lists):  # reflected (Gray) order of the product
        if not lists:
            return [()]
        sub = one_change_order(lists[1:])
        return [(v,) + t for i, v in enumerate(lists[0])
                for t in (sub if i % 2 == 0 else sub[::-1])]

    g = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 4, (2, 6, 7, 5), generator=g).float()
    isas = [i for i in ISAS if i in tct.available_isas()]  # (runs them: this CPU's only)
    calls = [(isa, u, wf, nt, op) for op, isa, u, nt, wf in
             one_change_order([("fwd", "bwd_d", "bwd_w"), isas, ("zen3", "zen4", "intel_amx"),
                               (1, 2), ("IOX", "OIX")])]
    w = torch.randint(-3, 4, (6, 4, 3, 3), generator=g).float()
    attrs = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
                 groups=1, data_format="NXC")
    y_ncx = torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1)
    dy = torch.randint(-3, 4, y_ncx.shape, generator=g).float()
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    torch.nn.functional.conv_transpose2d(xd, wd, stride=2, padding=1).backward(dy.double())
    want = {"fwd": y_ncx.permute(0, 2, 3, 1), "bwd_d": xd.grad.float().permute(0, 2, 3, 1),
            "bwd_w": wd.grad.float()}

    def call(isa, u, wf, nt, op, n=2, execute=True):
        torch.set_num_threads(nt)
        wk = P.weights_from_iox(w, wf).contiguous()
        xn = x[:1].repeat(n, 1, 1, 1) if n != 2 else x
        dyn = dy[:1].repeat(n, 1, 1, 1) if n != 2 else dy
        x_nxc, dy_nxc = xn.permute(0, 2, 3, 1).contiguous(), dyn.permute(0, 2, 3, 1).contiguous()
        a = dict(attrs, weights_format=wf)
        with P.use_isa(isa), tct.use_uarch(u), tct.plans(execute=execute) as lines:
            if op == "fwd":
                got = torch.ops.graph.conv_transpose(x_nxc, wk, None, **a)
            elif op == "bwd_d":
                got = torch.ops.graph.conv_transpose_backward_data(
                    dy_nxc, wk, src_shape=list(x_nxc.shape), **a)
            else:
                got = P.weights_to_iox(torch.ops.graph.conv_transpose_backward_weights(
                    x_nxc, dy_nxc, weights_shape=list(wk.shape), **a), wf)
        return got, lines[0]

    old = torch.get_num_threads()
    try:
        fresh = {}
        for c in calls:
            for n in range(3, 9):  # six other problems through the memo first
                call(*c, n=n, execute=False)
            fresh[c] = call(*c, execute=False)[1]
        for c in calls:
            got, line = call(*c)
            assert torch.equal(got, want[c[4]]), c
            assert line == fresh[c], c
    finally:
        torch.set_num_threads(old)
