"""Kernel selection API: available_isas / get_isa / set_isa and TORCH_CONVTRANSPOSE_ISA."""

import json
import subprocess
import sys

import problems as P
import pytest
import torch


def test_available_isas_list(tct):
    avail = tct.available_isas()
    assert isinstance(avail, list) and all(isinstance(n, str) for n in avail)
    assert "reference" in avail
    assert len(set(avail)) == len(avail)
    assert set(avail) <= set(P.KNOWN_ISAS), avail


def test_available_isas_match_cpu(tct):
    flags = P.cpu_flags()
    avail = tct.available_isas()
    if "avx512" in avail:
        assert "avx512f" in flags
    if "avx2" in avail:
        assert "avx2" in flags
    if "avx512_bf16" in avail:
        assert {"avx512_bf16", "avx512f"} <= flags
    if "avx512_amx" in avail:
        assert {"amx_tile", "amx_bf16", "avx512f"} <= flags
    if {"avx2", "fma"} <= flags:
        assert "avx2" in avail, f"CPU has avx2+fma but available_isas() = {avail}"
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        assert "avx512" in avail, f"CPU has AVX-512 but available_isas() = {avail}"


def test_set_get_isa_round_trip(tct):
    old = tct.get_isa()
    assert old in tct.available_isas()
    try:
        for name in tct.available_isas():
            tct.set_isa(name)
            assert tct.get_isa() == name
    finally:
        tct.set_isa(old)
    assert tct.get_isa() == old


def test_set_isa_unknown_name(tct):
    old = tct.get_isa()
    with pytest.raises((RuntimeError, ValueError)) as ei:
        tct.set_isa("sse9")
    assert "sse9" in str(ei.value)
    assert "reference" in str(ei.value)  # lists the accepted names
    assert tct.get_isa() == old


def test_set_isa_unavailable_name(tct):
    missing = [n for n in P.KNOWN_ISAS if n not in tct.available_isas()]
    if not missing:
        pytest.skip("every known ISA is available on this CPU")
    old = tct.get_isa()
    with pytest.raises((RuntimeError, ValueError)):
        tct.set_isa(missing[0])
    assert tct.get_isa() == old


_ENV_SCRIPT = """
import json, torch, torch_convtranspose as m
x = torch.ones(1, 2, 3); w = torch.ones(2, 2, 2)
y = torch.ops.graph.conv_transpose(x, w, None, strides=[1], pads_begin=[0], pads_end=[0],
    dilations=[1], data_format="NCX", weights_format="IOX")
print(json.dumps(dict(isa=m.get_isa(), avail=m.available_isas(), y=y.flatten().tolist())))
"""


