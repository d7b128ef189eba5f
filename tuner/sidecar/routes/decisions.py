"""``GET /v1/decisions``: the controller's audit trail, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from storage.decisions import MAX_LIMIT, list_decisions
from storage.schemas import DecisionKind, DecisionRecord
from tuner.sidecar.deps import ReadSession, TokenAuth

router = APIRouter(prefix="/v1", tags=["decisions"], dependencies=[TokenAuth])


@router.get("/decisions")
def decisions(session: ReadSession, workload: str | None = None, kind: DecisionKind | None = None,
              limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
              before_id: Annotated[int | None, Query(ge=1)] = None) -> list[DecisionRecord]:
    return list_decisions(session, workload, kind, limit, before_id)
