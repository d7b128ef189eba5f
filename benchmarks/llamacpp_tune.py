"""llama-server on this CPU: off, llama.cpp's default draft setting, n-gram modes and spectune's tuned profile, per
workload, side by side in one run.

    .venv/bin/python benchmarks/llamacpp_tune.py            # qwen2.5-coder-1.5b Q4_K_M + qwen2.5-coder-0.5b draft
    .venv/bin/python benchmarks/llamacpp_tune.py --quick    # smollm2-135m, no draft (a smoke run)

Phase 1 tunes each workload with ``tune_llamacpp`` (live Optuna trials on llama-server, confirmed against off, stored
as the workload's active profile in a fresh SQLite store). Phase 2 reads the stored profiles back and measures every
config on every workload: each repeat launches a fresh server per config (rotating the config order every repeat, so
host drift falls on all alike), warms it with one tiny request and sends the workload's prompts once each (greedy,
``--max-tokens``). tokens/s = output tokens / client wall time over a workload's prompts (prefill included); the table
shows the median over repeats with min-max. Writes benchmarks/results/llamacpp_tune[_quick].{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import SpecConfig  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.migrate import upgrade  # noqa: E402
from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf  # noqa: E402
from tuner.engines.llamacpp_profiles import active_config, llamacpp_identity  # noqa: E402
from tuner.engines.llamacpp_server import ServerOptions  # noqa: E402
from tuner.engines.llamacpp_tuning import (  # noqa: E402
    MIN_GAIN,
    WARMUP_PROMPT,
    LaunchConfig,
    LiveScore,
    tune_llamacpp,
    workload_prompts,
)
from tuner.workloads import SHIPPED  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# llama.cpp's own settings to compare against (this version's defaults, see LLAMACPP_MEASURED.md)
FIXED: dict[str, LaunchConfig] = {
    "off": LaunchConfig(SpecConfig()),
    "draft default (k=3)": LaunchConfig(SpecConfig(method="draft", k=3)),
    "ngram-simple n=4 k=16": LaunchConfig(SpecConfig(method="ngram", k=16, min_n=4, max_n=4)),
    "ngram-mod n=16 k=32": LaunchConfig(SpecConfig(method="ngram", k=32, min_n=16, max_n=16),
                                        {"spec_type": "ngram-mod"}),
}
TUNED = "spectune tuned"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure_workloads(engine: LlamaCppEngine, launch: LaunchConfig, workloads: dict[str, list[str]],
                      max_tokens: int) -> dict[str, LiveScore]:
    """One fresh server with ``launch``, one warm-up request, then each workload's prompts once."""
    engine.stop()
    out = {}
    for index, (workload, prompts) in enumerate(workloads.items()):
        engine.apply(workload, launch.config, launch.extension)
        if index == 0:
            engine.complete(WARMUP_PROMPT, workload=workload, max_tokens=4)
        out[workload] = LiveScore.of([engine.complete(p, workload=workload, max_tokens=max_tokens).timing
                                      for p in prompts])
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smollm2-135m without a draft model")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per workload")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--trials", type=int, default=5, help="Optuna trials per workload")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds confirming candidates against off")
    parser.add_argument("--confirm-top", type=int, default=2, help="speculative candidates confirmed")
    parser.add_argument("--workloads", default=",".join(SHIPPED))
    args = parser.parse_args()

    model = "smollm2-135m" if args.quick else "qwen2.5-coder-1.5b"
    draft = None if args.quick else "qwen2.5-coder-0.5b"
    engine = LlamaCppEngine(ServerOptions(model=resolve_gguf(model)),
                            draft_model=resolve_gguf(draft, "--draft") if draft else None)
    identity = llamacpp_identity(model, draft)
    workloads = {w: workload_prompts(w, args.prompts) for w in args.workloads.split(",")}
    fixed = {k: v for k, v in FIXED.items() if draft or v.config.method != "draft"}
    store = Path(tempfile.mkdtemp(prefix="llamacpp-tune-")) / "spectune.db"
    url = f"sqlite:///{store}"
    db = Database(url)
    upgrade(db)
    load_start = os.getloadavg()
    started = time.time()
    tuning: dict[str, Any] = {}
    tuned: dict[str, LaunchConfig] = {}
    try:
        for workload, prompts in workloads.items():
            log(f"tuning {workload}")
            result = tune_llamacpp(engine, workload, prompts, storage_url=url, identity=identity,
                                   trials=args.trials, has_draft=draft is not None, max_tokens=args.max_tokens,
                                   confirm_top=args.confirm_top, rounds=args.rounds, log=log)
            with db.session(readonly=True) as session:
                config, extension = active_config(session, workload, identity)
            tuned[workload] = LaunchConfig(config, extension)
            tuning[workload] = {"trials": result.trials, "confirmed": result.confirmed,
                                "chosen": tuned[workload].label(), "profile_version": result.profile.version}
        tuning_s = time.time() - started
        load_mid = os.getloadavg()
        names = [*fixed, TUNED]
        rows: dict[str, dict[str, list[LiveScore]]] = {w: {name: [] for name in names} for w in workloads}
        for rep in range(args.repeats):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                if name == TUNED:
                    for workload, prompts in workloads.items():  # each workload's own profile
                        scores = measure_workloads(engine, tuned[workload], {workload: prompts}, args.max_tokens)
                        rows[workload][TUNED].append(scores[workload])
                else:
                    for workload, score in measure_workloads(engine, fixed[name], workloads,
                                                             args.max_tokens).items():
                        rows[workload][name].append(score)
                log(f"repeat {rep + 1}/{args.repeats}: {name} done")
            # written after every repeat, so a run cut short still leaves its complete repeats
            write(args, model, draft, rep + 1, names, rows, tuned, tuning, started, tuning_s,
                  {"start": load_start, "after_tuning": load_mid, "now": os.getloadavg()})
    finally:
        engine.stop()
        db.dispose()


