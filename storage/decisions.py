"""The controller's audit trail: every decision per workload with its evidence, newest first.

Every function takes an open session (``with db.session() as s:``) and returns plain records.
"""

from __future__ import annotations

from pydantic import JsonValue, TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import Decision, Workload
from storage.schemas import DecisionCreate, DecisionKind, DecisionRecord, check_choice
from storage.workloads import find, find_or_create

_EVIDENCE = TypeAdapter(dict[str, JsonValue])
MAX_LIMIT = 1000


def record_decision(session: Session, workload: str, decision: DecisionCreate) -> DecisionRecord:
    """Store one decision (creating the workload if needed)."""
    owner = find_or_create(session, workload)
    row = Decision(
        workload_id=owner.id,
        kind=decision.kind,
        from_config=decision.from_config.model_dump(mode="json") if decision.from_config else None,
        to_config=decision.to_config.model_dump(mode="json") if decision.to_config else None,
        predicted_gain=decision.predicted_gain,
        reason=decision.reason,
        evidence=_EVIDENCE.validate_python(decision.evidence) if decision.evidence is not None else None,
    )
    session.add(row)
    session.flush()
    return to_record(owner.name, row)


def list_decisions(session: Session, workload: str | None = None, kind: str | None = None,
                   limit: int = 100, before_id: int | None = None) -> list[DecisionRecord]:
    """Decisions newest first, optionally of one workload and/or kind; ``before_id`` pages further back."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit: must be between 1 and {MAX_LIMIT}")
    query = select(Workload.name, Decision).join(Decision, Decision.workload_id == Workload.id)
    if workload is not None:
        query = query.where(Decision.workload_id == find(session, workload).id)
    if kind is not None:
        query = query.where(Decision.kind == check_choice("kind", kind, DecisionKind))
    if before_id is not None:
        query = query.where(Decision.id < before_id)
    rows = session.execute(query.order_by(Decision.id.desc()).limit(limit))
    return [to_record(name, row) for name, row in rows]


def to_record(workload: str, row: Decision) -> DecisionRecord:
    return DecisionRecord.model_validate({
        "id": row.id, "workload": workload, "kind": row.kind, "from_config": row.from_config,
        "to_config": row.to_config, "predicted_gain": row.predicted_gain, "reason": row.reason,
        "evidence": row.evidence, "created_at": row.created_at,
    })
