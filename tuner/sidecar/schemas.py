"""Request and response bodies of the sidecar API that storage's records do not already describe."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.config import SpecConfig
from storage.identity import PORTABLE, EngineIdentity
from storage.schemas import ProfileCreate, check_workload_name


class ProfileCreateBody(ProfileCreate):
    """``POST /v1/profiles``: a new version of ``workload``'s profile, activated unless ``activate`` is false."""

    workload: str = Field(max_length=200)
    activate: bool = True

    @field_validator("workload")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_workload_name(value)


class RollbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    identity: EngineIdentity = PORTABLE


class EngineProfile(BaseModel):
    """What ``GET /v1/engine-profile`` answers and the engine's ``--profile-source`` reads: the active config per
    workload for one engine identity (``default`` for the workload named so), plus the versions chosen and the
    workloads left out (and why)."""

    default: SpecConfig | None = None
    workloads: dict[str, SpecConfig]
    versions: dict[str, int]
    skipped: dict[str, str]
    notes: dict[str, str]


class Predicted(BaseModel):
    tokens_per_s: float
    tokens_per_s_off: float
    tokens_per_s_current: float
    gain_over_off: float
    gain_over_current: float | None = Field(description="null when the current config cannot be priced")


class RecommendationPublic(BaseModel):
    workload: str
    batch_size: int
    context_len: int
    config: SpecConfig
    current: SpecConfig
    predicted: Predicted
    evidence: dict[str, Any]


class ExportPublic(BaseModel):
    workload: str
    version: int
    format: str
    args: list[str]
    config: dict[str, Any]
    untranslated: list[str]


class Health(BaseModel):
    status: str
    database: str
    engine_url: str | None
    engine_reachable: bool | None
