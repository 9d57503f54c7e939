#!/usr/bin/env python
"""Shared cores: how much slower ours and torch get while another process keeps a core busy.

    .venv/bin/python benchmarks/busy.py [--filter REGEX] [--passes ...] [--layouts ...]
        [--threads N] [--competitors K]

Per benchmark case, layout and pass, ours and torch are timed interleaved (median
per call) twice: quiet, and with K competing processes (default 1), each spinning on the
CPU (a busy loop, not pinned: the OS places it, as it would a user's other job). The
competitors are started once and paused (SIGSTOP) during the quiet phase. A case's
slowdown is busy / quiet, ours and torch's; the summary gives the geometric mean of
our slowdown / torch's slowdown (target #23: <= 1.15) per pass and layout, and the
worst cases. Both results are checked against each other in each phase.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import torch  # noqa: E402

SPIN = "while True:\n    pass\n"


def parse_args(argv=None):
    ap = bench.side_arg_parser(__doc__, budget=0.5)
    ap.add_argument("--competitors", type=int, default=1, help="busy processes (default 1)")
    return bench.side_args(ap, argv)


def time_median(fns, budget, min_rounds, max_rounds):
    """The median, not the minimum: with a competitor, the minimum finds the
    moments the scheduler left a call alone, which is not what a user sees."""
    return bench.time_rotated(fns, budget, min_rounds, max_rounds, stat=statistics.median)


class Competitors:
    """K busy processes, paused until resume()."""

    def __init__(self, k):
        self.procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(k)]
        time.sleep(0.2)
        self.pause()

    def pause(self):
        for p in self.procs:
            os.kill(p.pid, signal.SIGSTOP)

    def resume(self):
        for p in self.procs:
            os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.05)  # let the scheduler place them

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()


def main(argv=None):
    args = parse_args(argv)
    ops, pkg = bench.side_setup(args, f"{args.competitors} busy competitor(s); median per call")
    print(
        f"{'case':<30} {'lay':<4} {'pass':<5} {'torch quiet':>11} {'busy':>8} {'ours quiet':>10} "
        f"{'busy':>8} {'slow t':>6} {'slow o':>6} {'o/t':>5}"
    )
    gen = torch.Generator().manual_seed(args.seed)
    comp = Competitors(args.competitors)
    rows = []
    try:
        with torch.inference_mode():
            for case in bench.select_cases(args):
                for lay in args.layouts:
                    prob = bench.Problem(case, lay, ops, gen)
                    for pass_ in args.passes:
                        fns = {
                            "torch": getattr(prob, f"torch_{pass_}"),
                            "ours": getattr(prob, f"ours_{pass_}"),
                        }
                        ok, err = bench.compare(prob.ours_as_ncx(pass_, fns["ours"]()),
                                                fns["torch"]())
                        if not ok:
                            raise AssertionError(f"{case.name} {lay} {pass_}: {err:.3g}")
                        quiet = time_median(fns, args.budget, args.min_rounds, args.max_rounds)
                        comp.resume()
                        try:
                            busy = time_median(fns, args.budget, args.min_rounds,
                                                args.max_rounds)
                        finally:
                            comp.pause()
                        st, so = busy["torch"] / quiet["torch"], busy["ours"] / quiet["ours"]
                        print(
                            f"{case.name:<30} {lay:<4} {pass_:<5} {quiet['torch'] * 1e3:11.3f} "
                            f"{busy['torch'] * 1e3:8.3f} {quiet['ours'] * 1e3:10.3f} "
                            f"{busy['ours'] * 1e3:8.3f} {st:6.2f} {so:6.2f} {so / st:5.2f}",
                            flush=True,
                        )
                        rows.append((case.name, lay, pass_, st, so))
                    del prob
    finally:
        comp.close()
    print("\nsummary: slowdown = busy / quiet; o/t = our slowdown / torch's (target <= 1.15)")
    groups = sorted({(r[1], r[2]) for r in rows})
    for lay, p in groups + [("all", "all")]:
        sel = [r for r in rows if lay == "all" or (r[1] == lay and r[2] == p)]
        worst = max(sel, key=lambda r: r[4] / r[3])
        g_t = bench.geomean([r[3] for r in sel])
        g_o = bench.geomean([r[4] for r in sel])
        g_ot = bench.geomean([r[4] / r[3] for r in sel])
        print(
            f"  {p:<6} {lay:<4} n={len(sel):<4} torch {g_t:.2f}  ours {g_o:.2f}  o/t {g_ot:.3f}  "
            f"worst {worst[4] / worst[3]:.2f} ({worst[0]} {worst[1]} {worst[2]})"
        )
    return rows


if __name__ == "__main__":
    main()
