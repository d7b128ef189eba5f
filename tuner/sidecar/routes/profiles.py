"""``/v1/profiles``: list the active profiles, create versions, read, activate, roll back, and export one as another
engine's launch arguments."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from storage import profiles
from storage.identity import EngineIdentity
from storage.schemas import ProfileCreate, ProfileRecord
from tuner.export import ExportFormat, export_profile
from tuner.sidecar.deps import ReadSession, TokenAuth, WriteSession
from tuner.sidecar.errors import ApiError
from tuner.sidecar.schemas import ExportPublic, ProfileCreateBody, RollbackBody

router = APIRouter(prefix="/v1/profiles", tags=["profiles"], dependencies=[TokenAuth])

Version = Annotated[int, Query(ge=1)]


def _identity(target: str | None, draft: str | None, dtype: str | None, hardware: str | None) -> EngineIdentity:
    return EngineIdentity(target=target, draft=draft, dtype=dtype, hardware=hardware)


@router.get("")
def list_active(session: ReadSession, workload: str | None = None) -> list[ProfileRecord]:
    """The active profiles, one per workload and engine identity."""
    return profiles.list_active(session, workload)


@router.post("", status_code=201)
def create(body: ProfileCreateBody, session: WriteSession) -> ProfileRecord:
    """Store the workload's next version (creating the workload), activated unless ``activate`` is false."""
    create = ProfileCreate.model_validate(body.model_dump(exclude={"workload", "activate"}))
    return profiles.put_profile(session, body.workload, create, activate=body.activate)


@router.get("/{workload}")
def resolve(workload: str, session: ReadSession, target: str | None = None, draft: str | None = None,
            dtype: str | None = None, hardware: str | None = None) -> ProfileRecord:
    """The active profile that applies to this engine identity (exact identity before portable)."""
    engine = _identity(target, draft, dtype, hardware)
    record = profiles.resolve(session, workload, engine)
    if record is None:
        raise ApiError(404, f"no active profile of workload {workload!r} applies to {engine}")
    return record


@router.get("/{workload}/versions")
def versions(workload: str, session: ReadSession) -> list[ProfileRecord]:
    """Every stored version, newest first."""
    return profiles.history(session, workload)


@router.get("/{workload}/versions/{version}")
def get_version(workload: str, version: int, session: ReadSession) -> ProfileRecord:
    return profiles.get_profile(session, workload, version)


@router.post("/{workload}/versions/{version}/activate")
def activate(workload: str, version: int, session: WriteSession) -> ProfileRecord:
    return profiles.activate(session, workload, version)


@router.post("/{workload}/rollback")
def rollback(workload: str, session: WriteSession, body: RollbackBody | None = None) -> ProfileRecord:
    """Activate the version before the active one of this identity (portable when no body is sent)."""
    return profiles.rollback(session, workload, (body or RollbackBody()).identity)


@router.get("/{workload}/export")
def export(workload: str, session: ReadSession, format: ExportFormat = "json",
           version: Annotated[int | None, Query(ge=1)] = None, target: str | None = None, draft: str | None = None,
           dtype: str | None = None, hardware: str | None = None) -> ExportPublic:
    """The profile (``version``, else the active one for the identity given) as launch arguments for ``format``
    (one of json, vllm, sglang, trtllm, llamacpp), with the fields that do not translate."""
    if version is not None:
        record = profiles.get_profile(session, workload, version)
    else:
        record = resolve(workload, session, target, draft, dtype, hardware)
    out = export_profile(record.config, record.schedule, format, draft_model=record.identity.draft)
    return ExportPublic(workload=workload, version=record.version, format=out.format, args=out.args,
                        config=out.config, untranslated=out.untranslated)

