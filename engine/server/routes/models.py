"""``GET /v1/models``: the one model this server serves, with its speculation identity."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from engine.server.deps import State

router = APIRouter(prefix="/v1", tags=["models"])


@router.get("/models")
async def list_models(state: State) -> dict[str, Any]:
    identity = state.identity
    return {"object": "list",
            "data": [{"id": state.model_id, "object": "model", "created": int(state.started), "owned_by": "spectune",
                      "spectune": {"target": identity.target, "draft": identity.draft, "dtype": identity.dtype,
                                   "hardware": identity.hardware, "max_batch": state.engine.max_batch,
                                   "max_context": state.engine.target.max_context}}]}
