"""Everything one running server holds, wired together once at startup."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from engine.engine import SpecEngine
from engine.models.identity import hardware_fingerprint, model_identity
from engine.models.loaded import LoadedModel
from engine.server.live_config import LiveConfigPolicy, LiveConfigTable
from engine.server.metrics import ServerMetrics
from engine.server.profile_source import EngineIdentity, apply_profile_source
from engine.server.scheduler import Scheduler
from engine.server.settings import ServerSettings
from engine.server.stats_buffer import StatsBuffer


@dataclass
class ServerState:
    settings: ServerSettings
    engine: SpecEngine
    tokenizer: Any
    table: LiveConfigTable
    stats: StatsBuffer
    metrics: ServerMetrics
    scheduler: Scheduler
    identity: EngineIdentity
    model_names: frozenset[str]  # names a request's "model" may use
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # changes on restart: /stats cursors reset
    started: float = field(default_factory=time.time)

    @property
    def model_id(self) -> str:
        return self.identity.target

    @property
    def has_draft(self) -> bool:
        return self.identity.draft is not None


def build_state(settings: ServerSettings, target: LoadedModel, draft: LoadedModel | None = None) -> ServerState:
    """Wire engine, live config table, statistics and metrics around loaded models, then apply the profile source
    (fail-open). The stepping thread starts with the app."""
    if target.tokenizer is None:
        raise ValueError(f"target: {target.name!r} has no tokenizer; the server needs one to read prompts")
    table = LiveConfigTable()
    metrics = ServerMetrics()
    stats = StatsBuffer(settings.stats_capacity)
    engine = SpecEngine(target, draft, LiveConfigPolicy(table), max_batch=settings.max_batch)
    identity = EngineIdentity(model_identity(target), model_identity(draft) if draft is not None else None,
                              target.precision, hardware_fingerprint(target.device))
    if settings.profile_source:
        token = settings.api_token.get_secret_value() if settings.api_token else None
        apply_profile_source(settings.profile_source, identity, table, metrics, draft is not None, token,
                             settings.profile_timeout_s)
    scheduler = Scheduler(engine, target.tokenizer, metrics, stats)
    return ServerState(settings, engine, target.tokenizer, table, stats, metrics, scheduler, identity,
                       frozenset({identity.target, settings.target, target.name}))
