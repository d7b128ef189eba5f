"""Goodput variants against the committed policies table, in minutes: replays every cell of
``benchmarks/results/policies.json`` (main and held-out traces, the same request orders and waves of requests) with
each policy SPEC and scores it against that table's oracle, off and best global static. For trying a change to goodput
before the full ``benchmarks/policies.py`` run (which re-derives the oracle and checks replay against the live engine).

With ``--warm`` each policy first replays the same cell of the other prompt split (same batch size and request
order), then the scored cell: what a policy that has served the workload for a while makes, rather than one starting
cold on a cell of at most about 800 engine steps. (Each replay counts its steps from 1, as a new engine would; goodput
counts them on from the last.)

    .venv/bin/python benchmarks/goodput_ablation.py goodput goodput:prior=0.7 [--orders 4] [--warm | --again | --seeded]

With ``--again`` each policy replays the scored cell itself first: the same requests in the same order, so the second
replay, the one scored, starts from everything the first taught it.

With ``--seeded`` each policy first learns from the other prompt split's requests of the cell's workload, replayed at
batch 1 under draft k=8 and then n-gram k=8, so that every suffix-match bucket holds both methods' acceptance; then
it replays the scored cell. It shows what goodput makes when it starts knowing the acceptance
(the mixed cells are left out: their phases are other workloads).

With ``--waves N`` the cells hold N x B requests instead of the table's 8 x B (the mixed cells do not change): what
goodput makes once its learning is paid over a longer run. Off and the table's oracle config are then replayed on the
same cells, in every request order, and the ratios are to those. ``--only W:B,...`` replays just those cells.

    .venv/bin/python benchmarks/goodput_ablation.py goodput --waves 32 --only humaneval:4,math:2,math:4 --cells

With ``--pricing`` it checks instead how each goodput SPEC prices what it would choose between: per workload and batch
size of the main traces, each of a few static configs is replayed on a long cell (``--rounds`` times the batch size in
requests) while the controller's estimator (the SPEC's goodput) learns from every step, as from a live engine, and so
does the SPEC's deciding policy, whose suffix-match buckets the controller has not; then each one's price of that
config against off's is set beside the replay's ratio (the policy's is the one its batch's choice weighs).

    .venv/bin/python benchmarks/goodput_ablation.py --pricing goodput [--rounds 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

from policies.registry import build_policy  # noqa: E402
from tuner.controller.estimate import Estimator, build_estimator  # noqa: E402
from tuner.replay import filled, prepare, replay_cell  # noqa: E402

HERE = Path(__file__).resolve().parent
TARGET_RATIO = 0.97  # goodput >= 0.97x the per-cell oracle


def _policies_benchmark():
    """benchmarks/policies.py as a module (its name clashes with the ``policies`` package)."""
    spec = importlib.util.spec_from_file_location("policies_benchmark", HERE / "policies.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Seeding:
    """Runs ``static`` while ``policy`` decides beside it and is told the config that ran (as a wrapper holding a
    config tells it), so that it learns the static config's acceptance at the suffix matches the engine reports."""

    def __init__(self, static, policy) -> None:
        self.static, self.policy = static, policy
        self.reads_suffix_match = True

    def decide(self, ctx):
        config = self.static.decide(ctx)
        self.policy.decide(ctx)
        self.policy.overridden(ctx.request_id, config)
        return config

    def observe(self, stats) -> None:
        self.policy.observe(stats)


SEEDS = ("static:method=draft,k=8", "static:method=ngram,k=8")


def run(spec: str, cost, cell: tuple[str, int], cells: dict, warm_cells: dict | None, seed: list | None = None):
    """One replay of ``cell``, after one of ``warm_cells`` (the other split's, or these same cells) or after learning
    from ``seed`` requests at batch 1 under each of ``SEEDS``, when given."""
    policy = build_policy(spec, cost)
    if warm_cells is not None:
        replay_cell(warm_cells[cell], policy, cost, cell[1], spec)
    for static in SEEDS if seed is not None else ():
        replay_cell(seed, Seeding(build_policy(static, cost), policy), cost, 1, static)
    return replay_cell(cells[cell], policy, cost, cell[1], spec)


class Observed(Seeding):
    """Runs ``static`` while the controller's ``estimator`` learns from every step, as it does from a live engine,
    and the deciding ``policy`` (with its suffix-match buckets) beside it."""

    def __init__(self, static, estimator: Estimator, policy) -> None:
        super().__init__(static, policy)
        self.estimator, self.contexts = estimator, []

    def decide(self, ctx):
        self.contexts.append(ctx.step_context_len)
        return super().decide(ctx)

    def observe(self, stats) -> None:
        self.estimator.observe(stats, self.static.config)
        super().observe(stats)


