"""Benchmark mode (torch_convtranspose.set_benchmark / use_benchmark,
TORCH_CONVTRANSPOSE_BENCHMARK): the first call of a problem times the
candidate plans and keeps the fastest. Checked here without timing assertions:
every result is exact against the oracle on integer data, each problem is timed
once (later calls reuse the choice), the choice is the fastest candidate or
the default within the margin, every candidate is itself exact, dry runs time
nothing, and the cache file carries the choices to another process."""

import dataclasses
import json
import subprocess
import sys

import problems as P
import pytest
import torch

MARGIN = 0.03  # kTuningMargin (csrc/kernels/tune.h)

LAYERS = [
    # dense NCX: both NCX paths are candidates (and every ISA up to the active one)
    P.Problem(N=2, IC=32, OC=32, src_sp=(12, 12), K=(4, 4), strides=(2, 2), dilations=(1, 1),
              pads_begin=(1, 1), pads_end=(1, 1), bias=True, data_format="NCX",
              weights_format="IOX", name="ncx_k4s2"),
    P.Problem(N=1, IC=16, OC=3, src_sp=(9, 20), K=(3, 3), strides=(2, 2), dilations=(1, 1),
              pads_begin=(1, 1), pads_end=(1, 1), output_padding=(1, 1), bias=True,
              data_format="NCX", weights_format="IOX", name="ncx_rgb"),
    # channels-last: the ISAs only
    P.Problem(N=2, IC=24, OC=40, src_sp=(7, 9), K=(3, 3), strides=(1, 1), dilations=(1, 1),
              pads_begin=(1, 1), pads_end=(1, 1), data_format="NXC", weights_format="XOI",
              name="nxc_k3"),
]


def _run(p, dtype, seed=3):
    """The three passes of p on integer data, each checked exactly against the oracle."""
    x, w, b = P.problem_tensors(p, dtype, seed=seed, integer=True)
    dy = P.diff_dst_tensor(p, dtype, seed=seed + 1, integer=True)
    a = p.attrs()
    y = torch.ops.graph.conv_transpose(x, w, b, **a)
    P.assert_result(y, P.ref_conv_transpose(x, w, b, **a), dtype, exact=True)
    dx = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=p.src_shape(), **a)
    P.assert_result(dx, P.ref_conv_transpose_backward_data(dy, w, src_shape=p.src_shape(), **a),
                    dtype, exact=True)
    dw = torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=p.w_shape(), **a)
    P.assert_result(dw, P.ref_conv_transpose_backward_weights(x, dy, weights_shape=p.w_shape(),
                                                              **a), dtype, exact=True)


def _dtypes(tct):
    out = [torch.float32]
    if "avx512_amx" in tct.available_isas():
        out.append(torch.bfloat16)  # (on AMX, bf16 has the AMX tiles as a candidate)
    return out


@pytest.fixture
def bench(tct):
    """Benchmark mode on, with an empty cache and no file; the previous state after."""
    tct.clear_benchmark_cache()
    with tct.use_benchmark(True, cache_file=""):
        yield tct
    tct.clear_benchmark_cache()


@pytest.mark.parametrize("p", LAYERS, ids=lambda p: p.ident())
def test_exact_timed_once_and_fastest(bench, p):
    tct = bench
    for dtype in _dtypes(tct):
        tct.clear_benchmark_cache()
        _run(p, dtype)
        entries = tct.benchmark_results()
        assert len(entries) == 3  # one per pass
        for e, pass_ in zip(entries, ["forward", "backward_data", "backward_weights"]):
            assert f"pass={pass_} " in e["key"]
            assert e["source"] == "timed"
            c = e["candidates"]
            assert e["chosen"] in c
            if tct.get_isa() != "reference":
                assert len(c) >= 2, e  # at least avx512 and avx2, or two NCX paths
            default = next(iter(c))
            fastest = min(c, key=c.get)
            assert f"threads={torch.get_num_threads()}" in default, e
            if e["chosen"] != fastest:  # kept within the margin
                assert e["chosen"] == default and c[fastest] >= c[default] * (1 - MARGIN), e
            else:
                assert e["chosen"] == default or c[fastest] < c[default] * (1 - MARGIN), e
        # Later calls (other data, same problem) reuse the choices.
        _run(p, dtype, seed=11)
        assert tct.benchmark_results() == entries


@pytest.mark.parametrize("p", LAYERS, ids=lambda p: p.ident())
def test_every_candidate_exact(bench, p):
    """Each candidate plan, forced through use_isa / use_ncx_path, is exact too."""
    tct = bench
    _run(p, torch.float32)
    labels = {label for e in tct.benchmark_results() for label in e["candidates"]}
    threads = torch.get_num_threads()
    with tct.use_benchmark(False):
        for label in sorted(labels):
            fields = dict(f.split("=") for f in label.split())
            torch.set_num_threads(int(fields["threads"]))
            try:
                with tct.use_isa(fields["isa"]), tct.use_ncx_path(fields["ncx_path"]):
                    _run(p, torch.float32, seed=5)
            finally:
                torch.set_num_threads(threads)


