"""Forward time by tokens per row: whether a wider forward is ever cheaper, and what the calibration grid prices.

The cost model (``tuner.calibrate``) times forwards at 1, 2, 4, 8 and 16 tokens per row, fits the grid to be
non-decreasing along every axis and interpolates between its points. A chain of depth k verifies k + 1 tokens per
row, and a draft-model pass after a fully accepted chain feeds 2, so most widths the engine runs lie between grid
points. This times every width from 1 to ``--max-width`` through the engine's own forward step
(``tuner.calibrate.forward_step``, LM head apart as in the grid) at a few batch sizes, and beside each width:

- the cheapest width at or above it, and the forward of this width's tokens padded to that one (the padding
  columns masked out, as the engine pads a batch's short rows), to show whether padding would get that price;
- the price of the calibration grid as it was before it held the chain widths: the widths 1, 2, 4, 8, 16 of this
  same run, fitted monotone and interpolated (``spectune calibrate`` now times every chain width and keeps the
  tokens axis as measured, ``tuner.calibrate.CHAIN_WIDTHS``).

    .venv/bin/python benchmarks/width_cost.py [--dtype float32] [--batch-sizes 1,2,4] [--max-width 17] [--rounds 3]

Every round times every point once, in a rotated order; a point is the median of its rounds. Writes
benchmarks/results/width_cost_<dtype>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import elapsed_log, measure_interleaved, pin_threads, require_positive  # noqa: E402
from engine.kv import BatchKV, Nodes  # noqa: E402
from engine.models import hardware_fingerprint, load_model  # noqa: E402
from policies.cost_model import uniform_grid  # noqa: E402
from tuner.calibrate import forward_step, prefill  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b"}
GRID_TOKENS = (1, 2, 4, 8, 16)  # the calibration grid's widths before they held the chain widths


def padded_step(base: BatchKV, batch: int, tokens: int, width: int) -> Callable[[], None]:
    """``forward_step(base, batch, tokens, head=False)`` with each row padded to ``width`` masked columns."""
    kv = BatchKV(base.model, 0, base.decoder)
    kv.extend(base)
    kv.select([0] * batch)
    row = ([1] * tokens, [-1] + list(range(tokens - 1)))
    nodes = Nodes.trees([row] * batch, kv.device)
    pad = width - tokens
    nodes = Nodes(torch.nn.functional.pad(nodes.tokens, (0, pad)), torch.nn.functional.pad(nodes.parents, (0, pad),
                                                                                             value=-1),
                  torch.nn.functional.pad(nodes.valid, (0, pad), value=False))

    def run() -> None:
        kv.forward(nodes)
        kv.commit([[] for _ in range(batch)])

    return run


def cheapest_at_or_above(times: dict[int, float]) -> dict[int, int]:
    """For each width, the width at or above it with the least time."""
    out, best = {}, None
    for width in sorted(times, reverse=True):
        if best is None or times[width] < times[best]:
            best = width
        out[width] = best
    return out


def grid_price(times: dict[int, float], batch: int, context: int) -> dict[int, float]:
    """What the calibration grid made of this run before it held the chain widths: widths 1, 2, 4, 8 and 16, fitted
    monotone along the tokens too, interpolated."""
    points = [t for t in GRID_TOKENS if t in times]
    grid = uniform_grid((batch,), points, (context,), lambda b, t, c: times[int(t)]).monotone()
    return {w: grid(batch, w, context) for w in times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--batch-sizes", default="1,2,4", help="comma-separated")
    parser.add_argument("--max-width", type=int, default=17, help="widest forward timed, in tokens per row")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    try:
        batches = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        parser.error(f"--batch-sizes: expected comma-separated integers, got {args.batch_sizes!r}")
    if not batches or min(batches) < 1:
        parser.error("--batch-sizes: every batch size must be at least 1")
    if args.max_width < max(GRID_TOKENS):
        parser.error(f"--max-width: must be at least {max(GRID_TOKENS)}, the calibration grid's widest")
    require_positive(parser, args, ("rounds", "context", "threads"))
    pin_threads(args.threads)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    log = elapsed_log()

    widths = range(1, args.max_width + 1)
    bases = {}
    runs: dict[tuple, Callable[[], None]] = {}
    for role, name in MODELS.items():
        log(f"loading {role} {name} {args.dtype}")
        bases[role] = prefill(load_model(name, dtype=args.dtype, device="cpu"), args.context)
        runs.update({(role, b, w): forward_step(bases[role], b, w, head=False) for b in batches for w in widths})
    cost = measure_interleaved(runs, args.rounds, log)
    # the padded forwards, timed in rounds of their own beside their unpadded widths
    padded: dict[tuple, Callable[[], None]] = {}
    for role, b in ((role, b) for role in MODELS for b in batches):
        times = {w: cost[(role, b, w)].median for w in widths}
        for w, to in cheapest_at_or_above(times).items():
            if to != w:
                padded[(role, b, w, to)] = padded_step(bases[role], b, w, to)
                padded[(role, b, to, to)] = runs[(role, b, to)]
    padded_cost = measure_interleaved(padded, args.rounds, log) if padded else {}

    meta = {"command": " ".join([".venv/bin/python", "benchmarks/width_cost.py", *sys.argv[1:]]),
            "hardware": hardware_fingerprint("cpu"), "dtype": args.dtype, "threads": torch.get_num_threads(),
            "rounds": args.rounds, "context": args.context, "torch": torch.__version__, "models": MODELS,
            "wall_s": round(time.perf_counter() - started, 1)}
    rows = []
    for role in MODELS:
        for b in batches:
            times = {w: cost[(role, b, w)].median for w in widths}
            to = cheapest_at_or_above(times)
            priced = grid_price(times, b, args.context)
            for w in widths:
                pad = padded_cost.get((role, b, w, to[w]))
                rows.append({"model": role, "batch": b, "width": w, "ms": 1e3 * times[w],
                             "spread_ms": [1e3 * cost[(role, b, w)].low, 1e3 * cost[(role, b, w)].high],
                             "cheapest_width": to[w], "cheapest_ms": 1e3 * times[to[w]],
                             "padded_ms": None if pad is None else 1e3 * pad.median,
                             "padded_to_itself_ms": None if pad is None
                             else 1e3 * padded_cost[(role, b, to[w], to[w])].median,
                             "grid_ms": 1e3 * priced[w]})
    text = markdown(meta, rows)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"width_cost_{args.dtype}.md").write_text(text)
    (RESULTS / f"width_cost_{args.dtype}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = [f"## Forward time by tokens per row, {meta['dtype']}, on `{meta['hardware']}`", "",
             f"`{meta['command']}`: {meta['threads']} torch threads, {meta['rounds']} interleaved rounds (medians), "
             f"cache of {meta['context']} tokens, forwards without the LM head; torch {meta['torch']}, wall "
             f"{meta['wall_s']:.0f} s. Padded: this width's tokens in a forward padded to the cheapest width at or "
             "above it (masked columns), timed beside that width's own forward in rounds of their own. Grid: what "
             f"the calibration grid before 2026-12-08 (widths {', '.join(map(str, GRID_TOKENS))} of this run, fitted "
             "monotone) prices this width at.", "",
             "| model | B | tokens per row | ms (min-max) | cheapest at or above | its ms | padded ms (its ms then) "
             "| grid ms | grid / measured |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        padded = "-" if r["padded_ms"] is None else f"{r['padded_ms']:.0f} ({r['padded_to_itself_ms']:.0f})"
        lines.append(f"| {r['model']} | {r['batch']} | {r['width']} | {r['ms']:.0f} ({r['spread_ms'][0]:.0f}-"
                     f"{r['spread_ms'][1]:.0f}) | {r['cheapest_width']} | {r['cheapest_ms']:.0f} | {padded} | "
                     f"{r['grid_ms']:.0f} | {r['grid_ms'] / r['ms']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
