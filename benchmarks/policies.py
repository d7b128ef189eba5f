"""Policies on recorded traces: qwen2.5-coder-1.5b (target) + qwen2.5-coder-0.5b (draft), bf16, four workloads.

1. record traces (cached in benchmarks/results/traces/; reruns skip recording; the next prompts of each set go to
traces/held-out/ and get their own table), 2. calibrate the cost model (cached
in benchmarks/results/policies_cost_model.json), 3. replay per (workload, batch size): off, the best single global
static config, heuristic, goodput, bandit and the per-cell oracle, plus a phase-shifting mixed trace, 4. check the
replay against the live engine on a few cells, 5. write the table (md + json) and a plot of tokens/s vs k.

A cell at batch size B replays max(recorded, ``--waves`` x B) requests: the workload's recorded requests repeated in
order (each copy behaves exactly as recorded), so that B requests really run together, 8 batches' worth by default.
Every recorded output runs to the token limit, so off finishes each batch of requests in lockstep while speculating
requests finish unevenly, and once the queue is empty the batch drains through steps of fewer than B rows, which a
server under steady load would fill with new requests. In cells of 2B requests that drain weighed as much as the
policies' choices: in held-out HumanEval at B=4, one request order ran 61 of goodput's 189 steps below 4 rows, and
724 ms of the 767 ms it lost to off went in steps where no request speculated. So a cell's tokens/s counts only the
steps with all B rows (``tuner.replay.simulator``); the live check, whose live runs include their drain, compares
whole runs.
An online policy's run is one path through
many small decisions, and which requests share a step changes it: one request order can put a cell 10% above or
below another. So every cell is replayed in ``--orders`` request orders (the recorded list rotated) and a figure is
the mean over them; the oracle is the best static config by that mean among the order-0 grid's top
``ORACLE_FINALISTS`` (and off and the best global static).

    nice .venv/bin/python benchmarks/policies.py [--prompts 4] [--new-tokens 96] [--orders 4] [--waves 8] [--skip-live]
    nice .venv/bin/python benchmarks/policies.py --live-only [--live-dtype float32]   # the live check alone
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # this script shares its name with the ``policies`` package: import the package, not the script

RESULTS = Path(__file__).resolve().parent / "results"
TRACES = RESULTS / "traces"
HELD_OUT = TRACES / "held-out"  # the next prompts of each set: the policies' defaults were chosen on TRACES' alone
COST = RESULTS / "policies_cost_model.json"
TARGET, DRAFT, DTYPE = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "bfloat16"
WORKLOADS = ("humaneval", "code-edit", "prose", "math")
BATCH_SIZES = (1, 2, 4, 8, 16)
POLICIES = ("heuristic", "goodput", "bandit")
MIXED_CYCLES = 2
WAVES = 8  # a cell replays this many batches' worth of requests
ORACLE_FINALISTS = 5  # static configs of the order-0 grid replayed in every request order
LIVE_CELLS = (("code-edit", 4, "static:method=ngram,k=8"), ("humaneval", 2, "static:method=draft,k=4"),
              ("prose", 4, "static:method=off"), ("math", 1, "static:method=draft,k=2"), ("humaneval", 1, "goodput"),
              ("math", 2, "goodput"))


class Models:
    """Target and draft, loaded on first use (a rerun with cached traces and cost model loads nothing), in ``dtype``:
    the traces and the cost model are ``DTYPE``'s, while the live check may run in another (``--live-dtype``)."""

    def __init__(self, dtype: str = DTYPE) -> None:
        self.dtype = dtype
        self._pair = None

    def get(self):
        if self._pair is None:
            from engine.models import load_pair

            self._pair = load_pair(TARGET, DRAFT, self.dtype)
        return self._pair

    def for_recording(self):
        """The pair, for recording traces or calibrating, which only ``DTYPE`` may do: the tables price one engine."""
        if self.dtype != DTYPE:
            raise SystemExit(f"--live-dtype {self.dtype}: the traces and the cost model are recorded in {DTYPE}; "
                             f"run the benchmark once without --live-dtype")
        return self.get()


