"""How close a replay search of N trials gets to the best profile there is, on the committed traces and cost model.

For each workload of ``benchmarks/results/traces`` and each batch-size mix, ``tune`` runs N trials (``--seeds``
sampler seeds, each on a fresh SQLite study) and its best candidate's mix-weighted tokens/s is set against a
reference: every config of the replay oracle's static grid scored per batch size, the best config, or pair of configs
split at a batch size, by those buckets, then scored as a candidate (so the reference is exact replay too). Replay is
simulated time: the figures do not depend on the host, and a rerun gives the same ones.

    .venv/bin/python benchmarks/tune_search.py [--trials 30] [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

from policies.cost_model import CostModel  # noqa: E402
from storage import migrate  # noqa: E402
from storage.db import Database  # noqa: E402
from tuner.replay.oracle import static_grid  # noqa: E402
from tuner.traces import load_traces  # noqa: E402
from tuner.tuning.scoring import ReplayScorer, Score, spliced  # noqa: E402
from tuner.tuning.space import Candidate  # noqa: E402
from tuner.tuning.study import tune  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS = ("humaneval", "code-edit", "prose", "math")
MIXES = ({1: 1.0}, {1: 0.3, 2: 0.4, 8: 0.3}, {1: 0.2, 2: 0.2, 4: 0.3, 16: 0.3})


def reference(scorer: ReplayScorer, traces: list, mix: dict[int, float]) -> tuple[Candidate, Score]:
    """The best static config, or pair split at a batch size, of the oracle grid, chosen by per-batch-size buckets
    and then scored as a candidate."""
    scored = [(config, scorer.score(Candidate(config))) for config in static_grid(traces)]
    best = max(scored, key=lambda item: item[1].tokens_per_s)
    pick, top = Candidate(best[0]), best[1].tokens_per_s
    sizes = sorted(mix)
    for split in sizes[:-1]:
        low = max(scored, key=lambda item: sum(b.tokens_per_s * mix[b.batch_size] for b in item[1].buckets
                                               if b.batch_size <= split))
        high = max(scored, key=lambda item: sum(b.tokens_per_s * mix[b.batch_size] for b in item[1].buckets
                                                if b.batch_size > split))
        value = spliced(low[1], high[1], split, mix).tokens_per_s
        if value > top:
            pick, top = Candidate(low[0], high[0], split), value
    return pick, scorer.score(pick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if args.trials < 1 or args.seeds < 1:
        parser.error("--trials and --seeds must be at least 1")
    cost = CostModel.from_json((RESULTS / "policies_cost_model.json").read_bytes())
    ratios = []
    print(f"{args.trials} trials, seeds 0-{args.seeds - 1}: best found / reference (tokens/s over the mix)")
    for workload in WORKLOADS:
        traces = load_traces(RESULTS / "traces" / f"{workload}.jsonl")
        for mix in MIXES:
            scorer = ReplayScorer(traces, cost, mix)
            ref, ref_score = reference(scorer, traces, mix)
            found = []
            for seed in range(args.seeds):
                with tempfile.TemporaryDirectory() as tmp:
                    url = f"sqlite:///{tmp}/tune.db"
                    with Database(url) as db:
                        migrate.upgrade(db)
                    result = tune(workload, args.trials, storage_url=url, traces=traces, cost=cost, batch_mix=mix,
                                  seed=seed, progress=False)
                found.append(result.best[0]["values"][0] / ref_score.tokens_per_s)
            ratios += found
            label = ",".join(f"{b}:{w:g}" for b, w in mix.items())
            print(f"{workload:<10} mix {label:<24} reference {ref_score.tokens_per_s:7.2f} tok/s ({ref.label()}); "
                  f"found / reference {' '.join(f'{r:.3f}' for r in found)}")
    print(f"all: median {statistics.median(ratios):.3f}, lowest {min(ratios):.3f}, "
          f"{sum(r >= 0.99 for r in ratios)} of {len(ratios)} searches within 1%")


if __name__ == "__main__":
    main()
