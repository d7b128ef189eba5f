"""``GET/PUT /admin/spec-config``: the live speculation configs, changed between steps without touching requests in
flight. Bearer-token protected when ``SPECTUNE_ADMIN_TOKEN`` is set."""

from __future__ import annotations

from fastapi import APIRouter

from engine.server.deps import AdminAuth, State
from engine.server.errors import ApiError
from engine.server.schemas import SpecConfigTable, SpecConfigUpdate

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[AdminAuth])


@router.get("/spec-config")
async def get_spec_config(state: State) -> SpecConfigTable:
    return SpecConfigTable(**state.table.snapshot.to_dict())


@router.put("/spec-config")
async def put_spec_config(update: SpecConfigUpdate, state: State) -> SpecConfigTable:
    if update.config.method == "draft" and not state.has_draft:
        raise ApiError(422, "config.method: 'draft' needs a draft model, and this server was started without --draft",
                       "config.method")
    snapshot = state.table.set(update.config, update.workload)
    workload = update.workload or "default"
    state.metrics.config_updates.labels(workload).inc()
    state.stats.append("config", {"workload": update.workload, "config": update.config.model_dump(mode="json"),
                                  "after_step": state.engine.step_count})
    return SpecConfigTable(**snapshot.to_dict())