def traces_for(workload: str, prompts: slice, new_tokens: int, models: Models, directory: Path = TRACES) -> list:
    """Traces of the shipped prompts ``prompts`` of ``workload``, recorded once into ``directory``."""
    from tuner.record import encode_prompt, record
    from tuner.traces import TraceError, load_traces, write_traces
    from tuner.workloads import read_prompt_file, shipped_prompts

    records = read_prompt_file(shipped_prompts(workload))[prompts]
    path = directory / f"{workload}.jsonl"
    if path.exists():
        try:
            cached = load_traces(path)
            if [t.request_id for t in cached] == [r.id for r in records] and all(
                    t.max_new_tokens == new_tokens for t in cached):
                return cached
        except TraceError:
            pass
    target, draft = models.for_recording()
    started = time.perf_counter()
    traces = record(target, draft, workload, [r.id for r in records], [encode_prompt(target, r) for r in records],
                    new_tokens, rank_cap=16, max_batch=4, progress=True)
    print(f"recorded {workload}: {len(traces)} requests in {time.perf_counter() - started:.0f} s")
    directory.mkdir(parents=True, exist_ok=True)
    write_traces(path, traces)
    return traces


def cost_model(models: Models):
    from policies.cost_model import CostModel
    from tuner.calibrate import calibrate

    if COST.exists():
        return CostModel.from_json(COST.read_text())
    started = time.perf_counter()
    cost = calibrate(*models.for_recording(), progress=True)
    print(f"calibrated in {time.perf_counter() - started:.0f} s")
    COST.write_text(cost.to_json())
    return cost


def mixed(groups: dict[str, list], batch_size: int) -> list:
    """Phases of 2B requests of one workload at a time, cycling through the workloads; all labelled 'mixed' so a
    policy has to notice the shift from the statistics alone."""
    from tuner.replay import repeated

    phase = max(2 * batch_size, 4)
    out = []
    for cycle in range(MIXED_CYCLES):
        for workload in WORKLOADS:
            for t in repeated(groups[workload], phase, "mixed"):
                out.append(t.renamed(f"{workload}/{t.trace.request_id}/{cycle}"))
    return out


def rotated(groups: dict[str, list], order: int) -> dict[str, list]:
    """Each workload's recorded requests, the list rotated by ``order``."""
    return {w: traces[order % len(traces):] + traces[:order % len(traces)] for w, traces in groups.items()}


def cells_for(groups: dict[str, list], waves: int) -> dict[tuple[str, int], list]:
    from tuner.replay import filled, prepare

    groups = {w: prepare(traces) for w, traces in groups.items()}  # every cell shares each request's lookups
    cells = {(w, b): filled(groups[w], b, waves) for w in WORKLOADS for b in BATCH_SIZES}
    cells.update({("mixed", b): mixed(groups, b) for b in BATCH_SIZES})
    return cells


class PhaseStatic:
    """Each phase of the mixed trace on its workload's oracle config at this batch size (a request id starts with
    its workload): what a per-workload static profile could do there at best, switched exactly at phase edges."""

    def __init__(self, configs: dict[str, object]) -> None:
        self.configs = configs

    def decide(self, ctx):
        return self.configs[ctx.request_id.split("/", 1)[0]]

    def observe(self, stats) -> None:
        return None


def evaluate(groups: dict[str, list], cost, orders: int, waves: int) -> tuple[dict, dict, dict, int, dict]:
    """Per cell: the static grid on order 0 (off first), each policy in every request order, and the mean tokens/s
    over the orders of off, the best global static and the grid's finalists. Returns (order-0 grids, policy results
    by order, static means by grid index, the best global static's index, and per mixed cell the mean tokens/s of
    its phases each on its workload's oracle config)."""
    from policies.registry import build_policy
    from policies.static import StaticPolicy
    from tuner.replay import oracle_cell, prepare, replay_cell
    from tuner.replay.oracle import static_grid

    by_order = [{key: prepare(traces) for key, traces in cells_for(rotated(groups, o), waves).items()}
                for o in range(orders)]
    grids, policies, configs = {}, {}, {}
    for key, prepared in by_order[0].items():
        configs[key] = static_grid([t.trace for t in prepared])
        _, grids[key] = oracle_cell(prepared, cost, key[1], configs[key])
        policies[key] = {name: [replay_cell(cells[key], build_policy(name, cost), cost, key[1], name)
                                for cells in by_order] for name in POLICIES}
        print(f"replayed {key[0]} B={key[1]}")
    best = best_global_static(grids)
    statics = {}
    for key, grid in grids.items():
        finalists = sorted(range(len(grid)), key=lambda i: -grid[i].tokens_per_s)[:ORACLE_FINALISTS]
        statics[key] = {}
        for i in {0, best, *finalists}:
            policy = StaticPolicy(configs[key][i])
            runs = [grid[i]] + [replay_cell(cells[key], policy, cost, key[1], grid[i].policy) for cells in by_order[1:]]
            statics[key][i] = sum(r.tokens_per_s for r in runs) / len(runs)
    phased = {}
    for key in (k for k in grids if k[0] == "mixed"):
        oracles = {w: configs[(w, key[1])][max(statics[(w, key[1])], key=statics[(w, key[1])].get)]
                   for w in WORKLOADS}
        runs = [replay_cell(cells[key], PhaseStatic(oracles), cost, key[1], "phase oracle") for cells in by_order]
        phased[key] = sum(r.tokens_per_s for r in runs) / len(runs)
    return grids, policies, statics, best, phased


