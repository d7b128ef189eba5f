"""``spectune tune W``: an Optuna search for one workload's speculation config, saved as its active profile."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.errors import UsageError

if TYPE_CHECKING:
    from tuner.engines.base import EngineAdapter


def parse_batch_mix(text: str | None) -> dict[int, float] | None:
    """``1:0.5,4:0.3,16:0.2`` (batch size: weight) -> dict; ``None`` when not given."""
    if text is None:
        return None
    mix: dict[int, float] = {}
    for part in text.split(","):
        size, sep, weight = part.partition(":")
        try:
            if not sep:
                raise ValueError
            mix[int(size)] = float(weight)
        except ValueError:
            raise UsageError(f"--batch-mix: {part.strip()!r} is not BATCH:WEIGHT (e.g. 1:0.5,4:0.5)") from None
    return mix


def workload_prompts(workload: str, path: Path | None) -> list[str]:
    """Prompt texts from ``path`` (a prompt JSONL file) or, without it, the shipped set named like the workload."""
    from tuner.workloads import SHIPPED, prompt_texts, shipped_prompts

    if path is None:
        if workload not in SHIPPED:
            raise UsageError(f"--prompts: needed for workload {workload!r} (shipped sets: {', '.join(SHIPPED)})")
        path = shipped_prompts(workload)
    return prompt_texts(path)


def connect_engine(url: str) -> EngineAdapter:
    """The spectune engine server at ``url`` through its engine client (admin token from ``SPECTUNE_ADMIN_TOKEN``)."""
    from tuner.engines.base import EngineError
    from tuner.engines.spectune import SpectuneEngine

    engine = SpectuneEngine(url, admin_token=os.environ.get("SPECTUNE_ADMIN_TOKEN") or None, startup_timeout_s=10)
    try:
        engine.start()
    except EngineError as exc:
        engine.stop()
        raise UsageError(f"--engine-url: {exc}") from None
    return engine


def tune(
    workload: Annotated[str, typer.Argument(help="Workload to tune.")],
    trials: Annotated[int, typer.Option("--trials", help="Trials in the study (a resumed study runs up to this).")]
    = 50,
    source: Annotated[str, typer.Option("--source", help="replay (traces + cost model) or live (the engine).")]
    = "replay",
    objective: Annotated[str, typer.Option("--objective", help="throughput, latency (p99 inter-token) or both.")]
    = "throughput",
    traces: Annotated[Path | None, typer.Option("--traces", help="Directory of *.jsonl traces (replay).")] = None,
    cost_model: Annotated[Path | None, typer.Option("--cost-model", help="Cost model JSON (replay).")] = None,
    db: Annotated[str | None, typer.Option("--db", help="Database URL (default $SPECTUNE_DB_URL).")] = None,
    engine_url: Annotated[str | None, typer.Option("--engine-url", help="Engine server: live trials and the "
                                                   "confirmation of the best replay candidates.")] = None,
    join: Annotated[str | None, typer.Option("--join", help="Add this worker to an existing study.")] = None,
    study: Annotated[str | None, typer.Option("--study", help="Study name (default W-SOURCE-OBJECTIVE).")] = None,
    batch_mix: Annotated[str | None, typer.Option("--batch-mix", help="Observed batch sizes with weights, e.g. "
                                                  "1:0.6,4:0.3,16:0.1 (default 1:1).")] = None,
    prompts: Annotated[Path | None, typer.Option("--prompts", help="Prompt JSONL for live requests (default: the "
                                                 "shipped set named like the workload).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Tokens per live request.")] = 64,
    confirm_top: Annotated[int, typer.Option("--confirm-top", help="Candidates confirmed live.")] = 3,
    seed: Annotated[int | None, typer.Option("--seed", help="Sampler seed.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Search method, k, tree, n-gram window and a batch-size schedule for workload W; save the best (confirmed on
    the engine when --engine-url is given) as its active profile."""
    from storage.identity import PORTABLE, EngineIdentity
    from storage.schemas import describe_profile
    from tuner.cli.db import cli_errors, open_database
    from tuner.cli.replay import load_cost_model
    from tuner.traces import load_traces
    from tuner.tuning.study import tune as run_tune

    # SIGTERM ends the search after the running trial, so its tuning run is recorded as cancelled instead of left
    # running; a second one interrupts at once, like Ctrl-C. (An interrupt raised while optuna records a trial's
    # result surfaces as optuna's own UnboundLocalError, so the first signal must not raise.)
    stop = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    with cli_errors():
        if join is not None and study is not None and join != study:
            raise UsageError("--join: names the study to join; do not also give a different --study")
        mix = parse_batch_mix(batch_mix)
        with open_database(db) as database:
            url = database.url.render_as_string(hide_password=False)
        cost = trace_list = None
        identity = PORTABLE
        if source == "replay":
            if traces is None:
                raise UsageError("--traces: required for --source replay (record some with `spectune record`)")
            trace_list = load_traces(traces)
            cost = load_cost_model(cost_model)
            identity = EngineIdentity(target=cost.engine.target, draft=cost.engine.draft, dtype=cost.engine.dtype,
                                      hardware=cost.engine.device)
        engine = connect_engine(engine_url) if engine_url else None
        texts = workload_prompts(workload, prompts) if engine is not None else []
        from tuner.engines.base import EngineError

        try:
            result = run_tune(workload, trials, source=source, objective=objective, storage_url=url,
                              study_name=join or study, join=join is not None, traces=trace_list, cost=cost,
                              batch_mix=mix, engine=engine, prompts=texts, max_tokens=max_tokens,
                              confirm_top=confirm_top, identity=identity, seed=seed, progress=progress, stop=stop)
            if result.stopped:
                raise KeyboardInterrupt
        except EngineError as exc:
            raise UsageError(f"engine: {exc}") from None
        except KeyboardInterrupt:
            print("interrupted: the study keeps its finished trials; run the same command to resume",
                  file=sys.stderr)
            raise typer.Exit(code=130) from None
        finally:
            if engine is not None:
                engine.stop()
    summary = {"study": result.study_name, "run": result.run_id, "trials_done": result.trials_done,
               "best": result.best, "confirmed": result.confirmed,
               "profile": result.profile.model_dump(mode="json") if result.profile is not None else None}
    if as_json:
        print(json.dumps(summary, indent=1))
        return
    print(f"study {result.study_name}: {result.trials_done} trials")
    for entry in result.best:
        values = ", ".join(f"{v:.4g}" for v in entry["values"] or ())
        print(f"  trial {entry['trial']}: {entry['label']}  [{values}]")
    if result.profile is not None:
        profile = result.profile
        print(f"saved {workload} version {profile.version} (active): "
              f"{describe_profile(profile.config, profile.schedule)}")
    elif join is not None:
        print("joined worker: the study's owner saves the profile")
