#!/usr/bin/env python
"""Benchmark mode against the default plans: does timing the candidates beat the rules?

    .venv/bin/python benchmarks/benchmark_mode.py [--filter REGEX] [--passes ...]
        [--layouts nxc,ncx] [--dtype f32|bf16|f16] [--threads N]

Per benchmark case, layout and pass: torch, ours with the default plan (the rules'
pick) and ours in benchmark mode (torch_convtranspose.use_benchmark: the first call,
outside the timing, times the candidate plans and keeps the fastest), interleaved in
rotated order, the minimum per call. Both results are checked against torch's.
Columns: times in ms, default/tuned (> 1: benchmark mode faster), torch/tuned, and the
choice ('=' where it is the default). The summary gives the geometric means of
torch/default and torch/tuned per pass and layout, and the cases where benchmark
mode moved by more than 5 % either way. Targets (#23): never slower than the
default beyond noise, faster where the default picks wrong.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None):
    ap = bench.side_arg_parser(__doc__, budget=0.6)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    return bench.side_args(ap, argv)


def main(argv=None):
    args = parse_args(argv)
    ops, pkg = bench.side_setup(args, f"dtype {args.dtype}; interleaved, rotated, min per call")
    head = (
        f"{'case':<30} {'lay':<4} {'pass':<5} {'torch':>8} {'default':>8} {'tuned':>8} "
        f"{'def/tun':>7} {'t/tun':>6}  choice"
    )
    print(head)
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    pkg.clear_benchmark_cache()
    was_on = pkg.get_benchmark()
    switch = torch.ops.torch_convtranspose.set_benchmark
    for case in bench.select_cases(args):
        for lay in args.layouts:
            prob = bench.Problem(case, lay, ops, gen, dtype=args.dtype)
            for pass_ in args.passes:
                ours = getattr(prob, f"ours_{pass_}")

                # The same switch before each call of ours, so both pay its cost.
                def default(ours=ours):
                    switch(False)
                    return ours()

                def tuned(ours=ours):
                    switch(True)
                    return ours()

                fns = {"torch": getattr(prob, f"torch_{pass_}"), "default": default, "tuned": tuned}
                ref = prob.ours_as_ncx(pass_, fns["default"]())
                n_before = len(pkg.benchmark_results())
                out = prob.ours_as_ncx(pass_, tuned())  # the timing of the candidates
                entry = pkg.benchmark_results()[n_before:] or [None]
                ok, err = bench.compare(out, ref)
                if not ok:
                    raise AssertionError(f"{case.name} {lay} {pass_}: tuned vs default {err:.3g}")
                t = bench.time_rotated(fns, args.budget, args.min_rounds, args.max_rounds)
                e = entry[0]
                choice = "?"
                if e is not None:
                    default_label = next(iter(e["candidates"]))
                    choice = "=" if e["chosen"] == default_label else e["chosen"]
                r_def, r_tor = t["default"] / t["tuned"], t["torch"] / t["tuned"]
                print(
                    f"{case.name:<30} {lay:<4} {pass_:<5} {t['torch'] * 1e3:8.3f} "
                    f"{t['default'] * 1e3:8.3f} {t['tuned'] * 1e3:8.3f} {r_def:7.3f} "
                    f"{r_tor:6.2f}  {choice}",
                    flush=True,
                )
                rows.append((case.name, lay, pass_, t, choice))
            del prob
    switch(was_on)
    print("\nsummary (geometric means; torch/x > 1: ours faster)")

    groups = sorted({(lay, p) for _, lay, p, _, _ in rows})
    for lay, p in groups + [("all", "all")]:
        sel = [r for r in rows if (lay == "all" or (r[1] == lay and r[2] == p))]
        ts = [r[3] for r in sel]
        g_def = bench.geomean([t["torch"] / t["default"] for t in ts])
        g_tun = bench.geomean([t["torch"] / t["tuned"] for t in ts])
        d_t = [t["default"] / t["tuned"] for t in ts]
        print(
            f"  {p:<6} {lay:<4} n={len(sel):<4} torch/default {g_def:.3f}  torch/tuned {g_tun:.3f}"
            f"  default/tuned {bench.geomean(d_t):.3f} (min {min(d_t):.3f}, max {max(d_t):.3f})"
        )
    moved = [r for r in rows if abs(r[3]["default"] / r[3]["tuned"] - 1) > 0.05]
    for name, lay, p, t, choice in moved:
        r = t["default"] / t["tuned"]
        print(f"  moved: {name} {lay} {p}: default/tuned {r:.3f} ({choice})")
    return rows


if __name__ == "__main__":
    main()