def pricing(spec: str, cost, bench, groups: dict, rounds: int) -> None:
    """Per (workload, batch size, config): the replay's tokens/s against off's, the controller's price of the same,
    and the deciding policy's (the batch's choice, from the suffix-match buckets' estimates)."""
    options = build_estimator(spec, cost).options
    configs = [f"static:method=draft,k={k}" for k in (1, 2, 4)] + \
        [f"static:method=ngram,k={k},min_n={options.min_n},max_n={options.max_n}" for k in (2, 4)]
    errors: dict[tuple[str, str], list[float]] = {(who, method): [] for who in ("controller", "policy")
                                                  for method in ("draft", "ngram")}
    for workload in bench.WORKLOADS:
        for batch in bench.BATCH_SIZES:
            traces = filled(groups[workload], batch, rounds)
            off = replay_cell(traces, build_policy("static", cost), cost, batch, "static").tokens_per_s
            line = []
            for static in configs:
                observed = Observed(build_policy(static, cost), Estimator(build_estimator(spec, cost)),
                                    build_policy(spec, cost))
                replayed = replay_cell(traces, observed, cost, batch, static).tokens_per_s / off
                config, estimator, policy = observed.static.config, observed.estimator, observed.policy
                context = round(statistics.mean(observed.contexts))
                priced = estimator.score(workload, config, batch, context) \
                    / estimator.score(workload, estimator.policy.off, batch, context)
                decided = policy.expected_tokens_per_s(workload, config, batch, context) \
                    / policy.expected_tokens_per_s(workload, policy.off, batch, context)
                errors[("controller", config.method)].append(priced / replayed - 1.0)
                errors[("policy", config.method)].append(decided / replayed - 1.0)
                line.append(f"{config.method} k={config.k} {replayed:.3f}/{priced:.3f}/{decided:.3f}")
            print(f"{spec} {workload:<9} B={batch:<2} replayed/controller's/policy's price vs off: {', '.join(line)}",
                  flush=True)
    for (who, method), errs in errors.items():
        print(f"{spec}: {who}'s {method} priced/replayed - 1: median {statistics.median(errs):+.3f}, "
              f"median |.| {statistics.median(map(abs, errs)):.3f}, range {min(errs):+.3f} to {max(errs):+.3f}")


def _cells(text: str) -> set[tuple[str, int]]:
    """``W:B,...`` as (workload, batch size) cells."""
    cells = set()
    for item in text.split(","):
        workload, _, batch = item.strip().partition(":")
        if not workload or not batch.isdigit():
            raise ValueError(f"{item.strip()!r}: give WORKLOAD:BATCH_SIZE, e.g. humaneval:4")
        cells.add((workload, int(batch)))
    return cells