def test_small_problems_try_fewer_threads(bench):
    """Below about 4M multiply-adds the candidates include one thread (and half
    the threads), with the same results."""
    tct = bench
    p = P.Problem(N=1, IC=8, OC=8, src_sp=(6, 6), K=(3, 3), strides=(1, 1), dilations=(1, 1),
                  pads_begin=(1, 1), pads_end=(1, 1), data_format="NXC", weights_format="XOI",
                  name="small")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _run(p, torch.float32)
    finally:
        torch.set_num_threads(threads)
    for e in tct.benchmark_results():
        labels = list(e["candidates"])
        assert any(label.endswith(" threads=1") for label in labels), e
        assert labels[0].endswith(" threads=2"), e


def test_plan_trace_shows_the_choice(bench):
    tct = bench
    p = LAYERS[0]
    x, w, b = P.problem_tensors(p, torch.float32, seed=3, integer=True)
    with tct.plans() as lines:
        torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
        torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
    (e,) = tct.benchmark_results()
    assert len(lines) == 2 and lines[0] == lines[1]
    for field in e["chosen"].split():  # "isa=... ncx_path=... threads=..."
        assert f" {field} " in lines[0]


def test_gradient_layouts_are_tuned_apart(bench):
    """Backward-weights calls that differ only in the gradient's layout have
    plans of their own (the driver follows the gradient's strides): each is
    timed and recorded under its own key, and each result is exact."""
    tct = bench
    p = LAYERS[2]
    x, _, _ = P.problem_tensors(p, torch.float32, seed=3, integer=True)
    dy = P.diff_dst_tensor(p, torch.float32, seed=4, integer=True)
    for wf in ("XOI", "IOX", "XOI", "IOX"):
        q = dataclasses.replace(p, weights_format=wf)
        a, shape = q.attrs(), q.w_shape()
        dw = torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=shape, **a)
        P.assert_result(dw, P.ref_conv_transpose_backward_weights(x, dy, weights_shape=shape, **a),
                        torch.float32, exact=True)
    keys = [e["key"] for e in tct.benchmark_results()]
    assert len(keys) == 2, keys
    assert sorted(k.split()[-1] for k in keys) == ["weights=IOX", "weights=XOI"], keys


def test_dry_run_times_nothing(bench):
    tct = bench
    p = LAYERS[0]
    x, w, b = P.problem_tensors(p, torch.float32, seed=3, integer=True)
    with tct.plans(execute=False) as lines:
        torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
    assert len(lines) == 1 and tct.benchmark_results() == []


def test_module_training_step(bench):
    """A drop-in module under benchmark mode: the same gradients as without it."""
    tct = bench
    torch.manual_seed(0)
    m = tct.ConvTranspose2d(16, 8, 4, stride=2, padding=1)
    with torch.no_grad():
        m.weight.copy_(torch.randint(-2, 3, m.weight.shape).float())
        m.bias.copy_(torch.randint(-2, 3, m.bias.shape).float())
    x = torch.randint(-2, 3, (2, 16, 10, 10)).float()

    def step():
        m.zero_grad()
        xr = x.clone().requires_grad_()
        y = m(xr)
        (y * y).sum().backward()
        return y.detach(), xr.grad, m.weight.grad.clone(), m.bias.grad.clone()

    tuned = step()
    assert len(tct.benchmark_results()) == 3
    with tct.use_benchmark(False):
        plain = step()
    for a, b in zip(tuned, plain):
        assert torch.equal(a, b)


def test_switches(tct):
    before = tct.get_benchmark()
    with tct.use_benchmark(True):
        assert tct.get_benchmark()
        with tct.use_benchmark(False):
            assert not tct.get_benchmark()
        assert tct.get_benchmark()
    assert tct.get_benchmark() == before


def test_malformed_cache_file(tct, tmp_path):
    bad = tmp_path / "cache.txt"
    bad.write_text("a key without a choice\n")
    with pytest.raises(RuntimeError, match=r"benchmark cache file .*cache.txt' line 1"):
        tct.set_benchmark(True, cache_file=str(bad))
    tct.set_benchmark(False)


_CHILD = """
import json, torch, torch_convtranspose as tct
x = torch.randint(-2, 3, (2, 32, 12, 12)).float()
w = torch.randint(-2, 3, (32, 32, 4, 4)).float()
kw = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
          data_format="NCX", weights_format="IOX")
with tct.plans() as lines:
    torch.ops.graph.conv_transpose(x, w, None, **kw)
print(json.dumps({"results": tct.benchmark_results(), "plan": lines[0]}))
"""


def test_cache_file_carries_choices(tmp_path):
    """TORCH_CONVTRANSPOSE_BENCHMARK / _FILE: the first process times and appends
    its choice to the file; the next one reads it and times nothing."""
    cache = tmp_path / "choices.txt"
    env = P.subprocess_env(TORCH_CONVTRANSPOSE_BENCHMARK="1",
                           TORCH_CONVTRANSPOSE_BENCHMARK_FILE=str(cache))

    def child():
        out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                             env=env, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = child()
    (e1,) = first["results"]
    assert e1["source"] == "timed"
    key, chosen = cache.read_text().strip().split("\t")
    assert key == e1["key"] and chosen == e1["chosen"]
    second = child()
    (e2,) = second["results"]
    assert e2["source"] == "file" and e2["chosen"] == e1["chosen"]
    assert second["plan"] == first["plan"]
    assert cache.read_text().count("\n") == 1  # nothing appended: nothing timed
