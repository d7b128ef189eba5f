"""The demo, phase by phase:

1. load the models here, calibrate the cost model (``OUT/cost-model.json``) and encode the workloads' prompts;
2. start the engine (speculation off) and a sidecar steering it; one sender per workload sends its prompts at once
   for ``controller_s`` seconds while the controller prices configs and applies, holds or rolls back per workload;
3. stop both; build traces of the answers (``OUT/traces``); start an API-only sidecar on the same database and run a
   replay search per workload through its ``/v1/studies``, each saving the workload's active profile;
4. restart the engine with ``--profile-source`` on that sidecar, check it applied the profiles, and measure every
   prompt off and tuned on it, interleaved, one request at a time;
5. with every process stopped: print the table and write the report (``OUT/report.html``, PNGs, ``results.json``).

The measurement's sidecar steers nothing, so the tuned numbers are those of the saved profiles alone.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch
from tqdm import tqdm

from engine.config import OFF, SpecConfig
from engine.models import load_pair
from engine.models.loaded import LoadedModel
from storage import migrate
from storage.db import Database
from storage.schemas import ProfileRecord
from tuner.calibrate import calibrate
from tuner.demo.plan import DEMO_STABILITY, DemoPlan
from tuner.demo.plots import Phase
from tuner.demo.processes import Service, Services
from tuner.demo.report import write_report
from tuner.demo.results import Row, build_rows
from tuner.demo.sidecar_client import SidecarClient
from tuner.demo.traces import traces_from_samples, write_trace_dir
from tuner.demo.traffic import DemoPrompt, Sample, TrafficClient, concurrent_traffic, interleaved, load_prompts
from tuner.engines.spectune import SpectuneEngine
from tuner.tuning.routes import StudyRequest, StudyStatus


class DemoError(RuntimeError):
    """The demo cannot go on; the message says what failed and where to look."""


@dataclass(frozen=True)
class ControllerView:
    """Where the controller left a workload at the end of its phase."""

    workload: str
    requests: int
    applied: SpecConfig  # the engine's config for the workload when the phase ended
    recommended: SpecConfig | None  # what the controller would run next, None before it saw any step
    predicted_gain_over_off: float | None


@dataclass
class DemoRun:
    """Everything the demo measured and decided; ``tuner.demo.report`` turns it into the report."""

    plan: DemoPlan
    out: Path
    db_url: str
    started: float
    engine: dict[str, Any] = field(default_factory=dict)  # the engine's identity (GET /v1/models)
    phases: list[Phase] = field(default_factory=list)
    controller: list[ControllerView] = field(default_factory=list)
    studies: list[StudyStatus] = field(default_factory=list)
    profiles: dict[str, ProfileRecord] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def steering_phases(self) -> list[Phase]:
        """The controller phase and the search right after it: when decisions were made, and that they stopped."""
        return [p for p in self.phases if p.name in ("controller", "search")]


def off_name(workload: str) -> str:
    """The workload name the measurement's off requests go under (the engine serves it with speculation off)."""
    return f"{workload}-off"


def _say(message: str) -> None:
    tqdm.write(f"==> {message}", file=sys.stderr)


@contextmanager
def _phase(run: DemoRun, name: str, description: str) -> Iterator[None]:
    _say(f"{name}: {description}")
    start = time.time()
    try:
        yield
    finally:
        run.phases.append(Phase(name, start, time.time()))


def run_demo(plan: DemoPlan, out: Path, db_url: str | None = None, progress: bool = True) -> DemoRun:
    """Run every phase (see the module doc); every process started is stopped before this returns or raises."""
    out.mkdir(parents=True, exist_ok=True)
    run = DemoRun(plan, out, db_url or f"sqlite:///{(out / 'spectune.db').resolve()}", time.time())
    with Database(run.db_url) as db:
        migrate.upgrade(db)
    api, admin = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    env = os.environ | {"SPECTUNE_API_TOKEN": api, "SPECTUNE_ADMIN_TOKEN": admin,
                        "SPECTUNE_STABILITY": DEMO_STABILITY.model_dump_json()}
    with _phase(run, "calibrate", f"load {plan.target} + {plan.draft or 'no draft'} ({plan.dtype}), measure the "
                                  "cost model, encode the prompts"):
        target, draft, cost_path = _calibrate(plan, out, progress)
        prompts = load_prompts(target, plan.workloads, plan.prompts)
    engine_args = ["engine", "serve", "--target", plan.target, "--dtype", plan.dtype, "--log-level", "warning",
                   *(["--draft", plan.draft] if plan.draft else [])]
    with Services(out / "logs", env) as services:
        with _phase(run, "controller", f"engine + controller; {len(prompts)} workloads send at once for "
                                       f"{plan.controller_s:.0f} s"):
            engine = services.start("engine", engine_args, progress=progress)
            steering = services.start("sidecar", ["sidecar", "--engine-url", engine.url, "--db", run.db_url,
                                                  "--cost-model", str(cost_path), "--poll-interval", "0.5"],
                                      progress=progress)
            controller_samples = _controller_phase(run, engine, steering, admin, api, prompts, progress)
            services.stop(steering)
            services.stop(engine)
        with _phase(run, "search", f"traces of the answers, then a {plan.trials}-trial replay search per "
                                   "workload through the sidecar"):
            write_trace_dir(out / "traces", traces_from_samples(target, draft, prompts, controller_samples,
                                                                plan.max_tokens))
            sidecar = services.start("sidecar-api", ["sidecar", "--db", run.db_url, "--cost-model",
                                                     str(cost_path)],
                                     env={"SPECTUNE_TRACES": str(out / "traces")}, progress=progress)
            with SidecarClient(sidecar.url, api) as client:
                run.studies = _search(plan, client, progress)
        with _phase(run, "measure", "restart the engine on the saved profiles; every prompt off and tuned, "
                                    "interleaved"):
            engine = services.start("engine-tuned", [*engine_args, "--profile-source", sidecar.url],
                                    progress=progress)
            with SidecarClient(sidecar.url, api) as client:
                run.profiles = _applied_profiles(run, engine, client, admin)
                run.samples = controller_samples + _measure(plan, engine, admin, prompts, progress)
                decisions = client.decisions()
    run.pids = services.pids
    run.rows = build_rows(run.samples, run.profiles)
    with _phase(run, "report", f"table and report in {out}"):
        write_report(run, decisions, out / "traces", cost_path)
    run.wall_s = time.time() - run.started
    (out / "results.json").write_text(json.dumps(_summary(run), indent=1))
    return run