@pytest.mark.parametrize("name", P.KNOWN_ISAS)
def test_env_var_selects_isa(name, tct):
    if name not in tct.available_isas():
        pytest.skip(f"{name} not available on this CPU")
    env = P.subprocess_env(TORCH_CONVTRANSPOSE_ISA=name)
    proc = subprocess.run([sys.executable, "-c", _ENV_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["isa"] == name
    assert r["y"] == [2.0, 4.0, 4.0, 2.0] * 2


def test_isa_fixture_restores(tct):
    old = tct.get_isa()
    with P.use_isa("reference"):
        assert tct.get_isa() == "reference"
        y = torch.ops.graph.conv_transpose(torch.ones(1, 1, 2), torch.ones(1, 1, 2), None,
                                           strides=[1], pads_begin=[0], pads_end=[0],
                                           dilations=[1], data_format="NCX",
                                           weights_format="IOX")
        assert y.flatten().tolist() == [1.0, 2.0, 1.0]
    assert tct.get_isa() == old


UARCHS = ["generic", "intel", "intel_avx512", "intel_amx", "zen2", "zen3", "zen4", "zen5"]


def test_uarch_detected_and_forced(tct):
    """The per-microarchitecture choices (#23): detected from CPUID, forced for a
    process (set_uarch / use_uarch / TORCH_CONVTRANSPOSE_UARCH) to try another CPU's."""
    assert tct.detected_uarch() in UARCHS
    before = tct.get_uarch()
    for u in UARCHS:
        with tct.use_uarch(u.upper()):
            assert tct.get_uarch() == u
    assert tct.get_uarch() == before
    with pytest.raises(RuntimeError, match="uarch must be one of .*got 'zen9'"):
        tct.set_uarch("zen9")
    assert tct.get_uarch() == before


def test_uarch_amd_ncx_rule_follows_the_forced_uarch(tct):
    """The AMD AVX-512 NCX rule is Zen 4 / Zen 5's: the plan's amd flag follows
    the forced uarch (plans only, on the AVX-512 kernels where the CPU has them)."""
    if "avx512" not in tct.available_isas():
        pytest.skip("the amd flag applies to the AVX-512 kernels only")
    x = torch.randn(1, 8, 6, 6)
    w = torch.randn(8, 4, 3, 3)
    kw = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
              data_format="NCX", weights_format="IOX")
    for u, amd in (("zen4", 1), ("zen5", 1), ("zen3", 0), ("intel_avx512", 0)):
        with tct.use_isa("avx512"), tct.use_uarch(u), tct.plans(execute=False) as lines:
            torch.ops.graph.conv_transpose(x, w, None, **kw)
        assert f" amd={amd} " in lines[0], (u, lines[0])


def test_uarch_environment_variable():
    code = "import torch_convtranspose as t; print(t.get_uarch(), t.detected_uarch())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=P.subprocess_env(TORCH_CONVTRANSPOSE_UARCH="Zen3"), check=True)
    forced, detected = out.stdout.split()
    assert forced == "zen3" and detected in UARCHS


@pytest.mark.parametrize("uarch, loads", [("intel_amx", True), ("intel", True),
                                           ("intel_avx512", False), ("generic", False),
                                           ("zen4", False)])
def test_uarch_picks_the_one_vector_tile_form(tct, uarch, loads):
    """Heuristics K3: the AVX-512 one-vector tiles broadcast every input from memory
    on Intel's AMX cores (Sapphire / Emerald Rapids) and take in-lane permutes
    elsewhere, Ice Lake-class Intel cores included (about one 512-bit load a cycle
    there). A 16-column forward and backward-weights: the plan names the form, and
    either form is exact against the f64 oracle on integer data (odd channel
    counts, so the reductions have tails)."""
    if "avx512" not in tct.available_isas():
        pytest.skip("the one-vector forms are AVX-512 tiles; this CPU lacks AVX-512")
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-3, 4, (2, 7, 9, 23), generator=g).float()   # NXC, 23 channels
    w = torch.randint(-3, 4, (23, 16, 3, 3), generator=g).float()  # IOX, 16 columns
    dy = torch.randint(-3, 4, (2, 13, 17, 16), generator=g).float()
    kw = dict(strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1], dilations=[1, 1],
              data_format="NXC", weights_format="IOX")
    with tct.use_isa("avx512"), tct.use_uarch(uarch), tct.plans() as lines:
        y = torch.ops.graph.conv_transpose(x, w, None, **kw)
        gw = torch.ops.graph.conv_transpose_backward_weights(x, dy, None,
                                                             weights_shape=list(w.shape), **kw)
    suffix = "l" if loads else ""
    assert f"tile=avx512_12x16{suffix} " in lines[0], lines[0]
    assert f"tile=bwd_weights_f32_gemm_avx512{suffix}_14x16 " in lines[1], lines[1]
    assert torch.equal(y.double(), P.ref_conv_transpose(x, w, **kw))
    assert torch.equal(gw.double(),
                       P.ref_conv_transpose_backward_weights(x, dy, weights_shape=list(w.shape),
                                                             **kw))
