"""Startup profiles: the config per workload for this target/draft pair, from the tuner sidecar or an exported file.

Fail-open: whatever goes wrong (unreachable, unreadable, invalid), the server starts on the built-in default, logs
why and counts it in ``spectune:profile_source_failures_total{reason}``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from engine.config import SpecConfig
from engine.server.live_config import LiveConfigTable
from engine.server.metrics import ServerMetrics
from engine.server.schemas import WorkloadName

log = logging.getLogger("spectune.server")

SIDECAR_PATH = "/v1/engine-profile"


@dataclass(frozen=True)
class EngineIdentity:
    """What a stored profile is keyed by."""

    target: str
    draft: str | None
    dtype: str
    hardware: str

    def query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v is not None}


class ProfileSet(BaseModel):
    """``{"workloads": {name: config}, "default": config?}``; other top-level fields (versions, evidence) are ignored,
    configs themselves are validated strictly."""

    model_config = ConfigDict(extra="ignore")

    default: SpecConfig | None = None
    workloads: dict[WorkloadName, SpecConfig] = {}


class ProfileSourceError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason  # metric label: unreachable | unreadable | invalid


def fetch_profiles(source: str, identity: EngineIdentity, token: str | None = None,
                   timeout_s: float = 5.0) -> ProfileSet:
    """Read the profile set from a sidecar URL (its ``/v1/engine-profile`` when the URL has no path) or a JSON file."""
    try:
        if source.startswith(("http://", "https://")):
            url = source if urlsplit(source).path not in ("", "/") else source.rstrip("/") + SIDECAR_PATH
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            response = httpx.get(url, params=identity.query(), headers=headers, timeout=timeout_s)
            response.raise_for_status()
            data = response.json()
        else:
            data = json.loads(Path(source).expanduser().read_text())
    except httpx.HTTPStatusError as exc:
        raise ProfileSourceError("unreachable", f"{source} answered HTTP {exc.response.status_code}") from exc
    except httpx.HTTPError as exc:
        raise ProfileSourceError("unreachable", f"{source}: {type(exc).__name__}: {exc}") from exc
    except OSError as exc:
        raise ProfileSourceError("unreadable", f"{source}: {exc}") from exc
    except ValueError as exc:  # JSON decoding
        raise ProfileSourceError("invalid", f"{source}: not JSON: {exc}") from exc
    try:
        return ProfileSet.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ProfileSourceError("invalid", f"{source}: {fields}") from exc


def apply_profile_source(source: str, identity: EngineIdentity, table: LiveConfigTable, metrics: ServerMetrics,
                         has_draft: bool, token: str | None = None, timeout_s: float = 5.0) -> bool:
    """Load the profiles into ``table``; on any failure leave the default in place. Returns whether they applied."""
    try:
        profiles = fetch_profiles(source, identity, token, timeout_s)
        needs_draft = [name for name, cfg in sorted(profiles.workloads.items()) if cfg.method == "draft"]
        if profiles.default is not None and profiles.default.method == "draft":
            needs_draft.insert(0, "default")
        if needs_draft and not has_draft:
            names = ", ".join(needs_draft)
            raise ProfileSourceError("invalid", f"{source}: method 'draft' for {names}, but no draft model is loaded")
    except ProfileSourceError as exc:
        log.warning("profile source failed (%s): %s; serving on the built-in default config", exc.reason, exc)
        metrics.profile_source_failures.labels(exc.reason).inc()
        return False
    table.replace(profiles.default or table.snapshot.default, dict(profiles.workloads))
    log.info("profile source %s: applied %d workload config(s)", source, len(profiles.workloads))
    return True
