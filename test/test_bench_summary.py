"""benchmarks/bench.py's compute-bound summary: which cases count as deep, and the
median / minimum % of the FMA peak it prints (synthetic rows, hand-computed)."""

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
    return dict(case=case, pass_=pass_, layout=layout, ours_pct_peak=ours,
                torch_pct_peak=torch, tags=tags)


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
