"""Versioned speculation profiles: put, activate, roll back, delete, and find the one that applies to an engine.

Versions are numbered per workload (1, 2, 3, ... across engine identities, never reused), so ``(workload, version)``
names one profile. At most one version is active per (workload, engine identity); a unique partial index enforces it.
Every change first locks the workload row, so concurrent writers of one workload take turns and never lose a version.

Deleting the active version is refused unless ``force=True``, which leaves that identity without an active profile
(nothing else is activated behind the caller's back).

Every function takes an open session (``with db.session() as s:``) and returns plain records.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from storage.errors import ConflictError, NotFoundError
from storage.identity import PORTABLE, EngineIdentity
from storage.models import Profile, Workload, utcnow
from storage.schemas import ProfileCreate, ProfileRecord
from storage.workloads import find, find_or_create

EXTENSIONS_KEY = "_extensions"


def put_profile(session: Session, workload: str, profile: ProfileCreate, *, activate: bool = True) -> ProfileRecord:
    """Store ``profile`` as the workload's next version (creating the workload if needed); activate it by default."""
    owner = find_or_create(session, workload, for_update=True)
    row = Profile(
        workload_id=owner.id,
        version=owner.next_version,
        identity_key=profile.identity.key,
        target_model=profile.identity.target,
        draft_model=profile.identity.draft,
        dtype=profile.identity.dtype,
        hardware=profile.identity.hardware,
        # Extensions ride in the config JSON column (no migration); to_record splits them off again.
        config={**profile.config.model_dump(mode="json"),
                **({EXTENSIONS_KEY: profile.extensions} if profile.extensions else {})},
        schedule=profile.schedule.model_dump(mode="json") if profile.schedule else None,
        measurements=profile.measurements.model_dump(mode="json") if profile.measurements else None,
        provenance_kind=profile.provenance.kind,
        study_name=profile.provenance.study,
        trial_number=profile.provenance.trial,
        note=profile.provenance.note,
        active=False,
    )
    owner.next_version += 1
    session.add(row)
    session.flush()
    if activate:
        _activate(session, row)
    return to_record(owner.name, row)


def get_profile(session: Session, workload: str, version: int) -> ProfileRecord:
    owner = find(session, workload)
    return to_record(owner.name, _version(session, owner, version))


def history(session: Session, workload: str) -> list[ProfileRecord]:
    """Every stored version of the workload, newest first."""
    owner = find(session, workload)
    rows = session.scalars(select(Profile).where(Profile.workload_id == owner.id).order_by(Profile.version.desc()))
    return [to_record(owner.name, row) for row in rows]


def list_active(session: Session, workload: str | None = None) -> list[ProfileRecord]:
    """The active profiles (one per workload and engine identity), by workload name."""
    query = (select(Workload.name, Profile).join(Profile, Profile.workload_id == Workload.id).where(Profile.active)
             .order_by(Workload.name, Profile.version))
    if workload is not None:
        query = query.where(Workload.id == find(session, workload).id)
    return [to_record(name, row) for name, row in session.execute(query)]


def activate(session: Session, workload: str, version: int) -> ProfileRecord:
    """Make ``version`` the active profile of its engine identity; the previously active one stays as history."""
    owner = find(session, workload, for_update=True)
    row = _version(session, owner, version)
    _activate(session, row)
    return to_record(owner.name, row)


def rollback(session: Session, workload: str, identity: EngineIdentity = PORTABLE) -> ProfileRecord:
    """Activate the newest version below the active one for this exact identity, and return it."""
    owner = find(session, workload, for_update=True)
    same_identity = (Profile.workload_id == owner.id) & (Profile.identity_key == identity.key)
    current = session.scalars(select(Profile).where(same_identity, Profile.active)).one_or_none()
    if current is None:
        raise NotFoundError(f"workload {workload!r} has no active profile for identity {identity}")
    previous = session.scalars(select(Profile).where(same_identity, Profile.version < current.version)
                               .order_by(Profile.version.desc()).limit(1)).one_or_none()
    if previous is None:
        raise ConflictError(f"workload {workload!r} has no version before {current.version} for identity {identity}")
    _activate(session, previous)
    return to_record(owner.name, previous)


def delete_profile(session: Session, workload: str, version: int, *, force: bool = False) -> None:
    """Delete one version; the active one only with ``force`` (its identity is then left without an active profile)."""
    owner = find(session, workload, for_update=True)
    row = _version(session, owner, version)
    if row.active and not force:
        raise ConflictError(f"version {version} of workload {workload!r} is active; activate another version first "
                            "or delete with force")
    session.delete(row)
    session.flush()


def resolve(session: Session, workload: str, engine: EngineIdentity) -> ProfileRecord | None:
    """The active profile that applies to ``engine``: the most specific match (exact identity before portable)."""
    owner = find(session, workload)
    rows = session.scalars(select(Profile).where(Profile.workload_id == owner.id, Profile.active))
    return _best(engine, [to_record(owner.name, row) for row in rows])


def active_for_engine(session: Session, engine: EngineIdentity) -> dict[str, ProfileRecord]:
    """Per workload, the active profile that applies to ``engine`` (workloads with none are left out)."""
    by_workload: dict[str, list[ProfileRecord]] = {}
    for record in list_active(session):
        by_workload.setdefault(record.workload, []).append(record)
    chosen = {name: _best(engine, records) for name, records in by_workload.items()}
    return {name: record for name, record in chosen.items() if record is not None}


def _best(engine: EngineIdentity, records: list[ProfileRecord]) -> ProfileRecord | None:
    matching = [r for r in records if r.identity.matches(engine)]
    return max(matching, key=lambda r: r.identity.specificity(), default=None)


def _version(session: Session, owner: Workload, version: int) -> Profile:
    query = select(Profile).where(Profile.workload_id == owner.id, Profile.version == version)
    row = session.scalars(query).one_or_none()
    if row is None:
        raise NotFoundError(f"workload {owner.name!r} has no version {version}")
    return row


def _activate(session: Session, row: Profile) -> None:
    # Deactivate first, in its own statement: the unique partial index must never see two active rows.
    if row.active:
        return
    session.execute(update(Profile)
                    .where(Profile.workload_id == row.workload_id, Profile.identity_key == row.identity_key,
                           Profile.active)
                    .values(active=False))
    row.active = True
    row.activated_at = utcnow()
    session.flush()


def to_record(workload: str, row: Profile) -> ProfileRecord:
    config = dict(row.config)
    extensions = config.pop(EXTENSIONS_KEY, {})
    return ProfileRecord.model_validate({
        "workload": workload,
        "version": row.version,
        "identity": EngineIdentity(target=row.target_model, draft=row.draft_model, dtype=row.dtype,
                                   hardware=row.hardware),
        "config": config,
        "extensions": extensions,
        "schedule": row.schedule,
        "measurements": row.measurements,
        "provenance": {"kind": row.provenance_kind, "study": row.study_name, "trial": row.trial_number,
                       "note": row.note},
        "active": row.active,
        "created_at": row.created_at,
        "activated_at": row.activated_at,
    })
