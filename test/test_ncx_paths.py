"""Dense NCX f32 tensors reach the kernels by one of two paths: the planar kernels
(in place, AVX-512 and AVX2) or transposes through channels-last
buffers. get_ncx_path / set_ncx_path / use_ncx_path and TORCH_CONVTRANSPOSE_NCX
choose; 'auto' picks per problem. Every path must give the oracle's values
exactly (integer data) on every ISA."""

import random
import subprocess
import sys

import problems as P
import pytest
import torch

PATHS = ["planar", "channels_last", "auto"]


def _problems(seed, n):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        p = P.random_problem(rng)
        p.data_format = "NCX"
        # Longer innermost lines than random_problem's, so that the planar
        # kernels run whole vectors, tails and several tiles.
        sp = list(p.src_sp)
        sp[-1] = rng.choice([sp[-1], rng.randint(7, 40)])
        p.src_sp = tuple(sp)
        if not P.is_valid(p):
            continue
        pb, pe = p.resolved_pads()  # explicit pads: the backward ops resolve auto_pad
        p.pads_begin, p.pads_end, p.auto_pad = tuple(pb), tuple(pe), "None"  # from diff_dst
        out.append(p)
    return out


# Layer shapes where 'auto' picks the planar kernels (few channels on one side,
# long lines; 1x1 stride 2; 2x2 stride 2) and the channels-last path.
LAYERS = [
    P.Problem(N=2, IC=64, OC=3, src_sp=(9, 40), K=(7, 7), strides=(2, 2), dilations=(2, 2),
              pads_begin=(3, 3), pads_end=(2, 2), output_padding=(1, 1), bias=True,
              name="rgb_k7s2d2"),
    P.Problem(N=2, IC=40, OC=48, src_sp=(5, 28), K=(1, 1), strides=(2, 2), dilations=(1, 1),
              pads_begin=(0, 0), pads_end=(0, 0), output_padding=(1, 1), name="1x1_s2"),
    P.Problem(N=1, IC=32, OC=16, src_sp=(6, 33), K=(2, 2), strides=(2, 2), dilations=(1, 1),
              pads_begin=(0, 0), pads_end=(0, 0), bias=True, name="k2s2_up"),
    P.Problem(N=1, IC=4, OC=36, src_sp=(300,), K=(3,), strides=(3,), dilations=(1,),
              pads_begin=(0,), pads_end=(0,), name="1d_k3s3"),
    P.Problem(N=9, IC=20, OC=16, src_sp=(1, 1), K=(4, 4), strides=(1, 1), dilations=(1, 1),
              pads_begin=(0, 0), pads_end=(0, 0), bias=True, name="z_to_4x4"),
    P.Problem(N=2, IC=64, OC=64, src_sp=(4, 4), K=(3, 3), strides=(2, 2), dilations=(1, 1),
              pads_begin=(1, 1), pads_end=(1, 1), output_padding=(1, 1), name="deep_small"),
    # 1x1 kernels with strides, whose forward 'auto' computes at src's resolution and
    # expands (the positions between the strided ones: bias only): pads that drop
    # src positions, output padding, stride 3 and 1 in 3D, groups, no bias.
    P.Problem(N=2, IC=24, OC=20, src_sp=(7, 13), K=(1, 1), strides=(2, 2), dilations=(1, 1),
              pads_begin=(1, 0), pads_end=(0, 1), output_padding=(1, 1), bias=True,
              name="1x1_s2_pads"),
    P.Problem(N=1, IC=16, OC=24, src_sp=(3, 4, 9), K=(1, 1, 1), strides=(2, 1, 3),
              dilations=(1, 1, 1), pads_begin=(0, 0, 1), pads_end=(0, 0, 0),
              output_padding=(1, 0, 2), name="1x1_3d_s213"),
    P.Problem(N=3, IC=16, OC=32, src_sp=(37,), K=(1,), strides=(2,), dilations=(1,),
              pads_begin=(0,), pads_end=(0,), output_padding=(1,), groups=2, bias=True,
              name="1x1_1d_g2"),
] + [  # pointwise forwards on the backward-data GEMM (route pointwise_gemm)
    P.Problem(N=2, IC=33, OC=40, src_sp=(9, 31), K=(1, 1), strides=(1, 1), dilations=(1, 1),
              pads_begin=(0, 0), pads_end=(0, 0), bias=True, name="pointwise"),
    P.Problem(N=1, IC=40, OC=64, src_sp=(300,), K=(1,), strides=(1,), dilations=(1,),
              pads_begin=(0,), pads_end=(0,), weights_format="OIX", name="pointwise_1d_oix"),
    P.Problem(N=3, IC=36, OC=33, src_sp=(3, 5, 7), K=(1, 1, 1), strides=(1, 1, 1),
              dilations=(1, 1, 1), pads_begin=(0, 0, 0), pads_end=(0, 0, 0), bias=True,
              name="pointwise_3d"),
]
POINTWISE = [p for p in LAYERS if p.name.startswith("pointwise")]

RANDOM = _problems(7, 40)


