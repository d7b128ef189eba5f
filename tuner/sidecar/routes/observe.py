"""``GET /health`` and ``GET /metrics`` (Prometheus text); neither needs the token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from storage.errors import StorageError
from storage.runs import list_runs
from tuner.sidecar.deps import State
from tuner.sidecar.schemas import Health

router = APIRouter(tags=["observability"])


@router.get("/health")
def health(state: State) -> Health:
    try:
        with state.db.session(readonly=True) as session:
            list_runs(session, status="running")
        database = "ok"
    except StorageError as exc:
        database = f"unavailable: {exc}"
    controller = state.controller
    reachable = None if controller is None else controller.epoch is not None and controller.backoff_s == 0.0
    return Health(status="ok", database=database, engine_url=state.settings.engine_url, engine_reachable=reachable)


@router.get("/metrics")
def metrics(state: State) -> Response:
    try:
        with state.db.session(readonly=True) as session:
            runs = list_runs(session)
        for status in ("running", "succeeded", "failed", "cancelled"):
            state.metrics.tuning_runs.labels(status).set(sum(r.status == status for r in runs))
        if state.studies is not None:
            for study in state.studies.list():
                state.metrics.study_trials.labels(study.study_name).set(study.trials_done)
    except StorageError:
        state.metrics.fail_opens.labels("database_down").inc()
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