def _calibrate(plan: DemoPlan, out: Path, progress: bool) -> tuple[LoadedModel, LoadedModel | None, Path]:
    torch.set_grad_enabled(False)
    target, draft = load_pair(plan.target, plan.draft, plan.dtype, progress=progress)
    cost = calibrate(target, draft, plan.calibration, progress=progress, device=str(target.device))
    path = out / "cost-model.json"
    path.write_text(cost.to_json())
    return target, draft, path


def _controller_phase(run: DemoRun, engine: Service, steering: Service, admin: str, api: str,
                      prompts: dict[str, list[DemoPrompt]], progress: bool) -> list[Sample]:
    with TrafficClient(engine.url, run.plan.max_tokens) as traffic:
        samples = concurrent_traffic(traffic, prompts, run.plan.controller_s, progress)
    engine_client = SpectuneEngine(engine.url, admin_token=admin)
    try:
        table = engine_client.spec_configs()
    finally:
        engine_client.stop()
    with SidecarClient(steering.url, api) as client:
        for workload in prompts:
            rec = client.recommendation(workload)
            applied = SpecConfig.model_validate(table["workloads"].get(workload, table["default"]))
            run.controller.append(ControllerView(
                workload, sum(s.workload == workload for s in samples), applied, rec.config if rec else None,
                rec.predicted.gain_over_off if rec else None))
    return samples


def _search(plan: DemoPlan, client: SidecarClient, progress: bool) -> list[StudyStatus]:
    tag = time.strftime("%Y%m%d-%H%M%S")
    names = [client.start_study(StudyRequest(workload=w, trials=plan.trials, source="replay", batch_mix={1: 1.0},
                                             study_name=f"demo-{tag}-{w}", seed=0)).study_name
             for w in plan.workloads]
    with tqdm(total=plan.trials * len(names), desc="replay search", unit="trial", disable=not progress,
              file=sys.stderr) as bar:
        def show(states: list[StudyStatus]) -> None:
            bar.update(min(sum(s.trials_done for s in states), bar.total) - bar.n)

        return client.wait_studies(names, show)


def _applied_profiles(run: DemoRun, engine: Service, client: SidecarClient, admin: str) -> dict[str, ProfileRecord]:
    """The profile of each workload that applies to this engine, checked against what the engine applied."""
    run.engine = httpx.get(f"{engine.url}/v1/models", timeout=10).json()["data"][0]["spectune"]
    identity = {k: run.engine[k] for k in ("target", "draft", "dtype", "hardware") if run.engine[k] is not None}
    engine_client = SpectuneEngine(engine.url, admin_token=admin)
    try:
        table = engine_client.spec_configs()["workloads"]
    finally:
        engine_client.stop()
    profiles = {}
    for workload in run.plan.workloads:
        profile = client.active_profile(workload, identity)
        if table.get(workload) != profile.config.model_dump(mode="json"):
            raise DemoError(f"the restarted engine did not apply {workload}'s profile (version {profile.version}: "
                            f"{profile.config.label()}); see {engine.log_path}")
        profiles[workload] = profile
    return profiles


def _measure(plan: DemoPlan, engine: Service, admin: str, prompts: dict[str, list[DemoPrompt]],
             progress: bool) -> list[Sample]:
    engine_client = SpectuneEngine(engine.url, admin_token=admin)
    try:
        for workload in prompts:
            engine_client.apply(off_name(workload), OFF)
    finally:
        engine_client.stop()
    with TrafficClient(engine.url, plan.max_tokens) as traffic:
        first = next(iter(prompts.values()))[0]
        traffic.send(first, "warmup", "warmup", max_tokens=4)  # the first forwards of a fresh process are slower
        return interleaved(traffic, prompts, plan.rounds, off_name, progress)


def _summary(run: DemoRun) -> dict[str, Any]:
    return {"plan": asdict(run.plan), "db_url": run.db_url, "engine": run.engine, "wall_s": run.wall_s,
            "phases": [asdict(p) for p in run.phases], "pids": run.pids,
            "table": [{"workload": r.workload, "config": r.config.model_dump(mode="json"), "label": r.config.label(),
                       "profile_version": r.profile_version, "tokens_per_s_off": r.tokens_per_s_off,
                       "tokens_per_s_tuned": r.tokens_per_s_tuned, "speedup": r.speedup,
                       "mean_acceptance_length": r.mean_acceptance_length, "predicted_speedup": r.predicted_speedup,
                       "requests_per_arm": r.requests, "verdict": r.verdict()} for r in run.rows],
            "controller": [{"workload": c.workload, "requests": c.requests, "applied": c.applied.label(),
                            "recommended": c.recommended.label() if c.recommended else None,
                            "predicted_gain_over_off": c.predicted_gain_over_off} for c in run.controller],
            "studies": [s.model_dump(mode="json") for s in run.studies],
            "samples": [asdict(s) for s in run.samples]}