def write(args: argparse.Namespace, model: str, draft: str | None, repeats_done: int, names: list[str],
          rows: dict[str, dict[str, list[LiveScore]]], tuned: dict[str, LaunchConfig], tuning: dict[str, Any],
          started: float, tuning_s: float, loads: dict[str, tuple[float, float, float]]) -> None:
    report = {
        "command": " ".join([".venv/bin/python benchmarks/llamacpp_tune.py", *sys.argv[1:]]),
        "model": model, "draft": draft, "prompts_per_workload": args.prompts, "max_tokens": args.max_tokens,
        "trials": args.trials, "confirm_top": args.confirm_top, "rounds": args.rounds, "min_gain": MIN_GAIN,
        "repeats": repeats_done,
        "threads": 2,
        "loadavg_1_5_15": loads, "tuning_s": round(tuning_s, 1), "total_s": round(time.time() - started, 1),
        "tuning": tuning,
        "tuned": {w: {"label": t.label(), "config": t.config.model_dump(mode="json"), "llamacpp": t.extension}
                  for w, t in tuned.items()},
        "results": {w: {name: {"tokens_per_s": spread([s.tokens_per_s for s in runs]),
                               "decode_tokens_per_s": spread([s.decode_tokens_per_s for s in runs]),
                               "runs": [asdict(s) for s in runs]}
                        for name, runs in by.items()} for w, by in rows.items()},
    }
    suffix = "_quick" if args.quick else ""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"llamacpp_tune{suffix}.json").write_text(json.dumps(report, indent=2) + "\n")
    markdown = render(report, names)
    (RESULTS / f"llamacpp_tune{suffix}.md").write_text(markdown)
    print(markdown, flush=True)


def render(report: dict[str, Any], names: list[str]) -> str:
    lines = [f"# llama-server: off vs draft vs n-gram vs spectune's tuned profile ({report['model']}"
             + (f" + {report['draft']} draft" if report["draft"] else "") + ")", "",
             f"Command: `{report['command']}`; "
             f"{report['prompts_per_workload']} prompts/workload x {report['max_tokens']} tokens, greedy, 2 threads, "
             f"{report['trials']} Optuna trials/workload (top {report.get('confirm_top', 1)} confirmed against off "
             f"over {report.get('rounds', 1)} interleaved round(s), kept only if >= "
             f"{1 + report.get('min_gain', 0.05):.2f}x off), "
             f"{report['repeats']} interleaved repeat(s), fresh servers. "
             f"Tuning took {report['tuning_s']:.0f} s, the whole run {report['total_s']:.0f} s.",
             "Load average (1/5/15 min, shared 2-core host): " + "; ".join(
                 f"{k} {'/'.join(f'{v:.1f}' for v in vals)}" for k, vals in report["loadavg_1_5_15"].items()), "",
             "End-to-end tokens/s (output tokens / client wall time, prefill included): median (min-max) over repeats,"
             " and the median's ratio to off.", "",
             "| workload | " + " | ".join(names) + " | tuned profile | tuned vs off |",
             "|---|" + "---|" * (len(names) + 2)]
    for workload, by in report["results"].items():
        off = by["off"]["tokens_per_s"]
        cells = []
        for name in names:
            s = by[name]["tokens_per_s"]
            cells.append(f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) {s['median'] / off['median']:.2f}x")
        tuned = by[TUNED]["tokens_per_s"]
        # "beyond noise": the tuned median below the slowest off repeat
        verdict = "slower than off" if tuned["median"] < off["min"] else "not slower than off"
        lines.append(f"| {workload} | " + " | ".join(cells) + f" | {report['tuned'][workload]['label']} | {verdict} |")
    lines += ["", "Decode-only tokens/s (server `predicted_per_second` basis), median:", "",
              "| workload | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for workload, by in report["results"].items():
        lines.append(f"| {workload} | " + " | ".join(f"{by[n]['decode_tokens_per_s']['median']:.2f}" for n in names)
                     + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