def best_global_static(grids: dict) -> int:
    """Index of the static config with the best geometric-mean speedup over off across the per-workload cells."""
    keys = [k for k in grids if k[0] != "mixed"]
    n = len(grids[keys[0]])

    def score(i: int) -> float:
        return sum(math.log(grids[k][i].tokens_per_s / grids[k][0].tokens_per_s) for k in keys) / len(keys)

    return max(range(n), key=score)


def decode_seconds(engine, requests) -> tuple[dict, float]:
    """Run ``requests`` live; decode wall time = all step time minus the prefills done while admitting."""
    for r in requests:
        engine.add(r)
    tokens = {r.request_id: [] for r in requests}
    first_step, prefill, total = {}, {}, 0.0
    step = 0
    while engine.has_work():
        step += 1
        started = time.perf_counter()
        outs = engine.step()
        total += time.perf_counter() - started
        for o in outs:
            first_step.setdefault(o.request_id, step)
            tokens[o.request_id] += o.new_token_ids
            if o.finished:
                prefill[first_step[o.request_id]] = o.summary.prefill_s
    return tokens, total - sum(prefill.values())


def live_check(groups: dict, cost, models: Models) -> list[dict]:
    """Each cell's replay prediction against a live run. The host's speed drifts between calibration and the live
    run, so the forwards, the step overhead and the n-gram lookup are also timed again right before and after each
    live run, at the batch sizes up to its own (``tuner.calibrate.retime``), and the same replay (the policy still
    built on the calibrated model, so it decides the same) is priced with each; "predicted now" is the mean of the
    two."""
    from engine.engine import Request, SpecEngine
    from engine.models.identity import hardware_fingerprint
    from engine.sampling import SamplingParams
    from policies.registry import build_policy
    from tuner.calibrate import retime
    from tuner.replay import replay_cell

    target, draft = models.get()
    rows = []
    for workload, batch, spec in LIVE_CELLS:
        traces = groups[workload]
        predicted = replay_cell(traces, build_policy(spec, cost), cost, batch, spec)
        engine = SpecEngine(target, draft, policy=build_policy(spec, cost), max_batch=batch)  # a fresh copy
        requests = [Request(t.request_id, list(t.prompt_ids), SamplingParams(max_new_tokens=t.max_new_tokens))
                    for t in traces]
        before = retime(cost, target, draft, batch)
        tokens, seconds = decode_seconds(engine, requests)
        now = sum(replay_cell(traces, build_policy(spec, cost), model, batch, spec).job_tokens_per_s
                  for model in (before, retime(cost, target, draft, batch))) / 2
        emitted = sum(len(v) for v in tokens.values())
        same = sum(tokens[t.request_id] == list(t.output_ids) for t in traces)
        label = spec.removeprefix("static:method=").replace(",k=", " k=")
        row = {"workload": workload, "batch_size": batch, "config": label,
               "predicted_tokens_per_s": predicted.job_tokens_per_s, "live_tokens_per_s": emitted / seconds,
               "predicted_now_tokens_per_s": now,
               "predicted_steps": predicted.steps, "live_steps": engine.step_count,
               "outputs_identical_to_trace": f"{same}/{len(traces)}", "dtype": models.dtype,
               "host": hardware_fingerprint(target.device)}
        row["live_over_predicted"] = row["live_tokens_per_s"] / row["predicted_tokens_per_s"]
        row["live_over_predicted_now"] = row["live_tokens_per_s"] / now
        print(f"live {workload} B={batch} {label}: predicted {predicted.job_tokens_per_s:.2f} tok/s ({now:.2f} with "
              f"forwards timed around the live run), live {row['live_tokens_per_s']:.2f} tok/s")
        rows.append(row)
    return rows