def _check(p, isa):
    x, w, b = P.problem_tensors(p, torch.float32, seed=3, integer=True)
    pb, pe = p.resolved_pads()
    attrs = dict(strides=list(p.strides), pads_begin=pb, pads_end=pe,
                 dilations=list(p.dilations), output_padding=list(p.op_full()),
                 groups=p.groups)
    w_iox = P.weights_to_iox(w, p.weights_format).double()
    want_y = P.oracle_forward(x.double(), w_iox, b.double() if b is not None else None,
                              **attrs)
    y = torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
    P.assert_result(y, want_y, torch.float32, exact=True)
    dy = P.diff_dst_tensor(p, torch.float32, seed=4, integer=True)
    want_dx = P.oracle_backward_data(dy.double(), w_iox, attrs["strides"], pb, pe,
                                     attrs["dilations"], p.groups, src_spatial=list(p.src_sp))
    dx = torch.ops.graph.conv_transpose_backward_data(dy, w, src_shape=p.src_shape(),
                                                      **p.attrs())
    P.assert_result(dx, want_dx, torch.float32, exact=True)
    want_dw = P.oracle_backward_weights(x.double(), dy.double(), p.w_shape_iox(),
                                        attrs["strides"], pb, pe, attrs["dilations"], p.groups)
    dw = torch.ops.graph.conv_transpose_backward_weights(x, dy, weights_shape=p.w_shape(),
                                                         **p.attrs())
    P.assert_result(dw, P.weights_from_iox(want_dw, p.weights_format).contiguous(),
                    torch.float32, exact=True)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("p", LAYERS + RANDOM, ids=lambda p: p.ident())
def test_ncx_paths_exact(tct, isa, path, p):
    with tct.use_ncx_path(path):
        _check(p, isa)


@pytest.mark.parametrize("vec_isa", [i for i in P.KNOWN_ISAS if i != "reference"])
@pytest.mark.parametrize("p", POINTWISE, ids=lambda p: p.name)
def test_pointwise_forward_runs_the_backward_data_gemm(tct, vec_isa, p):
    # A 1x1 stride-1 forward of one group is the backward-data GEMM of the
    # transposed problem (weights read transposed, bias added per row): the
    # planar kernels' pick for it, exact with bias, any weights format,
    # several chunks of positions per image (300, 279 > 256) and blocks of
    # output channels (N = 1). AVX2 only (heuristics P17, unmeasured with
    # AVX-512): other ISAs keep their routes, exact too.
    P.require_isa(vec_isa)
    x, w, b = P.problem_tensors(p, torch.float32, seed=3, integer=True)
    with P.use_isa(vec_isa), tct.use_ncx_path("auto"):
        with tct.plans() as lines:
            torch.ops.graph.conv_transpose(x, w, b, **p.attrs())
        if vec_isa == "avx2":
            assert " route=ncx_planar " in lines[0], lines[0]
            assert " route=pointwise_gemm " in lines[0], lines[0]
        else:
            assert " route=pointwise_gemm " not in lines[0], lines[0]
            assert " route=reference " not in lines[0], lines[0]
        _check(p, vec_isa)


def test_ncx_path_round_trip(tct):
    old = tct.get_ncx_path()
    assert old in PATHS
    try:
        for name in PATHS:
            tct.set_ncx_path(name.upper())
            assert tct.get_ncx_path() == name
    finally:
        tct.set_ncx_path(old)
    with tct.use_ncx_path("planar"):
        assert tct.get_ncx_path() == "planar"
    assert tct.get_ncx_path() == old


def test_ncx_path_unknown_name(tct):
    old = tct.get_ncx_path()
    with pytest.raises(RuntimeError, match="ncx path must be one of .*got 'transpose'"):
        tct.set_ncx_path("transpose")
    assert tct.get_ncx_path() == old


def test_ncx_path_environment_variable():
    code = "import torch_convtranspose as t; print(t.get_ncx_path())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=P.subprocess_env(TORCH_CONVTRANSPOSE_NCX="Channels_Last"),
                         check=True)
    assert out.stdout.strip() == "channels_last"


def test_ncx_paths_tool_times_checked_paths(tct, capsys):
    """benchmarks/ncx_paths.py (the planar-vs-channels-last rules' measurements)
    checks every path's result against torch before timing it, and restores the
    NCX path it started with."""
    import pathlib

    bench_dir = str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, bench_dir)
    try:
        import ncx_paths
    finally:
        sys.path.remove(bench_dir)
    old = tct.get_ncx_path()
    rows = ncx_paths.main(["--quick", "--filter", "q_ci_2d_oc_tail_gemm|q_dw_up", "--budget", "0",
                           "--min-rounds", "1", "--max-rounds", "2"])
    assert [(name, p) for name, p, _ in rows] == [
        (name, p) for name in ("q_dw_up_k4s2", "q_ci_2d_oc_tail_gemm")
        for p in ("fwd", "bwd_d", "bwd_w")]
    for _, _, t in rows:
        assert set(t) == {"torch", "auto", "planar", "channels_last"}
        assert all(0 < v < 10 for v in t.values())
    assert tct.get_ncx_path() == old
    assert "q_dw_up_k4s2" in capsys.readouterr().out
