"""``GET /v1/engine-profile``: the active config per workload for one engine identity, in the shape the engine
server's ``--profile-source`` reads (``engine.server.profile_source.ProfileSet``)."""

from __future__ import annotations

import re

from fastapi import APIRouter

from storage.identity import EngineIdentity
from storage.profiles import active_for_engine
from tuner.sidecar.deps import ReadSession, TokenAuth
from tuner.sidecar.schemas import EngineProfile

router = APIRouter(prefix="/v1", tags=["engine"], dependencies=[TokenAuth])

# the engine server's WorkloadName: names it cannot take are reported, not sent (one bad name would void the set)
ENGINE_WORKLOAD = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
DEFAULT = "default"


@router.get("/engine-profile")
def engine_profile(session: ReadSession, target: str | None = None, draft: str | None = None,
                   dtype: str | None = None, hardware: str | None = None) -> EngineProfile:
    """Per workload, the active profile that applies to this engine (exact identity before portable); the workload
    named ``default`` becomes the engine's default config."""
    engine = EngineIdentity(target=target, draft=draft, dtype=dtype, hardware=hardware)
    chosen = active_for_engine(session, engine)
    body = EngineProfile(workloads={}, versions={}, skipped={}, notes={})
    for name, record in sorted(chosen.items()):
        if record.config.method == "draft" and engine.draft is None:
            body.skipped[name] = "method draft, but the engine named no draft model"
            continue
        if name == DEFAULT:
            body.default = record.config
        elif ENGINE_WORKLOAD.fullmatch(name):
            body.workloads[name] = record.config
        else:
            body.skipped[name] = "the engine takes workload names of 1-64 letters, digits and _ . : -"
            continue
        body.versions[name] = record.version
        if record.schedule is not None:
            body.notes[name] = "batch-size schedule not applied: the engine's live table holds one config per workload"
    return body