def kept_live(groups: dict, cost) -> list[dict]:
    """The saved live check, provided the replay still predicts each of its cells exactly as when it ran (same steps
    and tokens/s): a change to a policy that leaves those cells alone does not need the models to be run again."""
    from policies.registry import build_policy
    from tuner.replay import replay_cell

    path = RESULTS / "policies.json"
    saved = json.loads(path.read_text())["live"] if path.exists() else []
    if len(saved) != len(LIVE_CELLS):
        raise SystemExit(f"--keep-live: {path} holds no live check of these {len(LIVE_CELLS)} cells; run it")
    for (workload, batch, spec), row in zip(LIVE_CELLS, saved, strict=True):
        predicted = replay_cell(groups[workload], build_policy(spec, cost), cost, batch, spec)
        if (row["workload"], row["batch_size"]) != (workload, batch) or predicted.steps != row["predicted_steps"] \
                or not math.isclose(predicted.job_tokens_per_s, row["predicted_tokens_per_s"], rel_tol=1e-9):
            raise SystemExit(f"--keep-live: the replay of {workload} B={batch} {spec} now predicts "
                             f"{predicted.job_tokens_per_s:.2f} tok/s in {predicted.steps} steps, the saved live check "
                             f"{row['predicted_tokens_per_s']:.2f} in {row['predicted_steps']}; run the live check")
    return saved


def table(grids: dict, policies: dict, statics: dict, best: int, phased: dict) -> list[dict]:
    rows = []
    for (workload, batch), grid in grids.items():
        means = statics[(workload, batch)]
        off, oracle = means[0], max(means, key=means.get)
        runs = policies[(workload, batch)]
        rel = {name: sum(r.tokens_per_s for r in runs[name]) / len(runs[name]) / off for name in POLICIES}
        goodput = [r.tokens_per_s / means[oracle] for r in runs["goodput"]]
        rows.append({"workload": workload, "batch_size": batch, "off_tokens_per_s": off,
                     "best_global_static": means[best] / off, **rel,
                     "oracle": means[oracle] / off, "oracle_config": grid[oracle].config,
                     "goodput_config": runs["goodput"][0].config,
                     "goodput_over_oracle": rel["goodput"] * off / means[oracle],
                     "goodput_over_oracle_by_order": goodput})
        if (workload, batch) in phased:
            rows[-1]["phase_oracle"] = phased[(workload, batch)] / off
    return rows


