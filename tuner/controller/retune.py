"""Re-tunes triggered by drift: at most one running per workload.

Without a search attached, a re-tune is recorded as a ``tuning_runs`` row (kind ``online``, status ``running``) that
a ``spectune tune`` worker (or a person) picks up and finishes; the row is what keeps a second one from starting.
"""

from __future__ import annotations

from typing import Protocol

from storage.db import Database
from storage.errors import NotFoundError
from storage.runs import list_runs, start_run


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
