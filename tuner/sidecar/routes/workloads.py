"""``GET /v1/workloads`` (stored workloads) and ``GET /v1/identification`` (where unnamed traffic was assigned)."""

from __future__ import annotations

from fastapi import APIRouter

from storage.schemas import WorkloadRecord
from storage.workloads import get_workload, list_workloads
from tuner.sidecar.deps import ReadSession, State, TokenAuth

router = APIRouter(prefix="/v1", tags=["workloads"], dependencies=[TokenAuth])


@router.get("/workloads")
def workloads(session: ReadSession) -> list[WorkloadRecord]:
    return list_workloads(session)


@router.get("/workloads/{workload}")
def workload(workload: str, session: ReadSession) -> WorkloadRecord:
    return get_workload(session, workload)


@router.get("/identification")
def identification(state: State) -> dict[str, dict[str, float]]:
    """Unnamed (``default``) requests by the named workload their features match: count and mean confidence."""
    return state.controller.identification() if state.controller is not None else {}