def _off_and_oracle(row: dict, by_order: list[dict], cost) -> tuple[float, float]:
    """Off's mean tokens/s over the request orders of ``row``'s cell, and the table's oracle config's against it."""
    from policies.static import StaticPolicy
    from tuner.replay.oracle import static_grid

    cell = (row["workload"], row["batch_size"])
    configs = {c.label(): c for c in static_grid([t.trace for t in by_order[0][cell]])}
    means = []
    for config in (configs["off"], configs[row["oracle_config"]]):
        runs = [replay_cell(cells[cell], StaticPolicy(config), cost, cell[1], "static") for cells in by_order]
        means.append(sum(r.tokens_per_s for r in runs) / len(runs))
    return means[0], means[1] / means[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="policy SPECs, e.g. goodput goodput:margin=0.05")
    parser.add_argument("--orders", type=int, default=4, help="request orders per cell (the table's: 4)")
    parser.add_argument("--cells", action="store_true", help="also print every cell's ratio to its oracle")
    parser.add_argument("--warm", action="store_true",
                        help="warm each policy on the other prompt split's same cell before the scored replay")
    parser.add_argument("--again", action="store_true",
                        help="replay each cell twice with the same policy and score the second replay")
    parser.add_argument("--seeded", action="store_true",
                        help="seed each policy with both methods' acceptance from the other prompt split first")
    parser.add_argument("--pricing", action="store_true",
                        help="compare each goodput SPEC's price of static configs with their replay instead")
    parser.add_argument("--rounds", type=int, default=8, help="--pricing: requests per cell, times the batch size")
    parser.add_argument("--waves", type=int, default=None,
                        help="requests per cell, times the batch size (default: the table's); off and the oracle "
                             "config are replayed again when it differs")
    parser.add_argument("--only", default=None, metavar="W:B,...", help="replay only these cells, e.g. humaneval:4")
    args = parser.parse_args()
    if args.orders < 1:
        parser.error("--orders: must be at least 1")
    if args.rounds < 1:
        parser.error("--rounds: must be at least 1")
    if args.warm + args.again + args.seeded + args.pricing > 1:
        parser.error("--warm, --again, --seeded and --pricing: choose one")
    if args.waves is not None and args.waves < 1:
        parser.error("--waves: must be at least 1")
    bench = _policies_benchmark()
    table = json.loads((bench.RESULTS / "policies.json").read_text())
    prompts, waves = table["meta"]["prompts"], args.waves or table["meta"]["waves"]
    rescored = waves != table["meta"]["waves"]
    try:
        only = _cells(args.only) if args.only else None
    except ValueError as exc:
        parser.error(f"--only: {exc}")
    unknown = sorted(only - {(r["workload"], r["batch_size"]) for r in table["cells"]}) if only else []
    if unknown:
        parser.error(f"--only: no cell {', '.join(f'{w}:{b}' for w, b in unknown)} in the table")
    cost = bench.cost_model(bench.Models())
    for spec in args.specs:
        try:
            build_estimator(spec, cost) if args.pricing else build_policy(spec, cost)
        except ValueError as exc:
            parser.error(str(exc))
    if args.pricing:
        groups = {w: bench.traces_for(w, slice(0, prompts), table["meta"]["new_tokens"], bench.Models(), bench.TRACES)
                  for w in bench.WORKLOADS}
        for spec in args.specs:
            pricing(spec, cost, bench, groups, args.rounds)
        return
    splits = (("main", bench.TRACES, "cells", slice(0, prompts)),
              ("held-out", bench.HELD_OUT, "held_out_cells", slice(prompts, 2 * prompts)))
    by_split, seeds = {}, {}
    baselines: dict[tuple[str, tuple[str, int]], tuple[float, float]] = {}  # (split, cell) -> off, oracle (--waves)
    for name, directory, _, picked in splits:
        groups = {w: bench.traces_for(w, picked, table["meta"]["new_tokens"], bench.Models(), directory)
                  for w in bench.WORKLOADS}
        by_split[name] = [{k: prepare(v) for k, v in bench.cells_for(bench.rotated(groups, o), waves).items()}
                          for o in range(args.orders)]
        if args.seeded:
            seeds[name] = {w: prepare(traces) for w, traces in groups.items()}
    for name, _, key, _ in splits:
        by_order = by_split[name]
        other = "held-out" if name == "main" else "main"
        warm_by_order = by_split[other] if args.warm else by_order if args.again else [None] * args.orders
        label = f"{name} warm" if args.warm else f"{name} again" if args.again else \
            f"{name} seeded" if args.seeded else name
        for spec in args.specs:
            ratios, misses, lowest, mixed = [], [], float("inf"), []
            for row in table[key]:
                cell = (row["workload"], row["batch_size"])
                if args.seeded and cell[0] == "mixed" or only is not None and cell not in only:
                    continue
                seed = seeds[other][cell[0]] if args.seeded else None
                runs = [run(spec, cost, cell, cells, warm, seed)
                        for cells, warm in zip(by_order, warm_by_order, strict=True)]
                if rescored and cell[0] != "mixed":  # once per cell, whatever the specs
                    if (name, cell) not in baselines:
                        baselines[(name, cell)] = _off_and_oracle(row, by_order, cost)
                    off, oracle = baselines[(name, cell)]
                else:
                    off, oracle = row["off_tokens_per_s"], row["oracle"]
                speedup = sum(r.tokens_per_s for r in runs) / len(runs) / off
                ratio = speedup / oracle
                ratios.append(ratio)
                if args.cells:
                    print(f"{label:<13} {spec}: {cell[0]} B={cell[1]} {ratio:.3f}x oracle, {speedup:.3f}x off")
                lowest = min(lowest, speedup)
                if ratio < TARGET_RATIO:
                    misses.append(f"{cell[0]} B={cell[1]} {ratio:.3f}")
                if cell[0] == "mixed":
                    mixed.append(f"{speedup / row['best_global_static']:.2f}")
            if not ratios:
                continue
            met = sum(r >= TARGET_RATIO for r in ratios)
            print(f"{label:<13} {spec}: >= {TARGET_RATIO}x oracle in {met}/{len(ratios)} cells, mean "
                  f"{sum(ratios) / len(ratios):.3f}; lowest vs off {lowest:.3f}; "
                  + (f"mixed vs best global static {' '.join(mixed)}; " if mixed else "")
                  + f"misses: {', '.join(misses) or 'none'}")


if __name__ == "__main__":
    main()
