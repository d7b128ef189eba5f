"""How n-gram lookup acceptance depends on the suffix match (``engine.drafters.ngram.suffix_match_len``), on the
recorded traces: per workload and suffix-match length, the positions seen and the mean tokens an n-gram chain
(k=16, n=1..4) gets accepted there, replayed exactly. This is the evidence behind goodput's suffix-match buckets.

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
from tuner.traces import load_traces

LOOKUP = SpecConfig(method="ngram", k=16, min_n=1, max_n=4)
LONGEST = 9  # lengths from here on share a column


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parent / "results" / "traces")
    args = parser.parse_args()
    columns = [str(m) for m in range(LONGEST)] + [f"{LONGEST}+"]
    print("mean tokens accepted (positions) by suffix-match length")
    print(f"| workload | {' | '.join(columns)} |")
    print(f"|---|{'---|' * len(columns)}")
    for path in sorted(args.traces.glob("*.jsonl")):
        accepted: dict[int, list[int]] = defaultdict(list)
        for trace in load_traces(path):
            replay = ReplayTrace(trace)
            for p in range(replay.length):
                accepted[min(replay.suffix_match(p), LONGEST)].append(replay.step(p, LOOKUP).accepted)
        cells = [f"{sum(v) / len(v):.1f} ({len(v)})" if (v := accepted.get(m)) else "-" for m in range(LONGEST + 1)]
        print(f"| {path.stem} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
