"""benchmarks/bench.py's summaries on synthetic rows, hand-computed: the compute-bound
summary (which cases count as deep, the median / minimum % of the FMA peak), and --dtype
(#21 item 6): the per-dtype geomeans against torch and against our f32, the worst cases,
the row and CSV columns, the 16-bit check's tolerance, one tiny 16-bit run_pass."""

import pathlib
import sys

import pytest

BENCH_DIR = str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")


@pytest.fixture(scope="module")
def bench():
    saved = list(sys.path)
    sys.path.insert(0, BENCH_DIR)
    try:
        import bench as b
    finally:
        sys.path[:] = saved  # bench.py adds its folder too
    return b


def test_deep_tag(bench):
    cm = bench.cases_mod
    deep = cm._tags(cm.model("d", 1, 256, 128, (8, 8), 4, 2, 1))
    shallow = cm._tags(cm.model("s", 1, 256, 64, (8, 8), 4, 2, 1))
    grouped = cm._tags(cm.model("g", 1, 256, 256, (8, 8), 3, 1, 1, g=4))  # 64 per group
    assert "deep" in deep and "deep" not in shallow and "deep" not in grouped


def _row(case, pass_, layout, ours, torch, tags="2d,deep"):
    return dict(
        case=case, pass_=pass_, layout=layout, ours_pct_peak=ours, torch_pct_peak=torch, tags=tags
    )


def test_compute_bound_summary(bench):
    rows = [
        _row("a", "fwd", "nxc", 90.0, 80.0),
        _row("b", "fwd", "nxc", 70.0, 60.0),
        _row("c", "fwd", "nxc", 82.0, 99.0),
        _row("a", "bwd_d", "ncx", 50.0, 40.0),
        _row("x", "fwd", "nxc", 10.0, 5.0, tags="2d,tail"),  # not deep: left out
    ]
    for r in rows:
        r["pass"] = r.pop("pass_")
    lines = bench.compute_bound_summary(rows)
    assert "3 layers tagged deep" in lines[1]
    fwd = next(ln for ln in lines if ln.startswith("fwd    nxc"))
    assert fwd.split()[2:6] == ["3", "82.0", "80.0", "70.0"] and fwd.endswith(" b")
    bwd = next(ln for ln in lines if ln.startswith("bwd_d  ncx"))
    assert bwd.split()[2:6] == ["1", "50.0", "40.0", "50.0"]
    total = next(ln for ln in lines if ln.startswith("all"))
    # medians of (90, 70, 82, 50) and (80, 60, 99, 40); minimum 50 (a, bwd_d ncx)
    assert total.split()[1:5] == ["4", "76.0", "70.0", "50.0"]
    assert total.endswith("a bwd_d ncx")
    assert not any(ln.startswith("bwd_w") for ln in lines)
    assert bench.compute_bound_summary([rows[-1]]) == []


# ----------------------------------------------------------------- --dtype (#21 item 6)


def _trow(case, pass_, layout, ratio, dtype="f32", vs32=None, status="ok", **kw):
    """A hand-made timed row: ratio_med = ratio / 2, ratio_vs_f32_med = vs32 / 2."""
    r = dict(
        case=case,
        layout=layout,
        dtype=dtype,
        status=status,
        ratio=ratio,
        ratio_med=ratio / 2,
        ours_pct_peak=None if dtype != "f32" else 50.0,
        torch_pct_peak=None if dtype != "f32" else 40.0,
        tags="2d",
        max_rel_err=0.0,
    )
    r["pass"] = pass_
    if vs32 is not None:
        r.update(ratio_vs_f32=vs32, ratio_vs_f32_med=vs32 / 2)
    r.update(kw)
    return r


def _line(lines, prefix, after=None):
    """The first line starting with `prefix` (after the line `after` when given)."""
    start = lines.index(after) if after else 0
    return next(ln for ln in lines[start:] if ln.startswith(prefix))


