"""``spectune demo``: the end-to-end run (see ``tuner.demo.run``), its table on stdout and its report in ``--out``."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.errors import fail
from tuner.cli.signals import sigterm_interrupts


def demo(
    quick: Annotated[bool, typer.Option("--quick", help="SmolLM2-135M drafting for itself (a few minutes) instead "
                                        "of qwen2.5-coder-1.5b with the 0.5B draft (about 15 minutes on 2 cores).")]
    = False,
    out: Annotated[Path, typer.Option("--out", help="Directory for the report, plots, traces, logs and results.")]
    = Path("demo-out"),
    db: Annotated[str | None, typer.Option("--db", metavar="URL", help="Database URL (SQLAlchemy form); default a "
                                           "SQLite file in --out.")] = None,
    prompts: Annotated[int | None, typer.Option(min=1, help="Prompts per workload (default: the plan's).")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="New tokens per request at most.")] = None,
    controller_seconds: Annotated[float | None, typer.Option(min=1, help="Length of the controller phase.")] = None,
    trials: Annotated[int | None, typer.Option(min=1, help="Replay trials per workload's search.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars.")] = True,
) -> None:
    """Start the engine and the sidecar, send traffic from three workloads, let the controller and a replay search
    tune them, save the profiles, restart the engine on them, measure off vs tuned and write the report."""
    import httpx

    from storage.errors import StorageError
    from tuner.demo.plan import FULL, QUICK
    from tuner.demo.results import print_table
    from tuner.demo.run import run_demo

    overrides = {"prompts": prompts, "max_tokens": max_tokens, "controller_s": controller_seconds, "trials": trials}
    plan = dataclasses.replace(QUICK if quick else FULL, **{k: v for k, v in overrides.items() if v is not None})
    sigterm_interrupts()
    start = time.monotonic()
    try:
        run = run_demo(plan, out, db, progress)
    except KeyboardInterrupt:
        print("interrupted: every process the demo started is stopped", file=sys.stderr)
        raise typer.Exit(code=130) from None
    except (RuntimeError, ValueError, OSError, StorageError, httpx.HTTPError) as exc:
        # the demo's own errors (services, traffic, sidecar, engine, models) are RuntimeErrors naming what failed
        raise fail(str(exc)) from None
    print_table(run.rows, f"spectune demo ({plan.name}): {plan.target} + {plan.draft or 'no draft'}, {plan.dtype}")
    print(f"report: {out / 'report.html'}  wall time: {time.monotonic() - start:.0f} s")
