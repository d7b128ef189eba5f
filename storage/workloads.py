"""Workloads: the keys profiles and tuning runs are stored under.

Every function takes an open session (``with db.session() as s:``) and returns plain records.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue, TypeAdapter
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from storage.errors import NotFoundError
from storage.models import Workload
from storage.schemas import WorkloadRecord, check_workload_name

_FEATURES = TypeAdapter(dict[str, JsonValue])


def find(session: Session, name: str, *, for_update: bool = False) -> Workload:
    """The workload row; ``for_update`` locks it (PostgreSQL) so that writers of its profiles take turns."""
    query = select(Workload).where(Workload.name == name)
    row = session.scalars(query.with_for_update() if for_update else query).one_or_none()
    if row is None:
        raise NotFoundError(f"unknown workload {name!r}")
    return row


def find_or_create(session: Session, name: str, *, for_update: bool = False) -> Workload:
    """The workload row, created (with a validated name) if it does not exist yet."""
    check_workload_name(name)
    if session.scalars(select(Workload.id).where(Workload.name == name)).first() is None:
        try:
            with session.begin_nested():
                session.add(Workload(name=name))
        except IntegrityError:
            pass  # a concurrent writer created it first; use theirs
    return find(session, name, for_update=for_update)


def save_workload(session: Session, name: str, *, description: str | None = None,
                  features: dict[str, Any] | None = None) -> WorkloadRecord:
    """Create the workload or update the description and features given (``None`` leaves a field as it is)."""
    row = find_or_create(session, name, for_update=True)
    if description is not None:
        row.description = description
    if features is not None:
        row.features = _FEATURES.validate_python(features)
    session.flush()
    return to_record(row)


def get_workload(session: Session, name: str) -> WorkloadRecord:
    return to_record(find(session, name))


def list_workloads(session: Session) -> list[WorkloadRecord]:
    return [to_record(w) for w in session.scalars(select(Workload).order_by(Workload.name))]


def to_record(row: Workload) -> WorkloadRecord:
    return WorkloadRecord(name=row.name, description=row.description, features=row.features,
                          created_at=row.created_at, updated_at=row.updated_at)
