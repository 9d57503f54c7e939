"""Threading: one OpenMP runtime in the process, and torch.set_num_threads is respected.
Each check runs in a fresh subprocess for isolation."""

import json
import subprocess
import sys
import textwrap

import problems as P
import pytest

_MAPS_SCRIPT = textwrap.dedent("""
    import json, os, re
    import torch
    import torch_convtranspose as m
    x = torch.randn(2, 8, 9, 9)
    w = torch.randn(8, 4, 3, 3)
    dy = torch.randn(2, 9, 9, 4)
    for isa in m.available_isas():
        m.set_isa(isa)
        torch.ops.graph.conv_transpose(x, w, None, strides=[2, 2], pads_begin=[1, 1],
            pads_end=[1, 1], dilations=[1, 1], data_format="NCX", weights_format="IOX")
        torch.ops.graph.conv_transpose_backward_weights(
            x.permute(0, 2, 3, 1), dy, strides=[1, 1], pads_begin=[1, 1], pads_end=[1, 1],
            dilations=[1, 1], weights_shape=[3, 3, 4, 8])
    libs = set()
    pat = re.compile(r"lib(gomp|iomp5|iomp|omp)([.-]|$)")
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and pat.search(os.path.basename(parts[5])):
                libs.add(os.path.realpath(parts[5]))
    print(json.dumps(sorted(libs)))
""")


def test_exactly_one_openmp_runtime_mapped():
    proc = subprocess.run([sys.executable, "-c", _MAPS_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=P.subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    libs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(libs) == 1, f"OpenMP runtimes mapped: {libs}"


_THREADS_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    import torch_convtranspose as m
    isa = sys.argv[1]
    m.set_isa(isa)
    g = torch.Generator().manual_seed(0)
    def ints(*shape):
        return torch.randint(-3, 4, shape, generator=g).float()
    x, w, dy = ints(4, 16, 12, 12), ints(16, 8, 3, 3), ints(4, 8, 25, 25)
    xr = torch.randn(4, 16, 12, 12, generator=g)
    wr = torch.randn(16, 8, 3, 3, generator=g)
    dyr = torch.randn(4, 8, 25, 25, generator=g)
    a = dict(strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1],
             output_padding=[0, 0], data_format="NCX", weights_format="IOX")
    def run(x, w, dy):
        return [torch.ops.graph.conv_transpose(x, w, None, **a),
                torch.ops.graph.conv_transpose_backward_data(dy, w, **a, src_shape=list(x.shape)),
                torch.ops.graph.conv_transpose_backward_weights(
                    x, dy, **a, weights_shape=list(w.shape))]
    def ntasks():
        return len(os.listdir("/proc/self/task"))
    # control: torch's own op with 1 thread creates no worker threads
    F.conv_transpose2d(xr, wr, stride=2)
    base = ntasks()
    r1 = run(x, w, dy)
    r1r = run(xr, wr, dyr)
    after1 = ntasks()
    torch.set_num_threads(2)
    r2 = run(x, w, dy)
    r2r = run(xr, wr, dyr)
    exact = all(torch.equal(a_, b_) for a_, b_ in zip(r1, r2))
    close = all(torch.allclose(a_, b_, atol=1e-4, rtol=1e-5) for a_, b_ in zip(r1r, r2r))
    print(json.dumps(dict(base=base, after1=after1, exact=exact, close=close,
                          threads=torch.get_num_threads())))
""")


@pytest.mark.parametrize("isa_name", P.isa_param_names())
def test_respects_set_num_threads(isa_name):
    P.require_isa(isa_name)
    proc = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, isa_name], capture_output=True,
                          text=True, timeout=300, env=P.subprocess_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["threads"] == 2
    assert r["exact"], "integer-valued results differ between 1 and 2 threads"
    assert r["close"], "results differ between 1 and 2 threads"
    assert r["after1"] == r["base"], (
        f"with torch.set_num_threads(1) the ops started threads: {r['base']} -> {r['after1']}")
