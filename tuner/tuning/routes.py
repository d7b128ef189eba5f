"""``/v1/studies``: start an Optuna search in a background thread (one at a time per workload), list studies, read
one's progress, stop one. ``studies_router(StudyManager(...))`` gives the router the sidecar includes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import optuna
from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.cost_model import CostModel
from storage.identity import PORTABLE, EngineIdentity
from storage.schemas import check_workload_name
from tuner.engines.base import EngineAdapter
from tuner.traces import Trace, TraceError, load_traces
from tuner.tuning.progress import finished_trials
from tuner.tuning.study import TuneResult, default_study_name, optuna_storage, tune

State = Literal["running", "stopping", "succeeded", "failed", "stopped", "idle"]


class StudyRequest(BaseModel):
    """Start (or resume) a search for one workload."""

    model_config = ConfigDict(extra="forbid")

    workload: str = Field(min_length=1, max_length=200)
    trials: int = Field(default=50, ge=1, le=10_000)
    source: Literal["replay", "live"] = "replay"
    objective: Literal["throughput", "latency", "both"] = "throughput"
    study_name: str | None = Field(default=None, min_length=1, max_length=200)
    batch_mix: dict[int, float] | None = Field(default=None, description="observed batch size -> weight")
    seed: int | None = None

    @field_validator("workload")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_workload_name(value)

    @field_validator("batch_mix")
    @classmethod
    def _mix(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        if value is not None and (not value or any(b < 1 for b in value) or any(w < 0 for w in value.values())
                                  or sum(value.values()) <= 0):
            raise ValueError("batch sizes must be >= 1 and weights >= 0 with a positive sum")
        return value


class StudyStatus(BaseModel):
    study_name: str
    workload: str | None
    source: str | None
    objective: str | None
    state: State
    trials_done: int
    trials_total: int
    best_values: list[float] | None = Field(description="best value, or the front's best throughput and latency")
    pareto_size: int | None = None
    batch_mix: dict[int, float] | None = Field(default=None, description="batch size -> weight the search scores "
                                               "at (the controller's observed mix unless the request gave one)")
    profile_version: int | None = None
    error: str | None = None


@dataclass
class _Job:
    request: StudyRequest
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    result: TuneResult | None = None
    error: str | None = None

    @property
    def state(self) -> State:
        if self.thread is not None and self.thread.is_alive():
            return "stopping" if self.stop.is_set() else "running"
        if self.error is not None:
            return "failed"
        return "stopped" if self.result is None or self.result.stopped else "succeeded"


class StudyManager:
    """Runs searches in background threads; studies and their trials live in the database at ``storage_url``.

    ``traces_dir`` and ``cost_model`` serve replay searches; ``engine_factory`` gives a fresh engine client per
    search (live trials and confirmation) and ``prompts`` the workload's prompt texts. ``observed_mix`` gives the
    batch-size mix the controller saw for a workload; a request without ``batch_mix`` is scored at it.
    """

    def __init__(self, storage_url: str, *, traces_dir: Path | None = None, cost_model: CostModel | None = None,
                 engine_factory: Callable[[], EngineAdapter] | None = None,
                 prompts: Callable[[str], Sequence[str]] | None = None, identity: EngineIdentity = PORTABLE,
                 observed_mix: Callable[[str], dict[int, float] | None] | None = None) -> None:
        self.storage_url = storage_url
        self.observed_mix = observed_mix
        self.traces_dir = traces_dir
        self.cost_model = cost_model
        self.engine_factory = engine_factory
        self.prompts = prompts
        self.identity = identity
        self._jobs: dict[str, _Job] = {}  # by study name
        self._lock = threading.Lock()
        self.storage = optuna_storage(storage_url)  # creates Optuna's tables before any search thread runs

    def _traces(self, workload: str) -> list[Trace]:
        if self.traces_dir is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "source: replay needs the sidecar's traces "
                                "directory (--traces)")
        if self.cost_model is None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "source: replay needs the sidecar's cost "
                                "model (--cost-model)")
        try:
            mine = [t for t in load_traces(self.traces_dir) if t.workload == workload]
        except TraceError as exc:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"traces: {exc}") from None
        if not mine:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"workload: no recorded traces of "
                                f"{workload!r} in {self.traces_dir}")
        return mine

    def start(self, request: StudyRequest) -> StudyStatus:
        name = request.study_name or default_study_name(request.workload, request.source, request.objective)
        traces = self._traces(request.workload) if request.source == "replay" else None
        if request.batch_mix is None and self.observed_mix is not None:
            request = request.model_copy(update={"batch_mix": self.observed_mix(request.workload)})
        if request.source == "live" and (self.engine_factory is None or self.prompts is None):
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "source: live needs an engine (--engine-url)")
        with self._lock:
            busy = [n for n, j in self._jobs.items() if j.request.workload == request.workload and j.state in
                    ("running", "stopping")]
            if busy:
                raise HTTPException(status.HTTP_409_CONFLICT, f"workload: {request.workload!r} already has a "
                                    f"running study ({busy[0]}); stop it first")
            job = _Job(request)
            job.thread = threading.Thread(target=self._run, args=(job, request, name, traces),
                                          name=f"study-{name}", daemon=True)
            self._jobs[name] = job
            job.thread.start()
        return self.status(name)

    def _run(self, job: _Job, request: StudyRequest, name: str, traces: list[Trace] | None) -> None:
        engine = None
        try:
            # Without prompts there is nothing to send: a replay search is then saved unconfirmed.
            if self.engine_factory is not None and self.prompts is not None:
                engine = self.engine_factory()
            prompts = list(self.prompts(request.workload)) if engine is not None and self.prompts else []
            job.result = tune(request.workload, request.trials, source=request.source,
                              objective=request.objective, storage_url=self.storage_url, study_name=name,
                              traces=traces, cost=self.cost_model, batch_mix=request.batch_mix, engine=engine,
                              prompts=prompts, identity=self.identity, seed=request.seed, progress=False,
                              stop=job.stop)
        except Exception as exc:  # the thread's only report is the job's state
            job.error = f"{type(exc).__name__}: {exc}"
        finally:
            if engine is not None:
                engine.stop()

    def status(self, name: str) -> StudyStatus:
        try:
            study = optuna.load_study(study_name=name, storage=self.storage)
        except KeyError:
            study = None
        job = self._jobs.get(name)
        if study is None and job is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"study: no study named {name!r}")
        # a just-started study may not be in the database yet: its request stands in for the stored settings
        asked = job.request.model_dump() if job is not None else {}
        attrs = {**asked, **(study.user_attrs if study is not None else {})}
        best, front = None, None
        if study is not None and study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            if len(study.directions) > 1:
                trials = study.best_trials
                front = len(trials)
                best = [max(t.values[0] for t in trials), min(t.values[1] for t in trials)]
            else:
                best = [study.best_value]
        result = job.result if job is not None else None
        return StudyStatus(
            study_name=name, workload=attrs.get("workload"),
            source=attrs.get("source"), objective=attrs.get("objective"), state=job.state if job else "idle",
            trials_done=finished_trials(study) if study is not None else 0, trials_total=int(attrs.get("trials", 0)),
            best_values=best, pareto_size=front, batch_mix=job.request.batch_mix if job is not None else None,
            profile_version=result.profile.version if result is not None and result.profile is not None else None,
            error=job.error if job else None)

    def list(self) -> list[StudyStatus]:
        names = {s.study_name for s in optuna.get_all_study_summaries(self.storage)}
        return [self.status(n) for n in sorted(names | set(self._jobs))]

    def stop(self, name: str) -> StudyStatus:
        job = self._jobs.get(name)
        if job is None or job.state not in ("running", "stopping"):
            self.status(name)  # 404 for an unknown study
            raise HTTPException(status.HTTP_409_CONFLICT, f"study: {name!r} is not running")
        job.stop.set()
        return self.status(name)

    def join(self, name: str, timeout: float | None = None) -> StudyStatus:
        """Wait for a study's thread to end (tests, shutdown)."""
        job = self._jobs.get(name)
        if job is not None and job.thread is not None:
            job.thread.join(timeout)
        return self.status(name)

    def shutdown(self, timeout: float = 30.0) -> None:
        """Ask every running study to stop after its current trial and wait for them."""
        for job in list(self._jobs.values()):
            job.stop.set()
        for job in list(self._jobs.values()):
            if job.thread is not None:
                job.thread.join(timeout)


def studies_router(manager: StudyManager) -> APIRouter:
    router = APIRouter(prefix="/v1/studies", tags=["studies"])

    @router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=StudyStatus,
                 summary="Start or resume an Optuna search for a workload (one running search per workload)")
    def start_study(request: StudyRequest) -> StudyStatus:
        return manager.start(request)

    @router.get("", response_model=list[StudyStatus], summary="Every study in the database, with its progress")
    def list_studies() -> list[StudyStatus]:
        return manager.list()

    @router.get("/{name}", response_model=StudyStatus, summary="One study's progress and best value")
    def study_status(name: str) -> StudyStatus:
        return manager.status(name)

    @router.post("/{name}/stop", status_code=status.HTTP_202_ACCEPTED, response_model=StudyStatus,
                 summary="Stop a running study after its current trial (nothing is saved)")
    def stop_study(name: str) -> StudyStatus:
        return manager.stop(name)

    return router
