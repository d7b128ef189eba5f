"""Which dtype to serve in on this CPU, and whether speculation can pay in it: forward costs of the target and the
draft in each dtype, timed side by side through the engine's own forward step (``tuner.calibrate.forward_step``).

A CPU without native bfloat16 arithmetic (no AVX512-BF16 or AMX) runs a one-token bfloat16 step fast, since it
reads half the bytes of float32, but a forward of many tokens (a prefill, a k-token verify) far slower than
float32. Speculation lives on exactly those multi-token verifies, so the dtype decides whether it can pay. The last
table turns the measured costs into the mean acceptance length at which a draft-model chain of k tokens breaks
even: (verify of k + 1 tokens + k draft steps) / one target step. Speculation gains only where the workload's
measured mean acceptance length (``spectune record`` traces, ``benchmarks/engine_vs_hf.py``) is above it.

    .venv/bin/python benchmarks/dtype_cost.py [--rounds 3] [--context 256] [--prefill 128]

Every round times every point once, in a rotated order, so drift falls on all points alike; a point is the median of
its rounds. Writes benchmarks/results/dtype_cost.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Spread, elapsed_log, measure_interleaved, pin_threads, require_positive  # noqa: E402
from engine.models import hardware_fingerprint, load_model  # noqa: E402
from tuner.calibrate import forward_step, prefill  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {"target": ("qwen2.5-coder-1.5b", ("float32", "bfloat16", "int8")),
          "draft": ("qwen2.5-coder-0.5b", ("float32", "bfloat16", "int8"))}
QUICK_MODELS = {"target": ("smollm2-135m", ("float32", "bfloat16", "int8")),
                "draft": ("smollm2-135m", ("float32", "bfloat16", "int8"))}
VERIFY_KS = (2, 4, 8, 16)  # a k-token verify feeds k + 1 tokens
BATCH = 4


def points(role: str, dtype: str, loaded, context: int, prefill_tokens: int) -> dict[tuple, Callable[[], None]]:
    base = prefill(loaded, context)
    out = {(role, dtype, "prefill"): partial(prefill, loaded, prefill_tokens),
           (role, dtype, "step"): forward_step(base, 1, 1),
           (role, dtype, f"batch {BATCH}"): forward_step(base, BATCH, 1)}
    if role == "target":
        out.update({(role, dtype, f"verify k={k}"): forward_step(base, 1, k + 1) for k in VERIFY_KS})
    return out


def markdown(meta: dict, cost: dict[tuple, Spread]) -> str:
    def ms(role: str, dtype: str, point: str) -> float:
        return cost[(role, dtype, point)].median * 1000

    lines = [f"## Forward cost by dtype on `{meta['hardware']}`", "",
             f"`{meta['command']}`: {meta['threads']} torch threads, {meta['rounds']} interleaved rounds "
             f"(medians; the prefill with min-max), cache of {meta['context']} tokens, prefill of "
             f"{meta['prefill']} tokens; torch {meta['torch']}, load average {meta['load_avg_start'][0]:.1f} at start, "
             f"{meta['load_avg_end'][0]:.1f} at end, wall {meta['wall_s']:.0f} s.", "",
             "| model | dtype | prefill s | 1-token step ms | batch 4 step | "
             + " | ".join(f"verify k={k}" for k in VERIFY_KS) + " |",
             "|---|---|---|---|---|" + "---|" * len(VERIFY_KS)]
    for role, (name, dtypes) in meta["models"].items():
        for dtype in dtypes:
            one = ms(role, dtype, "step")
            verify = [f"{ms(role, dtype, f'verify k={k}') / one:.2f}x" if role == "target" else "-"
                      for k in VERIFY_KS]
            lines.append(f"| {role} {name} | {dtype} | {cost[(role, dtype, 'prefill')].fmt(1)} | "
                         f"{cost[(role, dtype, 'step')].median * 1000:.0f} | "
                         f"{ms(role, dtype, f'batch {BATCH}') / one:.2f}x | " + " | ".join(verify) + " |")
    lines += ["", "Multi-token forwards as multiples of the same model's 1-token step. Break-even mean acceptance "
              "length of a draft-model chain of k tokens, (verify k + k draft steps) / target step; speculation "
              "gains only above it (a chain of k emits at most k + 1 tokens per step):", "",
              "| target dtype | draft dtype | draft/target step | " + " | ".join(f"k={k}" for k in VERIFY_KS) + " |",
              "|---|---|---|" + "---|" * len(VERIFY_KS)]
    for target_dtype in meta["models"]["target"][1]:
        step = ms("target", target_dtype, "step")
        for draft_dtype in meta["models"]["draft"][1]:
            draft = ms("draft", draft_dtype, "step")
            even = [(ms("target", target_dtype, f"verify k={k}") + k * draft) / step for k in VERIFY_KS]
            lines.append(f"| {target_dtype} | {draft_dtype} | {draft / step:.2f} | "
                         + " | ".join(f"{e:.2f}" + (" (never)" if e > k + 1 else "")
                                      for e, k in zip(even, VERIFY_KS)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smollm2-135m as both target and draft")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    require_positive(parser, args, ("rounds", "context", "prefill", "threads"))
    pin_threads(args.threads)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    log = elapsed_log()

    models = QUICK_MODELS if args.quick else MODELS
    meta = {"command": " ".join([".venv/bin/python", "benchmarks/dtype_cost.py", *sys.argv[1:]]),
            "hardware": hardware_fingerprint("cpu"), "threads": torch.get_num_threads(), "rounds": args.rounds,
            "context": args.context, "prefill": args.prefill, "torch": torch.__version__,
            "models": {role: [name, list(dtypes)] for role, (name, dtypes) in models.items()},
            "load_avg_start": os.getloadavg()}
    runs: dict[tuple, Callable[[], None]] = {}
    for role, (name, dtypes) in models.items():
        for dtype in dtypes:
            log(f"loading {role} {name} {dtype}")
            runs.update(points(role, dtype, load_model(name, dtype=dtype, device="cpu"), args.context, args.prefill))
    cost = measure_interleaved(runs, args.rounds, log)
    meta.update(load_avg_end=os.getloadavg(), wall_s=round(time.perf_counter() - started, 1))
    text = markdown(meta, cost)
    print(text)
    stem = "dtype_cost_quick" if args.quick else "dtype_cost"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(text)
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"meta": meta, "seconds": [{"model": k[0], "dtype": k[1], "point": k[2], **vars(v)} for k, v in cost.items()]},
        indent=1))


if __name__ == "__main__":
    main()
