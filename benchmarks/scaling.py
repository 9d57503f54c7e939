#!/usr/bin/env python
"""Thread scaling: ours and torch at 1, 2, 4, ... threads, in one process.

    .venv/bin/python benchmarks/scaling.py [--filter REGEX] [--passes ...] [--layouts ...]
        [--thread-list 1,2,4,8,16] [--mb N] [--csv PATH]

Per benchmark case (default: the compute-bound ones, tag "deep", and the depthwise
upsampler), layout and pass, ours and torch are timed interleaved (minimum per call)
at each thread count of --thread-list (default: powers of two up to the CPU count,
and the CPU count). Both follow torch.set_num_threads. Columns per thread count:
ms, GF/s, speed-up over the same op at the list's first thread count, and
torch min / ours min. The f32 FMA peak is measured at each thread count
(torch_convtranspose.fma_peak_gflops, best of 2), so %peak says how much of the
machine each op used. --mb overrides the batch size (--mb 1: batch-1 layers).
Results are checked against torch at every thread count.

The summary gives, per thread count, the geometric means of the speed-ups (ours,
torch), of the parallel efficiency (speed-up / (threads / first)) and of the ratio
to torch, and our median %peak on the cases run.
"""

from __future__ import annotations

import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None):
    ap = bench.side_arg_parser(__doc__, budget=0.4)
    ap.set_defaults(filter="deep|dw_up", min_rounds=3)
    ap.add_argument("--thread-list", default=None, help="comma list (default 1,2,4,.. ,ncpu)")
    ap.add_argument("--mb", type=int, default=None, help="override every case's batch size")
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    mb = args.mb
    args = bench.side_args(ap, argv)
    args.mb = mb
    if args.thread_list:
        args.thread_list = [int(t) for t in args.thread_list.split(",")]
    else:
        n = os.cpu_count() or 1
        ts = [1 << i for i in range(n.bit_length()) if (1 << i) <= n]
        args.thread_list = ts + ([n] if ts[-1] != n else [])
    if min(args.thread_list) < 1:
        ap.error(f"--thread-list: thread counts must be >= 1, got {args.thread_list}")
    return args


def measure(prob, pass_, args):
    fns = {"torch": getattr(prob, f"torch_{pass_}"), "ours": getattr(prob, f"ours_{pass_}")}
    ok, err = bench.compare(prob.ours_as_ncx(pass_, fns["ours"]()), fns["torch"]())
    if not ok:
        raise AssertionError(f"{prob.case.name} {prob.layout} {pass_}: max rel err {err:.3g}")
    return bench.time_rotated(fns, args.budget, args.min_rounds, args.max_rounds)


def main(argv=None):
    args = parse_args(argv)
    ts = args.thread_list
    ops, pkg = bench.side_setup(args, f"thread counts {ts}; minimum per call")
    peaks = {}
    for t in ts:
        torch.set_num_threads(t)
        peaks[t] = bench.fma_peak(pkg, t, tries=2)[0]
    print("f32 FMA peak GF/s: " + ", ".join(
        f"{t}t {peaks[t]:.0f}" if peaks[t] else f"{t}t ?" for t in ts))
    print(f"{'case':<30} {'lay':<4} {'pass':<5} {'thr':>3} {'torch ms':>9} {'ours ms':>9} "
          f"{'GF/s o':>7} {'%pk o':>6} {'up t':>5} {'up o':>5} {'t/o':>5}")
    gen = torch.Generator().manual_seed(args.seed)
    rows = []
    with torch.inference_mode():
        for case in bench.select_cases(args):
            for lay in args.layouts:
                prob = bench.Problem(case, lay, ops, gen)
                for pass_ in args.passes:
                    base = None
                    for t in ts:
                        torch.set_num_threads(t)
                        m = measure(prob, pass_, args)
                        base = base or m
                        gf = case.flops * 1e-9 / m["ours"]
                        r = {
                            "case": case.name, "layout": lay, "pass": pass_, "threads": t,
                            "torch_ms": m["torch"] * 1e3, "ours_ms": m["ours"] * 1e3,
                            "ours_gflops": gf,
                            "ours_pct_peak": 100 * gf / peaks[t] if peaks[t] else None,
                            "up_torch": base["torch"] / m["torch"],
                            "up_ours": base["ours"] / m["ours"],
                            "ratio": m["torch"] / m["ours"],
                        }
                        rows.append(r)
                        pk = f"{r['ours_pct_peak']:6.1f}" if peaks[t] else "     ?"
                        print(f"{case.name:<30} {lay:<4} {pass_:<5} {t:>3} {r['torch_ms']:9.3f} "
                              f"{r['ours_ms']:9.3f} {gf:7.1f} {pk} {r['up_torch']:5.2f} "
                              f"{r['up_ours']:5.2f} {r['ratio']:5.2f}", flush=True)
                del prob
    print_summary(rows, ts)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return rows


def print_summary(rows, ts):
    print(f"\nsummary (geomeans over {len(rows) // len(ts)} case-passes; speed-up over "
          f"{ts[0]} thread(s); efficiency = speed-up / {ts[0]}x threads)")
    print(f"  {'thr':>3} {'up torch':>8} {'up ours':>8} {'eff torch':>9} {'eff ours':>8} "
          f"{'t/o':>6} {'worst t/o':>9} {'med %pk o':>9}")
    for t in ts:
        sel = [r for r in rows if r["threads"] == t]
        pk = sorted(r["ours_pct_peak"] for r in sel if r["ours_pct_peak"] is not None)
        worst = min(sel, key=lambda r: r["ratio"])
        scale = t / ts[0]
        print(f"  {t:>3} {bench.geomean([r['up_torch'] for r in sel]):8.2f} "
              f"{bench.geomean([r['up_ours'] for r in sel]):8.2f} "
              f"{bench.geomean([r['up_torch'] for r in sel]) / scale:9.2f} "
              f"{bench.geomean([r['up_ours'] for r in sel]) / scale:8.2f} "
              f"{bench.geomean([r['ratio'] for r in sel]):6.3f} {worst['ratio']:9.2f} "
              f"{pk[len(pk) // 2] if pk else float('nan'):9.1f}   worst: {worst['case']} "
              f"{worst['layout']} {worst['pass']}")


if __name__ == "__main__":
    main()
