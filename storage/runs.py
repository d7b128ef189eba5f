"""Tuning runs: one row per search or online tuning session, from start to its result.

Every function takes an open session (``with db.session() as s:``) and returns plain records.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue, TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.errors import ConflictError, NotFoundError
from storage.models import TuningRun, Workload, utcnow
from storage.schemas import FINISHED_STATUSES, RunKind, RunStatus, TuningRunRecord, check_choice
from storage.workloads import find, find_or_create

_RESULT = TypeAdapter(dict[str, JsonValue])


def start_run(session: Session, workload: str, kind: str, *, study_name: str | None = None) -> TuningRunRecord:
    """Record a run that starts now (status ``running``), creating the workload if needed."""
    owner = find_or_create(session, workload)
    row = TuningRun(workload_id=owner.id, kind=check_choice("kind", kind, RunKind), study_name=study_name,
                    status="running")
    session.add(row)
    session.flush()
    return to_record(owner.name, row)


def finish_run(session: Session, run_id: int, status: str, *, result: dict[str, Any] | None = None,
               error: str | None = None) -> TuningRunRecord:
    """Close a running run as succeeded, failed or cancelled, with its result or error; a run finishes once."""
    if status not in FINISHED_STATUSES:
        raise ValueError(f"status: a run finishes as one of {', '.join(FINISHED_STATUSES)}, not {status!r}")
    name, row = _run(session, run_id, for_update=True)
    if row.status != "running":
        raise ConflictError(f"tuning run {run_id} already finished as {row.status}")
    row.status = status
    row.finished_at = utcnow()
    row.result = _RESULT.validate_python(result) if result is not None else None
    row.error = error
    session.flush()
    return to_record(name, row)


def fail_run(session: Session, run_id: int, exc: BaseException) -> TuningRunRecord:
    """Close a running run that ``exc`` ended: cancelled on Ctrl-C, failed otherwise, with the error's text."""
    status = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
    return finish_run(session, run_id, status, error=f"{type(exc).__name__}: {exc}"[:2000])


def get_run(session: Session, run_id: int) -> TuningRunRecord:
    return to_record(*_run(session, run_id))


def list_runs(session: Session, workload: str | None = None, status: str | None = None) -> list[TuningRunRecord]:
    """Runs, newest first, optionally of one workload and/or one status."""
    query = select(Workload.name, TuningRun).join(TuningRun, TuningRun.workload_id == Workload.id)
    if workload is not None:
        query = query.where(TuningRun.workload_id == find(session, workload).id)
    if status is not None:
        query = query.where(TuningRun.status == check_choice("status", status, RunStatus))
    return [to_record(name, row) for name, row in session.execute(query.order_by(TuningRun.id.desc()))]


def _run(session: Session, run_id: int, *, for_update: bool = False) -> tuple[str, TuningRun]:
    query = select(Workload.name, TuningRun).join(TuningRun, TuningRun.workload_id == Workload.id)
    query = query.where(TuningRun.id == run_id)
    found = session.execute(query.with_for_update(of=TuningRun) if for_update else query).one_or_none()
    if found is None:
        raise NotFoundError(f"unknown tuning run {run_id}")
    return found[0], found[1]


def to_record(workload: str, row: TuningRun) -> TuningRunRecord:
    return TuningRunRecord.model_validate({
        "id": row.id, "workload": workload, "kind": row.kind, "study_name": row.study_name, "status": row.status,
        "started_at": row.started_at, "finished_at": row.finished_at, "result": row.result, "error": row.error,
    })
