"""Observability: ``GET /stats`` (cursor-paged step statistics and request summaries), ``GET /metrics``
(Prometheus text) and ``GET /health``."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from engine.server.deps import State

router = APIRouter(tags=["observability"])


@router.get("/stats")
async def stats(state: State, since: Annotated[int, Query(ge=0)] = 0,
                limit: Annotated[int, Query(ge=1, le=10_000)] = 1000) -> dict[str, Any]:
    """Entries with ``seq >= since`` (oldest first) and the cursor to pass next; ``dropped`` counts entries after
    ``since`` that the ring buffer already evicted. ``epoch`` changes when the server restarts."""
    page = state.stats.read(since, limit)
    grouped: dict[str, list[dict[str, Any]]] = {"steps": [], "requests": [], "config_changes": []}
    key = {"step": "steps", "request": "requests", "config": "config_changes"}
    for entry in page.entries:
        grouped[key[entry.kind]].append({"seq": entry.seq} | entry.data)
    return {"epoch": state.epoch, "next_cursor": page.next_cursor, "dropped": page.dropped,
            "dropped_total": page.dropped_total, "capacity": state.stats.capacity, **grouped}


@router.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/health")
async def health(state: State) -> JSONResponse:
    engine = state.engine
    body = {"status": "ok", "model": state.model_id, "epoch": state.epoch, "running": engine.num_running,
            "waiting": engine.num_waiting, "steps": engine.step_count}
    if state.scheduler.failure is not None:
        return JSONResponse(body | {"status": "failed", "reason": state.scheduler.failure}, status_code=503)
    return JSONResponse(body)
