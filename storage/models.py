"""The tables. A change here needs an Alembic revision: ``spectune db revision -m "..." --autogenerate --db URL``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from storage.schemas import DecisionKind, ProvenanceKind, RunKind, RunStatus

# Named constraints let Alembic (and SQLite batch mode) find them again in later revisions.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _one_of(column: str, literal: object, name: str) -> CheckConstraint:
    values = ", ".join(f"'{v}'" for v in get_args(literal))
    return CheckConstraint(f"{column} IN ({values})", name=name)


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given; storage keeps UTC timestamps")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Workload(Base):
    """The key profiles are stored under. ``next_version`` allocates profile versions (never reused after a delete)."""

    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    features: Mapped[dict[str, Any] | None]
    next_version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __table_args__ = (CheckConstraint("next_version >= 1", name="next_version_positive"),)


class Profile(Base):
    """One version of a workload's speculation profile for one engine identity (identity columns all NULL: portable)."""

    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    identity_key: Mapped[str] = mapped_column(String(700))
    target_model: Mapped[str | None] = mapped_column(String(200))
    draft_model: Mapped[str | None] = mapped_column(String(200))
    dtype: Mapped[str | None] = mapped_column(String(32))
    hardware: Mapped[str | None] = mapped_column(String(200))
    config: Mapped[dict[str, Any]]
    schedule: Mapped[list[Any] | None]
    measurements: Mapped[dict[str, Any] | None]
    provenance_kind: Mapped[str] = mapped_column(String(16))
    study_name: Mapped[str | None] = mapped_column(String(200))
    trial_number: Mapped[int | None] = mapped_column(Integer)
    note: Mapped[str | None] = mapped_column(Text)
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    activated_at: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("workload_id", "version"),
        CheckConstraint("version >= 1", name="version_positive"),
        _one_of("provenance_kind", ProvenanceKind, "provenance_kind"),
        # The database itself guarantees at most one active version per (workload, engine identity).
        Index("uq_profiles_one_active", "workload_id", "identity_key", unique=True,
              postgresql_where=text("active"), sqlite_where=text("active")),
    )


class TuningRun(Base):
    """One search or online tuning session for a workload (its Optuna study lives in Optuna's own tables)."""

    __tablename__ = "tuning_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    study_name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    result: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        _one_of("kind", RunKind, "kind"),
        _one_of("status", RunStatus, "status"),
    )


class Decision(Base):
    """One controller decision for a workload (apply, hold, rollback, drift, re-tune) and the evidence behind it."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    from_config: Mapped[dict[str, Any] | None]
    to_config: Mapped[dict[str, Any] | None]
    predicted_gain: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    __table_args__ = (_one_of("kind", DecisionKind, "kind"),)