def cell_table(rows: list[dict]) -> list[str]:
    lines = ["| workload | B | off tok/s | best global static | heuristic | goodput | bandit | oracle | "
             "goodput / oracle (orders' range) | oracle config | goodput's configs (order 0) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        orders = r["goodput_over_oracle_by_order"]
        lines.append(f"| {r['workload']} | {r['batch_size']} | {r['off_tokens_per_s']:.2f} | "
                     f"{r['best_global_static']:.2f} | {r['heuristic']:.2f} | {r['goodput']:.2f} | {r['bandit']:.2f} | "
                     f"{r['oracle']:.2f} | {r['goodput_over_oracle']:.2f} ({min(orders):.2f}-{max(orders):.2f}) | "
                     f"{r['oracle_config']} | "
                     f"{r['goodput_config']} |")
    lines += ["", "Targets:", ""]
    worst = min(rows, key=lambda r: r["goodput_over_oracle"])
    lines.append(f"- goodput >= 0.97 x oracle in every cell: {sum(r['goodput_over_oracle'] >= 0.97 for r in rows)}"
                 f"/{len(rows)} cells meet it; worst {worst['goodput_over_oracle']:.3f} ({worst['workload']} "
                 f"B={worst['batch_size']}); mean {sum(r['goodput_over_oracle'] for r in rows) / len(rows):.3f}")
    mix = [r for r in rows if r["workload"] == "mixed"]
    if mix:
        ratios = ", ".join(f"B={r['batch_size']}: {r['goodput'] / r['best_global_static']:.2f}" for r in mix)
        lines.append(f"- goodput >= 1.15 x best global static on the mixed trace: {ratios}")
        if all("phase_oracle" in r for r in mix):
            ceiling = ", ".join(f"B={r['batch_size']}: {r['phase_oracle'] / r['best_global_static']:.2f}"
                                for r in mix)
            lines.append(f"  - each phase on its workload's oracle config, for comparison: {ceiling}")
    low = min(rows, key=lambda r: r["goodput"])
    lines.append(f"- goodput never < 0.98 x off: lowest {low['goodput']:.3f} ({low['workload']} "
                 f"B={low['batch_size']})")
    return lines


def markdown(rows: list[dict], held_out: list[dict], live: list[dict], meta: dict) -> str:
    best_label, held_out_best = meta["best_global_static"], meta["held_out_best_global_static"]
    lines = [f"# Policies on recorded traces ({TARGET} + {DRAFT}, {DTYPE})", "",
             f"{meta['prompts']} recorded prompts per workload, {meta['new_tokens']} new tokens max; a cell at batch "
             f"size B replays max(recorded, {meta['waves']}B) requests (recorded ones repeated). Decode tokens/s "
             f"relative to off (no speculation), from replay priced by the calibrated cost model, mean over "
             f"{meta['orders']} request orders (the recorded list rotated: an adaptive policy's path depends on "
             f"which requests share a step); "
             f"the oracle is the static config with the best mean among the first order's {ORACLE_FINALISTS} "
             f"fastest. Best global static: `{best_label}`.", ""]
    lines += cell_table(rows)
    if held_out:
        lines += ["", "## Held-out prompts", "",
                  f"The next {meta['prompts']} prompts of each set, recorded the same way (`traces/held-out/`); "
                  f"some of goodput's defaults (`min_n`, `decay`) were chosen looking at both tables "
                  f"(`goodput_log.md`), so this table no longer tests them blind. Best global static here: "
                  f"`{held_out_best}`.", ""]
        lines += cell_table(held_out)
    if live:
        lines += ["", *live_section(live, meta)]
    return "\n".join(lines) + "\n"


def live_section(live: list[dict], meta: dict) -> list[str]:
    """The live check's table, with the live runs' dtype and host where recorded."""
    within = sum(abs(r["live_over_predicted_now"] - 1) <= 0.10 for r in live)
    lines = ["## Replay vs live engine", "",
             "Predicted: the replay priced by the calibrated cost model. Predicted now: the same replay priced "
             "by the cost model's forwards timed again right before and right after the live run at the batch "
             "sizes up to its own (mean of the two), since the shared host's speed drifts by 10-30% between "
             f"calibration and the live run. Within 10% of live: {within}/{len(live)} cells predicted now; "
             f"{sum(abs(r['live_over_predicted'] - 1) <= 0.10 for r in live)}/{len(live)} predicted at "
             "calibration.", *([f"Live runs in {live[0]['dtype']} on `{live[0]['host']}`; the traces and the "
                                f"cost model are {DTYPE}, calibrated on `{meta['engine']['device']}`."]
                              if "host" in live[0] else []), "",
             "| workload | B | config | predicted tok/s | predicted now | live tok/s | live / predicted | "
             "live / predicted now | predicted steps | live steps | outputs = trace |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in live:
        lines.append(f"| {r['workload']} | {r['batch_size']} | {r['config']} | "
                    f"{r['predicted_tokens_per_s']:.2f} | {r['predicted_now_tokens_per_s']:.2f} | "
                    f"{r['live_tokens_per_s']:.2f} | {r['live_over_predicted']:.2f} | "
                    f"{r['live_over_predicted_now']:.2f} | "
                    f"{r['predicted_steps']} | {r['live_steps']} | {r['outputs_identical_to_trace']} |")
    return lines


def plot(grids: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(4.2 * len(WORKLOADS), 3.6), sharey=False)
    for ax, workload in zip(axes, WORKLOADS):
        for batch, style in ((1, "-"), (8, "--")):
            grid = grids[(workload, batch)]
            for method, label, color in (("draft k=", "draft chain", "C0"), ("ngram k=", "n-gram n=1..4", "C1")):
                points = sorted((int(r.config.split("k=")[1].split()[0]), r.tokens_per_s) for r in grid
                                if r.config.startswith(method) and r.config.endswith("chain" if method[0] == "d"
                                                                                     else "chain n=1..4"))
                ax.plot([k for k, _ in points], [s for _, s in points], style, color=color, marker="o",
                        markersize=3, label=f"{label}, B={batch}")
            ax.axhline(grid[0].tokens_per_s, linestyle=style, color="gray", label=f"off, B={batch}")
        ax.set_title(workload)
        ax.set_xlabel("k (speculative tokens)")
        ax.set_xscale("log", base=2)
    axes[0].set_ylabel("decode tokens/s (replay)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--orders", type=int, default=4, help="request orders each cell is replayed in")
    parser.add_argument("--waves", type=int, default=WAVES, help="requests per cell, in batches of B")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--keep-live", action="store_true",
                        help="keep the saved live check (results/policies.json) instead of rerunning it; refused "
                             "where the replay now predicts one of its cells differently")
    parser.add_argument("--live-only", action="store_true",
                        help="run the live check again against the saved tables (results/policies.json)")
    parser.add_argument("--live-dtype", choices=("bfloat16", "float32"), default=DTYPE,
                        help="the live check's dtype (the traces and cost model stay bfloat16): float32 where the CPU "
                             "has no native bf16, whose bf16 verify forwards run several times slower")
    args = parser.parse_args()
    if args.orders < 1:
        parser.error("--orders: must be at least 1")
    if args.waves < 1:
        parser.error("--waves: must be at least 1")
    if args.live_only + args.skip_live + args.keep_live > 1:
        parser.error("--live-only, --skip-live and --keep-live: choose one")
    if args.live_dtype != DTYPE and not args.live_only:
        parser.error(f"--live-dtype {args.live_dtype}: only with --live-only (the tables' own live check is {DTYPE})")

    import torch

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    models = Models(args.live_dtype)
    if args.live_only:
        rerun_live(models)
        return
    cost = None
    results = {}
    for name, prompts, directory in (("main", slice(0, args.prompts), TRACES),
                                     ("held-out", slice(args.prompts, 2 * args.prompts), HELD_OUT)):
        groups = {w: traces_for(w, prompts, args.new_tokens, models, directory) for w in WORKLOADS}
        cost = cost or cost_model(models)
        grids, policies, statics, best, phased = evaluate(groups, cost, args.orders, args.waves)
        results[name] = (groups, grids, table(grids, policies, statics, best, phased),
                         grids[next(iter(grids))][best].config)
    groups, grids, rows, best_label = results["main"]
    _, _, held_out, held_out_best = results["held-out"]
    live = [] if args.skip_live else kept_live(groups, cost) if args.keep_live else live_check(groups, cost, models)
    meta = {"target": TARGET, "draft": DRAFT, "dtype": DTYPE, "prompts": args.prompts, "new_tokens": args.new_tokens,
            "orders": args.orders, "waves": args.waves,
            "best_global_static": best_label, "held_out_best_global_static": held_out_best,
            "engine": cost.engine.model_dump()}
    save(rows, held_out, live, meta)
    plot(grids, RESULTS / "policies.png")


def save(rows: list[dict], held_out: list[dict], live: list[dict], meta: dict) -> None:
    text = markdown(rows, held_out, live, meta)
    print(text)
    (RESULTS / "policies.md").write_text(text)
    (RESULTS / "policies.json").write_text(json.dumps({"meta": meta, "cells": rows, "held_out_cells": held_out,
                                                       "live": live}, indent=1))


def rerun_live(models: Models) -> None:
    """The live check again, on the saved tables' traces and cost model, the tables left as they are."""
    path = RESULTS / "policies.json"
    if not path.exists():
        raise SystemExit(f"--live-only: {path} does not exist; run the benchmark once without it")
    saved = json.loads(path.read_text())
    meta = saved["meta"]
    groups = {w: traces_for(w, slice(0, meta["prompts"]), meta["new_tokens"], models) for w in WORKLOADS}
    live = live_check(groups, cost_model(models), models)
    if models.dtype == DTYPE:
        save(saved["cells"], saved["held_out_cells"], live, meta)
        return
    # another dtype's live check is a measurement beside the tables, not theirs: a file of its own
    text = "\n".join(live_section(live, meta)) + "\n"
    print(text)
    (RESULTS / f"policies_live_{models.dtype}.md").write_text(f"# Policies: replay vs live engine in {models.dtype}\n\n"
                                                              + text)
    (RESULTS / f"policies_live_{models.dtype}.json").write_text(json.dumps({"meta": meta, "live": live}, indent=1))


if __name__ == "__main__":
    main()
