"""Which NCX path is fastest here: our ops on dense NCX tensors, timed through each path.

    .venv/bin/python benchmarks/ncx_paths.py [--filter REGEX] [--passes fwd,bwd_d,bwd_w]

Dense NCX problems run either planar (the planar_f32 kernels, in place) or through
the channels-last kernels with layout changes; planar_preferred() in
csrc/kernels/x86/planar_f32_common.cpp picks one per problem from rules measured on
a few CPUs. This prints, per benchmark case and pass, the time of each path
(torch_convtranspose.use_ncx_path: 'auto' = the rule's pick, 'planar',
'channels_last') and torch's, each result checked against torch's, and flags the
cases where the pick is more than --margin slower than the faster path: the rules'
inputs on a new CPU.

The callables run interleaved, one call each per round, in an order rotated every
round (the call right after torch's starts with colder caches, see bench.py), and
the minimum per callable is reported. Timings on shared machines move by 10-25 %
between runs: repeat a flagged case (--filter) before changing a rule.
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import torch  # noqa: E402

PATHS = ("auto", "planar", "channels_last")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--filter", default=None, help="regular expression on case name, tags or source"
    )
    ap.add_argument("--passes", default="fwd,bwd_d,bwd_w", help="comma list (default: all)")
    ap.add_argument("--quick", action="store_true", help="the benchmark's few small cases")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per case and pass")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=400)
    ap.add_argument(
        "--margin", type=float, default=0.1, help="flag picks slower than the best by this share"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        args.passes = [
            bench.PASS_ALIASES[p.strip().lower()] for p in args.passes.split(",") if p.strip()
        ]
    except KeyError as e:
        ap.error(f"unknown pass {e}; choose from {', '.join(bench.PASSES)}")
    args.mb = None  # bench.select_cases: the cases' own batch sizes
    return args


def main(argv=None):
    args = parse_args(argv)
    ops, pkg, desc = bench.load_ops(use_stub=False)
    bench._steady_heap()
    print(f"{desc}; {torch.get_num_threads()} threads; NCX, interleaved, min per call")
    cs = bench.select_cases(args)
    gen = torch.Generator().manual_seed(args.seed)
    print(
        f"{'case':<30} {'pass':<5} {'torch':>8} " + " ".join(f"{p:>13}" for p in PATHS) + "  faster"
    )
    rows = []
    for case in cs:
        prob = bench.Problem(case, "ncx", ops, gen)
        for pass_ in args.passes:
            ours = getattr(prob, f"ours_{pass_}")

            def via(path, ours=ours):
                def call():
                    with pkg.use_ncx_path(path):
                        return ours()

                return call

            fns = {"torch": getattr(prob, f"torch_{pass_}")}
            fns.update({p: via(p) for p in PATHS})
            ref = fns["torch"]()
            for p in PATHS:
                ok, err = bench.compare(fns[p](), ref)
                if not ok:
                    raise AssertionError(f"{case.name} {pass_} {p}: max rel err {err:.3g}")
            t = bench.time_rotated(fns, args.budget, args.min_rounds, args.max_rounds)
            fastest = min(t["planar"], t["channels_last"])
            flag = "  <- slower than the best" if t["auto"] > (1 + args.margin) * fastest else ""
            print(
                f"{case.name:<30} {pass_:<5} {t['torch'] * 1e3:8.3f} "
                + " ".join(f"{t[p] * 1e3:10.3f} ms" for p in PATHS)
                + f"  {'planar' if t['planar'] <= t['channels_last'] else 'channels_last'}{flag}",
                flush=True,
            )
            rows.append((case.name, pass_, t))
    return rows


if __name__ == "__main__":
    main()
