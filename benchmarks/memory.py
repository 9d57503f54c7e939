"""Extra memory of one call on long signals and large tensors, ours against torch's
(bench.py --memory; also used by test/test_memory.py).

Every measurement runs in a fresh process (python memory.py --child SPEC), so that
buffers an earlier call kept (per-thread workspaces, allocator caches) count against
the call that makes them: the figure is the peak RSS growth during the process's
first call of the op (VmHWM after minus VmHWM before, with free heap memory handed
back to the OS first), minus the result's size. A second call is measured too.

Cases (tag "mem"): 1D transposed convolutions of 2**22-2**23 src positions, one and a
few channels, k4 s4 and k16 s8, backward-data and forward, both layouts.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (name, n, ic, oc, length, k, s, p): torch-style padding p (graph pads (p, p)).
MEM_CASES = [
    ("mem_1d_1ch_k4s4_8M", 1, 1, 1, 1 << 23, 4, 4, 0),
    ("mem_1d_1ch_k16s8_4M", 1, 1, 1, 1 << 22, 16, 8, 4),
    ("mem_1d_4ch_k4s4_4M", 1, 4, 4, 1 << 22, 4, 4, 0),
    ("mem_1d_4ch_k16s8_4M", 1, 4, 4, 1 << 22, 16, 8, 4),
    ("mem_1d_16to8_k16s8_2M", 1, 16, 8, 1 << 21, 16, 8, 4),
]


def spec_of(case, layout, pass_, who, isa=None, threads=None, dtype="f32"):
    name, n, ic, oc, length, k, s, p = case
    return dict(
        dtype=dtype,
        name=name,
        n=n,
        ic=ic,
        oc=oc,
        length=length,
        k=k,
        s=s,
        p=p,
        layout=layout,
        pass_=pass_,
        who=who,
        isa=isa,
        threads=threads,
    )


def _vm_hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def _child(spec):
    """Runs in the fresh process: builds the tensors, measures two calls."""
    import torch
    import torch.nn.functional as F

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    libc = ctypes.CDLL("libc.so.6")
    n, ic, oc, L, k, s, p = (spec[x] for x in ("n", "ic", "oc", "length", "k", "s", "p"))
    out_len = (L - 1) * s - 2 * p + k
    gen = torch.Generator().manual_seed(0)
    # Integer values: exact sums whichever order they are added in.
    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    dt = dtypes[spec.get("dtype", "f32")]
    x = torch.randint(-2, 3, (n, ic, L), generator=gen).to(dt)
    w = torch.randint(-2, 3, (ic, oc, k), generator=gen).to(dt)
    gy = torch.randint(-2, 3, (n, oc, out_len), generator=gen).to(dt)
    esize = x.element_size()
    nxc = spec["layout"] == "nxc"
    pass_, who = spec["pass_"], spec["who"]
    kw = dict(
        strides=[s],
        pads_begin=[p],
        pads_end=[p],
        dilations=[1],
        output_padding=[0],
        groups=1,
        data_format="NXC" if nxc else "NCX",
        weights_format="IOX",
    )
    if who == "ours":
        import torch_convtranspose as tct

        if spec.get("isa"):
            tct.set_isa(spec["isa"])
        xo = x.movedim(1, -1).contiguous() if nxc else x
        gyo = gy.movedim(1, -1).contiguous() if nxc else gy
        if pass_ == "fwd":

            def fn():
                return torch.ops.graph.conv_transpose(xo, w, None, **kw)
        else:

            def fn():
                return torch.ops.graph.conv_transpose_backward_data(
                    gyo, w, src_shape=list(xo.shape), **kw
                )
    else:
        xt = x.movedim(1, -1).contiguous().movedim(-1, 1) if nxc else x
        gyt = gy.movedim(1, -1).contiguous().movedim(-1, 1) if nxc else gy
        if pass_ == "fwd":

            def fn():
                return F.conv_transpose1d(xt, w, None, stride=s, padding=p)
        else:

            def fn():
                return torch.ops.aten.convolution_backward(
                    gyt, xt, w, None, [s], [p], [1], True, [0], 1, [True, False, False]
                )[0]

    out_bytes = esize * (n * oc * out_len if pass_ == "fwd" else n * ic * L)
    res = {
        "out_mb": out_bytes / 2**20,
        "largest_mb": esize * max(n * ic * L, n * oc * out_len) / 2**20,
        "weights_mb": esize * w.numel() / 2**20,
    }
    with torch.inference_mode():
        for call in ("first", "second"):
            libc.malloc_trim(0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            base = _vm_hwm_kb()
            out = fn()
            peak = _vm_hwm_kb()
            res[call + "_mb"] = ((peak - base) * 1024 - out_bytes) / 2**20
            if call == "first" and spec.get("check"):
                xd, wd, gyd = x.double(), w.double(), gy.double()
                ref = (
                    F.conv_transpose1d(xd, wd, None, stride=s, padding=p)
                    if pass_ == "fwd"
                    else F.conv1d(gyd, wd, None, stride=s, padding=p)
                ).to(dt)
                got = out.movedim(-1, 1) if nxc else out
                res["exact"] = bool(torch.equal(got, ref))
            del out
    return res


def measure(spec, timeout=300):
    """Runs one measurement in a fresh process; returns its dict (or raises)."""
    env = dict(os.environ)
    # The caller's PYTHONPATH first (the build under test), then this checkout.
    env["PYTHONPATH"] = os.pathsep.join(x for x in (env.get("PYTHONPATH"), ROOT) if x)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    r = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({r.returncode}): {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_table(passes=("bwd_d", "fwd"), layouts=("nxc", "ncx"), filt=None, isa=None, threads=None,
              dtype="f32"):
    """Prints ours vs torch's extra memory per case; returns the rows."""
    import re

    rx = re.compile(filt) if filt else None
    print(
        "Extra memory per call (MiB; first call in a fresh process, then a second call), "
        "beyond inputs and result"
    )
    print(
        f"{'case':<24} {'pass':<6} {'lay':<4} {'largest':>8} {'ours 1st':>9} {'ours 2nd':>9} "
        f"{'torch 1st':>10} {'torch 2nd':>10}  ours/largest"
    )
    rows = []
    for case in MEM_CASES:
        if rx and not rx.search(case[0]):
            continue
        for pass_ in passes:
            for lay in layouts:
                r = {"case": case[0], "pass": pass_, "layout": lay}
                for who in ("ours", "torch"):
                    try:
                        m = measure(spec_of(case, lay, pass_, who, isa, threads, dtype))
                    except Exception as e:  # noqa: BLE001 (report, go on)
                        m = {"error": str(e)[-300:]}
                    r[who] = m
                o, t = r["ours"], r["torch"]
                if "error" in o or "error" in t:
                    print(
                        f"{case[0]:<24} {pass_:<6} {lay:<4} ERROR {o.get('error', '')} "
                        f"{t.get('error', '')}"
                    )
                else:
                    print(
                        f"{case[0]:<24} {pass_:<6} {lay:<4} {o['largest_mb']:8.0f} "
                        f"{o['first_mb']:9.1f} {o['second_mb']:9.1f} {t['first_mb']:10.1f} "
                        f"{t['second_mb']:10.1f}  {o['first_mb'] / o['largest_mb']:6.1%}"
                    )
                sys.stdout.flush()
                rows.append(r)
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(json.loads(sys.argv[2]))))
    else:
        import argparse

        ap = argparse.ArgumentParser(
            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        ap.add_argument("--passes", default="bwd_d,fwd")
        ap.add_argument("--layouts", default="nxc,ncx")
        ap.add_argument("--filter", default=None)
        ap.add_argument("--isa", default=None)
        ap.add_argument("--threads", type=int, default=None)
        ap.add_argument("--dtype", default="f32", choices=("f32", "bf16", "f16"))
        a = ap.parse_args()
        run_table(a.passes.split(","), a.layouts.split(","), a.filter, a.isa, a.threads, a.dtype)
