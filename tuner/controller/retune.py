"""Re-tunes triggered by drift: at most one running per workload.

With the sidecar's study manager a re-tune is a replay search (``StudyRetune``). Without one, a re-tune is recorded
as a ``tuning_runs`` row (kind ``online``, status ``running``) that a ``spectune tune`` worker (or a person) picks up
and finishes; the row is what keeps a second one from starting.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import HTTPException

from storage.db import Database
from storage.errors import NotFoundError
from storage.runs import list_runs, start_run
from tuner.tuning.routes import StudyManager, StudyRequest


class Retuner(Protocol):
    def retune(self, workload: str, reason: str) -> str | None:
        """Start a re-tune of ``workload`` unless one is running; a description of what started, or ``None``."""
        ...


class RecordedRetune:
    """Records the re-tune request in the database (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def retune(self, workload: str, reason: str) -> str | None:
        with self.db.session() as session:
            try:
                running = list_runs(session, workload, status="running")
            except NotFoundError:  # a workload without rows yet has no run either
                running = []
            if running:
                return None
            run = start_run(session, workload, "online")
        return f"tuning run {run.id} recorded as running for a tuner to pick up (no search attached): {reason}"


class StudyRetune:
    """Starts a replay search through the sidecar's study manager (one running study per workload); where it cannot
    (no recorded traces of the workload, no cost model), records the request instead, as ``RecordedRetune``."""

    def __init__(self, manager: StudyManager, fallback: RecordedRetune, trials: int) -> None:
        self.manager = manager
        self.fallback = fallback
        self.trials = trials

    def retune(self, workload: str, reason: str) -> str | None:
        try:
            status = self.manager.start(StudyRequest(workload=workload, trials=self.trials, source="replay"))
        except HTTPException as exc:
            if exc.status_code == 409:
                return None  # a search of this workload is already running
            started = self.fallback.retune(workload, reason)
            return None if started is None else f"{started}; no replay search: {exc.detail}"
        return f"replay search {status.study_name} started ({self.trials} trials): {reason}"
