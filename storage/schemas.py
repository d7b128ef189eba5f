"""Validated shapes of what storage accepts and returns; JSON columns are checked here before they reach the database.

``*Create`` models are inputs, ``*Record`` models are what the storage functions return (plain data, no ORM objects).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from engine.config import SpecConfig
from storage.identity import PORTABLE, EngineIdentity

_WORKLOAD_NAME = re.compile(r"[A-Za-z0-9][\w.:@/+-]{0,199}")
ProvenanceKind = Literal["manual", "optuna", "online"]
RunKind = Literal["replay", "live", "online"]
RunStatus = Literal["running", "succeeded", "failed", "cancelled"]
DecisionKind = Literal["apply", "hold", "rollback", "drift", "retune"]
FINISHED_STATUSES: tuple[RunStatus, ...] = ("succeeded", "failed", "cancelled")


def check_workload_name(name: str) -> str:
    if not _WORKLOAD_NAME.fullmatch(name):
        raise ValueError(f"workload name {name!r}: use 1-200 letters, digits and . _ : @ / + - (starting with a letter "
                         "or digit)")
    return name


def check_choice(field: str, value: str, choices: object) -> str:
    """``value`` if it is one of the ``Literal`` type's choices, else a ValueError naming the field."""
    allowed = get_args(choices)
    if value not in allowed:
        raise ValueError(f"{field}: expected one of {', '.join(allowed)}, got {value!r}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScheduleEntry(_Strict):
    """The config in force for batch sizes ``min_batch..max_batch`` and context lengths ``min_context..max_context``
    (inclusive; ``None`` = unbounded)."""

    min_batch: int = Field(default=1, ge=1)
    max_batch: int | None = Field(default=None, ge=1)
    min_context: int = Field(default=0, ge=0)
    max_context: int | None = Field(default=None, ge=0)
    config: SpecConfig

    @model_validator(mode="after")
    def _ordered(self) -> ScheduleEntry:
        if self.max_batch is not None and self.max_batch < self.min_batch:
            raise ValueError(f"max_batch ({self.max_batch}) is below min_batch ({self.min_batch})")
        if self.max_context is not None and self.max_context < self.min_context:
            raise ValueError(f"max_context ({self.max_context}) is below min_context ({self.min_context})")
        return self

    def covers(self, batch_size: int, context_len: int) -> bool:
        return (self.min_batch <= batch_size and (self.max_batch is None or batch_size <= self.max_batch)
                and self.min_context <= context_len and (self.max_context is None or context_len <= self.max_context))

    def overlaps(self, other: ScheduleEntry) -> bool:
        return (_ranges_overlap(self.min_batch, self.max_batch, other.min_batch, other.max_batch)
                and _ranges_overlap(self.min_context, self.max_context, other.min_context, other.max_context))


def _ranges_overlap(lo_a: int, hi_a: int | None, lo_b: int, hi_b: int | None) -> bool:
    return (hi_b is None or lo_a <= hi_b) and (hi_a is None or lo_b <= hi_a)


class Schedule(RootModel[list[ScheduleEntry]]):
    """Config per batch-size / context-length range; ranges must not overlap. Outside every range the profile's own
    config applies."""

    model_config = ConfigDict(frozen=True)

    root: list[ScheduleEntry] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _disjoint(self) -> Schedule:
        for i, a in enumerate(self.root):
            for j in range(i + 1, len(self.root)):
                if a.overlaps(self.root[j]):
                    raise ValueError(f"schedule entries {i} and {j} overlap")
        return self

    def config_at(self, batch_size: int, context_len: int = 0) -> SpecConfig | None:
        """The scheduled config for this batch size and context length, or ``None`` when no range covers them."""
        return next((e.config for e in self.root if e.covers(batch_size, context_len)), None)


def describe_profile(config: SpecConfig, schedule: Schedule | None) -> str:
    """One line for a profile: its config with the batch size speculation stops above, and each scheduled range
    (outside them the config applies)."""
    text = config.label()
    if config.speculative and config.max_batch_size is not None:
        text += f" up to batch {config.max_batch_size}, off above"
    for e in schedule.root if schedule is not None else ():
        bounded = e.min_context > 0 or e.max_context is not None
        context = f" context {span(e.min_context, e.max_context)}" if bounded else ""
        text += f"; batch {span(e.min_batch, e.max_batch)}{context}: {e.config.label()}"
    return text


def span(low: int, high: int | None) -> str:
    """An inclusive range as ``low..high``, ``low..inf`` where it has no top."""
    return f"{low}..{'inf' if high is None else high}"


class BucketMeasurement(_Strict):
    """What was measured at one batch size: goodput, acceptance and inter-token latency, with the sample count."""

    batch_size: int = Field(ge=1)
    tokens_per_s: float = Field(ge=0)
    tokens_per_s_off: float | None = Field(default=None, ge=0, description="the same bucket without speculation")
    mean_acceptance_length: float | None = Field(default=None, ge=1)
    latency_p50_ms: float | None = Field(default=None, ge=0)
    latency_p90_ms: float | None = Field(default=None, ge=0)
    latency_p99_ms: float | None = Field(default=None, ge=0)
    samples: int = Field(ge=0)

    @model_validator(mode="after")
    def _monotone(self) -> BucketMeasurement:
        given = [p for p in (self.latency_p50_ms, self.latency_p90_ms, self.latency_p99_ms) if p is not None]
        if given != sorted(given):
            raise ValueError("latency percentiles must not decrease (p50 <= p90 <= p99)")
        return self


class Measurements(_Strict):
    """The evidence behind a profile, one entry per batch-size bucket."""

    buckets: list[BucketMeasurement] = Field(min_length=1, max_length=256)

    @model_validator(mode="after")
    def _unique_buckets(self) -> Measurements:
        sizes = [b.batch_size for b in self.buckets]
        if len(sizes) != len(set(sizes)):
            raise ValueError("buckets: each batch_size may appear once")
        return self


class Provenance(_Strict):
    """Where a profile came from: by hand, an Optuna study trial, or the online policy."""

    kind: ProvenanceKind = "manual"
    study: str | None = Field(default=None, max_length=200)
    trial: int | None = Field(default=None, ge=0)
    note: str | None = Field(default=None, max_length=2000)

    @model_validator(mode="after")
    def _study_for_trial(self) -> Provenance:
        if self.kind == "optuna" and self.study is None:
            raise ValueError("an optuna provenance needs the study name")
        if self.trial is not None and self.study is None:
            raise ValueError("a trial number needs the study name")
        return self


class ProfileCreate(_Strict):
    """A new profile version: the config, the engine it was tuned for, and optionally a schedule and measurements."""

    config: SpecConfig
    identity: EngineIdentity = PORTABLE
    schedule: Schedule | None = None
    measurements: Measurements | None = None
    provenance: Provenance = Provenance()
    extensions: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="engine-only settings SpecConfig has no field for, keyed by engine "
                                          "(e.g. llamacpp: {spec_type: ngram-mod})")


class ProfileRecord(_Strict):
    workload: str
    version: int
    identity: EngineIdentity
    config: SpecConfig
    schedule: Schedule | None
    measurements: Measurements | None
    provenance: Provenance
    extensions: dict[str, dict[str, Any]] = Field(default_factory=dict)
    active: bool
    created_at: datetime
    activated_at: datetime | None


class WorkloadRecord(_Strict):
    name: str
    description: str | None
    features: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


class TuningRunRecord(_Strict):
    id: int
    workload: str
    kind: RunKind
    study_name: str | None
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None
    result: dict[str, Any] | None
    error: str | None


class DecisionCreate(_Strict):
    """A controller decision to record: what changed (or was held back) and why."""

    kind: DecisionKind
    from_config: SpecConfig | None = None
    to_config: SpecConfig | None = None
    predicted_gain: float | None = None
    reason: str = Field(min_length=1, max_length=2000)
    evidence: dict[str, Any] | None = None


class DecisionRecord(_Strict):
    id: int
    workload: str
    kind: DecisionKind
    from_config: SpecConfig | None
    to_config: SpecConfig | None
    predicted_gain: float | None
    reason: str
    evidence: dict[str, Any] | None
    created_at: datetime
