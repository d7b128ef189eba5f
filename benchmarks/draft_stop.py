"""Would a draft chain that stops once the draft is unsure pay? An estimate on the recorded traces, per workload.

A greedy draft chain from output position p matches the target's text for m tokens (``draft_rank`` 0) and drafts up
to k. Stopping at the first depth whose draft top probability (``draft_top_prob``, teacher-forced, so known exactly
on the true path, i.e. for depths up to m + 1) is below a threshold drafts fewer tokens and accepts min(m, depth).
Past the first miss the draft's confidence is not recorded, so such a chain is counted as drafting on to k (an upper
bound on its draft cost). Cost per step, in target steps: 1 for the verify (flat up to about 8 tokens on a native-bf16
CPU, ``benchmarks/results/engine_vs_hf.md``) plus ``--draft-cost`` per drafted token (the int8 draft: 0.13).

    .venv/bin/python benchmarks/draft_stop.py [--traces benchmarks/results/traces] [--draft-cost 0.135]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

from tuner.traces import Trace, TraceError, by_workload, load_traces

DEPTHS = (3, 4, 6, 8, 10)
THRESHOLDS = (0.0, 0.3, 0.5)


def simulate(traces: list[Trace], k: int, threshold: float) -> tuple[int, int, int]:
    """(tokens, steps, drafted tokens) of a greedy chain of depth k stopping below ``threshold``."""
    tokens = steps = drafted = 0
    for t in traces:
        rank, top, n = t.draft_rank, t.draft_top_prob, len(t.output_ids)
        p = 0
        while p < n:
            m = 0
            while m < k and p + m < n and rank[p + m] == 0:
                m += 1
            depth = next((d - 1 for d in range(2, min(k, m + 1, n - p) + 1) if top[p + d - 1] < threshold), k)
            p += min(m, depth) + 1
            steps += 1
            drafted += depth
        tokens += n
    return tokens, steps, drafted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parent / "results" / "traces")
    parser.add_argument("--draft-cost", type=float, default=0.135, help="one draft token, in target steps")
    args = parser.parse_args()
    try:
        groups = by_workload(t for t in load_traces(args.traces) if t.draft_rank is not None)
    except TraceError as exc:
        parser.error(f"--traces: {exc}")
    print("| workload | k | stop below | mean acceptance length | drafted per step | tokens per target step of cost |")
    print("|---|---|---|---|---|---|")
    for workload, traces in groups.items():
        for k in DEPTHS:
            for threshold in THRESHOLDS:
                tokens, steps, drafted = simulate(traces, k, threshold)
                print(f"| {workload} | {k} | {threshold:.1f} | {tokens / steps:.2f} | {drafted / steps:.2f} | "
                      f"{tokens / (steps + drafted * args.draft_cost):.2f} |")


if __name__ == "__main__":
    main()
