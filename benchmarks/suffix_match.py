"""How n-gram lookup acceptance depends on the suffix match (``engine.drafters.ngram.suffix_match_len``), on the
recorded traces: per workload and suffix-match length, the positions seen and the mean tokens an n-gram chain
(k=16, n=1..4) gets accepted there, replayed exactly. This is the evidence behind goodput's suffix-match buckets.
The same for the draft model's chain (k=16), on traces recorded with one: its acceptance moves far less with the
suffix match than a lookup's.

    .venv/bin/python benchmarks/suffix_match.py [--traces benchmarks/results/traces]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

from engine.config import SpecConfig
from tuner.replay import ReplayTrace
from tuner.traces import TraceError, load_traces

DRAFTERS = {"n-gram lookup (k=16, n=1..4)": SpecConfig(method="ngram", k=16, min_n=1, max_n=4),
            "draft model (k=16 chain)": SpecConfig(method="draft", k=16)}
LONGEST = 9  # lengths from here on share a column


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parent / "results" / "traces")
    args = parser.parse_args()
    columns = [str(m) for m in range(LONGEST)] + [f"{LONGEST}+"]
    try:
        traces = load_traces(args.traces)
    except TraceError as exc:
        parser.error(f"--traces: {exc}")
    replays: dict[str, list[ReplayTrace]] = defaultdict(list)
    for trace in traces:
        replays[trace.workload].append(ReplayTrace(trace))
    for drafter, config in DRAFTERS.items():
        print(f"\n{drafter}: mean tokens accepted (positions) by suffix-match length")
        print(f"| workload | {' | '.join(columns)} |")
        print(f"|---|{'---|' * len(columns)}")
        for workload, traces in replays.items():
            if config.method == "draft" and any(r.rank is None for r in traces):
                continue  # recorded without a draft model
            accepted: dict[int, list[int]] = defaultdict(list)
            for replay in traces:
                for p in range(replay.length):
                    accepted[min(replay.suffix_match(p), LONGEST)].append(replay.step(p, config).accepted)
            cells = [f"{sum(v) / len(v):.1f} ({len(v)})" if (v := accepted.get(m)) else "-"
                     for m in range(LONGEST + 1)]
            print(f"| {workload} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