def test_rescale_peak(bench):
    # A start reading of 100 GFLOP/s and one of 200 at the end: every %peak halves,
    # rows without one (16-bit) keep None, peak_gflops follows.
    rows = [
        dict(ours_pct_peak=80.0, torch_pct_peak=60.0, peak_gflops=100.0),
        dict(ours_pct_peak=None, torch_pct_peak=None, peak_gflops=100.0),
    ]
    assert bench.rescale_peak(rows, 100.0, 200.0) == 200.0
    assert rows[0] == dict(ours_pct_peak=40.0, torch_pct_peak=30.0, peak_gflops=200.0)
    assert rows[1] == dict(ours_pct_peak=None, torch_pct_peak=None, peak_gflops=200.0)


def test_parse_dtype(bench):
    assert bench.parse_args([]).dtypes == ["f32"]
    assert bench.parse_args(["--dtype", "all"]).dtypes == ["f32", "bf16", "f16"]
    assert bench.parse_args(["--dtype", "f16,bfloat16"]).dtypes == ["bf16", "f16"]
    assert bench.parse_args(["--dtype", "bf16"]).dtypes == ["bf16"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--dtype", "f64"])


def test_f32_summary_unchanged(bench):
    """Only f32 rows: today's summary, no dtype headings."""
    rows = [_trow("a", "fwd", "nxc", 2.0), _trow("b", "fwd", "nxc", 0.5)]
    lines = bench.summary(rows, None).split("\n")
    assert lines[1].startswith("Summary (ratio = torch time / our time")
    assert lines[2].split()[:4] == ["pass", "layout", "cases", "geomean"]
    fwd = _line(lines, "fwd    nxc")
    assert fwd.split()[2:7] == ["2", "1.000", "0.500", "0.500", "b"]
    assert lines[-1] == "All 2 results match torch (allclose rtol=0.001, atol=0.001*max|ref|)."
    assert not any(ln.startswith(("f32:", "bf16:", "f16:")) for ln in lines)
    # rows from before the dtype column (no "dtype" key) are f32
    for r in rows:
        del r["dtype"]
    assert bench.summary(rows, None).split("\n") == lines


def test_lowp_summary(bench):
    rows = [
        _trow("a", "fwd", "nxc", 2.0, "bf16", vs32=1.0),
        _trow("b", "fwd", "nxc", 0.5, "bf16", vs32=4.0),
        _trow("c", "bwd_w", "ncx", 1.0, "bf16", vs32=0.25),
        _trow("d", "bwd_w", "ncx", 4.0, "bf16"),  # no f32 time: out of the f32/o columns
    ]
    lines = bench.lowp_summary(rows, "bf16")
    assert lines[1].startswith("bf16: ratio = torch bf16 time / our bf16 time")
    fwd = _line(lines, "fwd    nxc").split()
    # cases, geomean, geo(med), min, min case, max | f32/o geomean, geo(med), min, min case
    assert fwd[2:] == ["2", "1.000", "0.500", "0.500", "b", "2.000", "2.000", "1.000", "1.000", "a"]
    bwd = _line(lines, "bwd_w  ncx").split()
    assert bwd[2:] == ["2", "2.000", "1.000", "1.000", "c", "4.000", "0.250", "0.125", "0.250", "c"]
    assert not any(ln.startswith(("fwd    ncx", "bwd_d")) for ln in lines)
    total = _line(lines, "all").split()
    # ratios (2, .5, 1, 4): geomean 4^(1/4); f32/o (1, 4, .25): geomean 1, worst .25
    assert total[1:] == ["4", "1.414", "0.707", "0.500", "4.000", "1.000", "0.500", "0.250"]
    assert _line(lines, "worst against torch bf16:").split()[-4:] == ["0.500", "b", "fwd", "nxc"]
    assert _line(lines, "worst against our f32:").split()[-4:] == ["0.250", "c", "bwd_w", "ncx"]
    assert not any("outside the tolerance" in ln for ln in lines)
    rows[0].update(torch_check="off", torch_max_rel_err=0.03)
    off = _line(bench.lowp_summary(rows, "bf16"), "torch's own bf16 results")
    assert "1 of 4" in off and "3.00e-02, a fwd nxc" in off
    assert bench.lowp_summary([], "f16")[-1] == "(no f16 result passed its check)"


def test_multi_dtype_summary(bench):
    rows = []
    for dt, k in (("f32", 1.0), ("bf16", 0.5), ("f16", 0.25)):
        vs32 = None if dt == "f32" else 2 * k
        rows += [
            _trow("a", "fwd", "nxc", 2.0 * k, dt, vs32=vs32),
            _trow("a", "bwd_d", "ncx", 3.0 * k, dt, vs32=vs32),
        ]
    rows.append(_trow("z", "fwd", "nxc", 0.01, "bf16", vs32=0.01, status="MISMATCH"))
    rows[-1]["max_rel_err"] = 0.5
    lines = bench.summary(rows, None).split("\n")
    heads = [ln.split(":")[0] for ln in lines if ln.startswith(("f32:", "bf16:", "f16:"))]
    assert heads == ["f32", "bf16", "f16"]
    # each dtype's own rows only; the failed bf16 row left out of the geomeans
    assert _line(lines, "fwd    nxc", after="f32: ratio = torch f32 time / our f32 time").split()[
        2:4
    ] == ["1", "2.000"]
    bf16 = lines.index(next(ln for ln in lines if ln.startswith("bf16:")))
    f16 = lines.index(next(ln for ln in lines if ln.startswith("f16:")))
    assert _line(lines[bf16:], "fwd    nxc").split()[2:4] == ["1", "1.000"]
    assert _line(lines[bf16:], "all").split()[1:3] == ["2", "1.225"]  # sqrt(1 * 1.5)
    assert _line(lines[f16:], "all").split()[1:3] == ["2", "0.612"]  # sqrt(.5 * .75)
    assert _line(lines[f16:], "all").split()[-3:] == ["0.500", "0.250", "0.500"]  # f32/o 0.5
    assert "!!! 1 FAILED CHECK(S) -- their timings are not meaningful:" in lines
    assert lines[-1] == "!!!   z fwd nxc bf16: MISMATCH max rel err 5.000e-01"
    ok = bench.summary([r for r in rows if r["case"] != "z"], None).split("\n")[-1]
    assert ok.startswith("All 6 results match: f32 against torch") and "bf16/f16" in ok


def test_format_row_dtype_columns(bench):
    r = _trow("a", "fwd", "nxc", 2.0, "bf16", vs32=0.5)
    r.update(
        torch_ms_min=2.0,
        torch_ms_med=2.0,
        ours_ms_min=1.0,
        ours_ms_med=1.0,
        ours_gflops=10.0,
        torch_gflops=5.0,
        torch_backend="MkldnnTranspose",
    )
    wide = bench.format_row(r, with_dtype=True).split()
    assert wide[3] == "bf16" and wide[8:10] == ["2.00", "0.50"]  # ratio, vs f32
    assert wide[12:14] == ["-", "-"] and wide[-1] == "ok"  # no %peak for 16-bit
    assert bench.format_row(r).split()[3] != "bf16"  # f32 run: today's columns
    line = bench.format_row(r, with_dtype=True)
    assert bench.HEADER_DT.index("check") == line.rindex("ok")  # columns line up
    r.update(torch_check="off", torch_max_rel_err=0.02)
    assert bench.format_row(r, True).endswith("ok (torch off: max rel err 2.00e-02)")


def test_csv_dtype_column(bench, tmp_path):
    import csv

    rows = [
        _trow("a", "fwd", "nxc", 2.0),
        _trow("a", "fwd", "nxc", 0.5, "bf16", vs32=0.25, ours_f32_ms_min=1.5),
    ]
    bench.write_csv(tmp_path / "r.csv", rows)
    with open(tmp_path / "r.csv") as f:
        head = f.readline().strip().split(",")
        f.seek(0)
        got = list(csv.DictReader(f))
    # today's columns first, in today's order; the new ones after "error"
    assert head[: head.index("error") + 1] == bench.CSV_FIELDS[: head.index("error") + 1]
    assert head.index("dtype") > head.index("error")
    assert [g["dtype"] for g in got] == ["f32", "bf16"]
    assert got[0]["ratio_vs_f32"] == "" and got[1]["ratio_vs_f32"] == "0.25"
    assert got[1]["ours_f32_ms_min"] == "1.5"


def test_lowp_check(bench):
    """compare_lowp: rounded once passes; rounded twice, NaN, wrong shape fail."""
    import torch

    g = torch.Generator().manual_seed(1)
    red = 4096
    for dt, tdt in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        terms = torch.randn(red, 4096, generator=g).to(tdt).float()
        a, b = terms[: red // 2].sum(0), terms[red // 2 :].sum(0)  # two halves
        ref = a + b
        assert bench.compare_lowp(ref.to(tdt), ref, dt, red)[0]
        assert bench.compare_lowp(terms.flip(0).sum(0).to(tdt), ref, dt, red)[0]  # f32 order
        twice = (a.to(tdt).float() + b.to(tdt).float()).to(tdt)
        assert not bench.compare_lowp(twice, ref, dt, red)[0]
        # the same, by hand: halves 4096.3 and -4096 (each rounds to 4096 in both dtypes)
        a, b = torch.tensor([4096.3, 1.0]), torch.tensor([-4096.0, 0.0])
        twice = (a.to(tdt).float() + b.to(tdt).float()).to(tdt)
        assert bench.compare_lowp((a + b).to(tdt), a + b, dt, 2)[0]
        assert not bench.compare_lowp(twice, a + b, dt, 2)[0]
        ref = ref[:64]
        nan = ref.to(tdt).clone()
        nan[3] = float("nan")
        assert not bench.compare_lowp(nan, ref, dt, red)[0]
        with pytest.raises(ValueError):
            bench.compare_lowp(ref[:5].to(tdt), ref, dt, red)
    big = torch.tensor([1e6, -1e6, 1.0])  # past f16's range: inf is right
    assert bench.compare_lowp(big.to(torch.float16), big, "f16", 1)[0]
    assert bench.lowp_tolerance("bf16", 1)[0] == 2.0**-7
    assert bench.lowp_tolerance("f16", 1)[0] == 2.0**-10
    assert bench.lowp_tolerance("f16", 10**6)[1] > bench.lowp_tolerance("f16", 1)[1]


def test_run_pass_lowp(bench):
    """One tiny case through run_pass in f32 and bf16 (plain-PyTorch stand-ins for our
    ops): the 16-bit row's check, tolerance and our f32 time, timed alongside or
    taken from the f32 row. No timing is asserted."""
    import types

    import torch

    saved = list(sys.path)
    sys.path.insert(0, BENCH_DIR)
    try:
        import stub_ops
    finally:
        sys.path[:] = saved
    args = types.SimpleNamespace(reps=2, warmup=1, budget=0.0, min_reps=1, no_memory=True)
    case = bench.cases_mod.model("t", 1, 8, 4, (5, 5), 4, 2, 1)
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        p32 = bench.Problem(case, "nxc", stub_ops, gen)
        p16 = p32.cast("bf16")
        assert p16.x_ours.dtype == torch.bfloat16 and p16.out_bytes("fwd") * 2 == p32.out_bytes(
            "fwd"
        )
        assert torch.equal(p16.x_ours.float(), p32.x_ours.to(torch.bfloat16).float())
        r32 = bench.run_pass(p32, "fwd", args, None)
        alone = bench.run_pass(p16, "fwd", args, None, prob32=p32)
        reuse = bench.run_pass(p16, "fwd", args, 100.0, prob32=p32, f32_row=r32)
    assert r32["status"] == "ok" and r32["dtype"] == "f32" and "ratio_vs_f32" not in r32
    for r in (alone, reuse):
        assert r["status"] == "ok" and r["dtype"] == "bf16"
        # torch's own bf16 kernel: within the tolerance where it sums in f32 (oneDNN); on
        # an AVX2 Zen 3 it rounds partial sums ("off", 0.44 % of max|ref| here).
        assert r["torch_check"] in ("ok", "off") and r["torch_max_rel_err"] < 0.02
        assert r["ratio_vs_f32"] > 0 and r["ours_pct_peak"] is None  # no %peak for 16-bit
        assert r["rtol"] == 2.0**-7
    assert alone["ours_f32_source"] == "interleaved"
    assert reuse["ours_f32_source"] == "f32 row"
    assert reuse["ours_f32_ms_min"] == r32["ours_ms_min"]


def test_onnxruntime_peer(bench):
    """The second peer (#23 item 4): onnxruntime's ConvTranspose on every quick case
    (crops, groups, dilation, depthwise, 1D, 3D) in both layouts, through run_pass
    with plain-PyTorch stand-ins for ours; its result must match torch's."""
    import types

    import torch

    if not bench.peers.available():
        pytest.fail("onnxruntime is in requirements-dev.txt and must be installed")
    saved = list(sys.path)
    sys.path.insert(0, BENCH_DIR)
    try:
        import stub_ops
    finally:
        sys.path[:] = saved
    args = types.SimpleNamespace(
        reps=2, warmup=1, budget=0.0, min_reps=1, no_memory=True, use_ort=True
    )
    gen = torch.Generator().manual_seed(0)
    cases = bench.cases_mod.all_cases(quick=True)
    assert any("crop" in c.tags for c in cases) and any(c.groups > 1 for c in cases)
    with torch.inference_mode():
        for case in cases:
            for lay in ("nxc", "ncx"):
                p = bench.Problem(case, lay, stub_ops, gen)
                r = bench.run_pass(p, "fwd", args, None)
                assert r["ort_check"] == "ok", (case.name, lay, r.get("ort_check"))
                assert r["ratio_ort"] == r["ort_ms_min"] / r["ours_ms_min"] > 0
                r = bench.run_pass(p, "bwd_d", args, None)  # forward only
                assert "ort_check" not in r and "ratio_ort" not in r


def test_peer_summary(bench):
    rows = [
        {"case": "a", "pass": "fwd", "layout": "nxc", "status": "ok", "ratio_ort": 2.0,
         "ort_check": "ok"},
        {"case": "b", "pass": "fwd", "layout": "nxc", "status": "ok", "ratio_ort": 0.5,
         "ort_check": "ok"},
        {"case": "c", "pass": "fwd", "layout": "ncx", "status": "ok", "ratio_ort": 4.0,
         "ort_check": "ok"},
        {"case": "d", "pass": "fwd", "layout": "ncx", "status": "ok",
         "ort_check": "MISMATCH (max rel err 1.00e+00)"},
    ]
    lines = bench.peer_summary(rows)
    by_layout = {ln.split()[0]: ln.split() for ln in lines[3:6]}
    assert by_layout["nxc"][1:5] == ["2", "1.000", "0.500", "b"]
    assert by_layout["ncx"][1:5] == ["1", "4.000", "4.000", "c"]
    assert by_layout["all"][1:3] == ["3", "1.587"]  # (2 * 0.5 * 4) ** (1/3)
    assert lines[-1] == "onnxruntime d ncx: MISMATCH (max rel err 1.00e+00)"
    assert bench.peer_summary([r for r in rows if r["case"] == "d"]) == []
