"""Conformance suite for profiles, workloads and tuning runs, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select, text

from engine.config import SpecConfig
from storage import profiles, runs, workloads
from storage.db import Database
from storage.errors import ConflictError, NotFoundError, StorageError
from storage.identity import PORTABLE, EngineIdentity
from storage.models import Profile, Workload
from storage.schemas import ProfileCreate, ProfileRecord, describe_profile

QWEN = EngineIdentity(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16", hardware="cpu-x86-2c")


def spec(method: str = "ngram", k: int = 4, identity: EngineIdentity = PORTABLE, **extra: object) -> ProfileCreate:
    return ProfileCreate.model_validate({"config": {"method": method, "k": k}, "identity": identity, **extra})


def put(db: Database, workload: str, profile: ProfileCreate, *, activate: bool = True) -> ProfileRecord:
    with db.session() as s:
        return profiles.put_profile(s, workload, profile, activate=activate)


def active_versions(db: Database, workload: str) -> dict[str, int]:
    with db.session(readonly=True) as s:
        return {str(r.identity): r.version for r in profiles.list_active(s, workload)}


def test_put_and_get_round_trip_every_field(db: Database) -> None:
    new = spec(
        "draft", 6, QWEN,
        schedule=[{"min_batch": 1, "max_batch": 4, "config": {"method": "draft", "k": 6}},
                  {"min_batch": 5, "max_batch": 16, "max_context": 4096, "config": {"method": "ngram", "k": 2}},
                  {"min_batch": 17, "config": {"method": "off"}}],
        measurements={"buckets": [{"batch_size": 1, "tokens_per_s": 52.5, "tokens_per_s_off": 31.0,
                                   "mean_acceptance_length": 2.7, "latency_p50_ms": 18.0, "latency_p90_ms": 22.5,
                                   "latency_p99_ms": 40.0, "samples": 480},
                                  {"batch_size": 8, "tokens_per_s": 210.0, "samples": 96}]},
        provenance={"kind": "optuna", "study": "chat-replay", "trial": 17, "note": "confirmed live"},
    )
    before = datetime.now(UTC)
    stored = put(db, "chat", new)
    with db.session(readonly=True) as s:
        loaded = profiles.get_profile(s, "chat", stored.version)

    assert loaded == stored
    assert (loaded.workload, loaded.version, loaded.active) == ("chat", 1, True)
    assert (loaded.identity, loaded.config, loaded.schedule, loaded.measurements, loaded.provenance) == (
        new.identity, new.config, new.schedule, new.measurements, new.provenance)
    assert loaded.created_at.tzinfo is not None and loaded.created_at >= before
    assert loaded.activated_at is not None and loaded.activated_at >= loaded.created_at
    assert loaded.schedule is not None and loaded.schedule.config_at(8, 1000) == SpecConfig(method="ngram", k=2)
    assert loaded.schedule.config_at(8, 5000) is None
    assert describe_profile(loaded.config, loaded.schedule) == (
        "draft k=6 chain; batch 1..4: draft k=6 chain; batch 5..16 context 0..4096: ngram k=2 chain n=1..4; "
        "batch 17..inf: off")


def test_a_profile_that_stops_speculating_above_a_batch_size_says_so() -> None:
    assert describe_profile(SpecConfig(method="draft", k=4, max_batch_size=4), None) == \
        "draft k=4 chain up to batch 4, off above"
    assert describe_profile(SpecConfig(max_batch_size=4), None) == "off"


def test_versions_are_numbered_per_workload_across_identities_and_never_reused(db: Database) -> None:
    assert [put(db, "chat", spec(identity=i)).version for i in (PORTABLE, QWEN, PORTABLE)] == [1, 2, 3]
    assert put(db, "code", spec()).version == 1
    with db.session() as s:
        profiles.delete_profile(s, "chat", 3, force=True)
    assert put(db, "chat", spec()).version == 4  # 3 was deleted; its number stays retired


def test_one_active_per_workload_and_identity(db: Database) -> None:
    put(db, "chat", spec(k=2))
    put(db, "chat", spec(k=3, identity=QWEN))
    assert active_versions(db, "chat") == {"portable": 1, str(QWEN): 2}
    put(db, "chat", spec(k=5))  # replaces only the portable one
    assert active_versions(db, "chat") == {"portable": 3, str(QWEN): 2}
    put(db, "chat", spec(k=6, identity=QWEN), activate=False)
    assert active_versions(db, "chat") == {"portable": 3, str(QWEN): 2}


def test_database_refuses_a_second_active_version(db: Database) -> None:
    put(db, "chat", spec())
    with pytest.raises(ConflictError), db.session() as s:
        owner = s.scalars(select(Workload)).one()
        s.add(Profile(workload_id=owner.id, version=2, identity_key=PORTABLE.key, config={"method": "off"},
                      provenance_kind="manual", active=True))
        s.flush()
    assert active_versions(db, "chat") == {"portable": 1}


def test_activate_switches_and_keeps_history(db: Database) -> None:
    for k in (2, 3, 4):
        put(db, "chat", spec(k=k))
    with db.session() as s:
        record = profiles.activate(s, "chat", 1)
    assert record.active and record.config.k == 2
    with db.session(readonly=True) as s:
        history = profiles.history(s, "chat")
    assert [(r.version, r.active) for r in history] == [(3, False), (2, False), (1, True)]
    with db.session() as s:
        assert profiles.activate(s, "chat", 1).version == 1  # activating the active version is a no-op
    assert active_versions(db, "chat") == {"portable": 1}


def test_rollback_walks_back_one_identity(db: Database) -> None:
    for k in (2, 3):
        put(db, "chat", spec(k=k))
    put(db, "chat", spec(k=7, identity=QWEN))
    put(db, "chat", spec(k=4))
    with db.session() as s:
        assert profiles.rollback(s, "chat").version == 2
    with db.session() as s:
        assert profiles.rollback(s, "chat").version == 1
    with pytest.raises(ConflictError, match="no version before 1"), db.session() as s:
        profiles.rollback(s, "chat")
    assert active_versions(db, "chat") == {"portable": 1, str(QWEN): 3}
    with pytest.raises(NotFoundError, match="no active profile"), db.session() as s:
        profiles.rollback(s, "chat", EngineIdentity(target="other"))


def test_delete_refuses_the_active_version_unless_forced(db: Database) -> None:
    put(db, "chat", spec(k=2))
    put(db, "chat", spec(k=3))
    with pytest.raises(ConflictError, match="version 2 of workload 'chat' is active"), db.session() as s:
        profiles.delete_profile(s, "chat", 2)
    with db.session() as s:
        profiles.delete_profile(s, "chat", 1)
    with db.session() as s:
        profiles.delete_profile(s, "chat", 2, force=True)
    with db.session(readonly=True) as s:
        assert profiles.history(s, "chat") == []
        assert profiles.list_active(s, "chat") == []
    with pytest.raises(NotFoundError, match="no version 2"), db.session() as s:
        profiles.delete_profile(s, "chat", 2)


@pytest.mark.parametrize("call", [
    lambda s: profiles.get_profile(s, "nope", 1),
    lambda s: profiles.history(s, "nope"),
    lambda s: profiles.list_active(s, "nope"),
    lambda s: profiles.activate(s, "nope", 1),
    lambda s: profiles.delete_profile(s, "nope", 1),
    lambda s: profiles.resolve(s, "nope", QWEN),
    lambda s: workloads.get_workload(s, "nope"),
])
def test_unknown_workload_is_not_found(db: Database, call: object) -> None:
    with pytest.raises(NotFoundError, match="unknown workload 'nope'"), db.session() as s:
        call(s)  # type: ignore[operator]


def test_exact_identity_beats_partial_beats_portable(db: Database) -> None:
    put(db, "chat", spec(k=1))
    put(db, "chat", spec(k=2, identity=EngineIdentity(target=QWEN.target)))
    put(db, "chat", spec(k=3, identity=QWEN))
    put(db, "chat", spec(k=4, identity=EngineIdentity(target="llama", dtype="float16")))
    put(db, "code", spec(k=5))
    with db.session(readonly=True) as s:
        assert profiles.resolve(s, "chat", QWEN).config.k == 3
        assert profiles.resolve(s, "chat", QWEN.model_copy(update={"hardware": "h200"})).config.k == 2
        assert profiles.resolve(s, "chat", EngineIdentity(target="llama", dtype="bfloat16")).config.k == 1
        assert profiles.resolve(s, "chat", EngineIdentity(target="llama", dtype="float16")).config.k == 4
        assert profiles.resolve(s, "chat", PORTABLE).config.k == 1
        assert {w: r.config.k for w, r in profiles.active_for_engine(s, QWEN).items()} == {"chat": 3, "code": 5}


def test_identity_key_is_stable_and_blank_fields_are_unset() -> None:
    assert EngineIdentity(target=" qwen ", dtype="") == EngineIdentity(target="qwen")
    assert EngineIdentity(target="qwen").key == '["qwen",null,null,null]'
    assert PORTABLE.portable and str(PORTABLE) == "portable" and not QWEN.portable


def test_tuned_for_another_engine_is_never_applied(db: Database) -> None:
    put(db, "chat", spec(identity=QWEN))
    with db.session(readonly=True) as s:
        assert profiles.resolve(s, "chat", EngineIdentity(target="llama")) is None
        assert profiles.active_for_engine(s, EngineIdentity(target="llama")) == {}


@pytest.mark.parametrize(("fields", "field"), [
    ({"config": {"method": "ngram", "k": 99}}, "config.k"),
    ({"config": {"method": "beam"}}, "config.method"),
    ({"config": {"method": "ngram", "min_n": 5, "max_n": 2}}, "min_n"),
    ({"config": {"method": "draft", "tree": {"branching": [16, 16]}, "k": 3}}, "nodes"),
    ({"config": {"method": "ngram", "bogus": 1}}, "config.bogus"),
    ({"config": {}, "schedule": [{"min_batch": 1, "max_batch": 8, "config": {}},
                                 {"min_batch": 8, "config": {}}]}, "overlap"),
    ({"config": {}, "schedule": [{"min_batch": 9, "max_batch": 2, "config": {}}]}, "max_batch"),
    ({"config": {}, "measurements": {"buckets": [{"batch_size": 1, "tokens_per_s": -1, "samples": 3}]}},
     "tokens_per_s"),
    ({"config": {}, "measurements": {"buckets": [{"batch_size": 1, "tokens_per_s": 1, "samples": 3,
                                                  "latency_p50_ms": 9, "latency_p99_ms": 2}]}}, "p50 <= p90"),
    ({"config": {}, "provenance": {"kind": "optuna"}}, "study name"),
    ({"config": {}, "identity": {"target": "x", "gpu": "h200"}}, "identity.gpu"),
])
def test_invalid_profiles_are_rejected_naming_the_field(db: Database, fields: dict, field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        ProfileCreate.model_validate(fields)


def test_invalid_workload_name_writes_nothing(db: Database) -> None:
    with pytest.raises(ValueError, match="workload name 'two words'"), db.session() as s:
        profiles.put_profile(s, "two words", spec())
    with db.session(readonly=True) as s:
        assert s.scalar(select(func.count()).select_from(Workload)) == 0


def test_session_rolls_back_on_error_and_translates_driver_errors(db: Database) -> None:
    with pytest.raises(RuntimeError), db.session() as s:
        profiles.put_profile(s, "chat", spec())
        raise RuntimeError("caller failed after the put")
    with db.session(readonly=True) as s:
        assert workloads.list_workloads(s) == []
    with pytest.raises(StorageError, match="database error") as caught, db.session() as s:
        s.execute(text("SELECT * FROM no_such_table"))
    assert type(caught.value) is StorageError


def test_workloads_keep_description_and_features(db: Database) -> None:
    with db.session() as s:
        created = workloads.save_workload(s, "chat", description="short chat", features={"prompt_len_p50": 42})
    with db.session() as s:
        updated = workloads.save_workload(s, "chat", features={"prompt_len_p50": 57, "overlap": 0.3})
        workloads.save_workload(s, "code")
    assert updated.description == "short chat" and updated.features == {"prompt_len_p50": 57, "overlap": 0.3}
    assert updated.created_at == created.created_at and updated.updated_at >= created.updated_at
    with db.session(readonly=True) as s:
        assert [w.name for w in workloads.list_workloads(s)] == ["chat", "code"]


def test_tuning_runs_start_finish_once_and_filter(db: Database) -> None:
    with db.session() as s:
        first = runs.start_run(s, "chat", "replay", study_name="chat-replay")
        second = runs.start_run(s, "code", "online")
    assert (first.status, first.finished_at, first.kind) == ("running", None, "replay")
    with db.session() as s:
        done = runs.finish_run(s, first.id, "succeeded", result={"best_trial": 7, "tokens_per_s": 61.5})
    assert done.status == "succeeded" and done.finished_at is not None and done.result == {
        "best_trial": 7, "tokens_per_s": 61.5}
    with pytest.raises(ConflictError, match="already finished"), db.session() as s:
        runs.finish_run(s, first.id, "failed", error="late")
    with db.session(readonly=True) as s:
        assert runs.get_run(s, first.id) == done
        assert [r.id for r in runs.list_runs(s)] == [second.id, first.id]
        assert [r.id for r in runs.list_runs(s, status="running")] == [second.id]
        assert [r.id for r in runs.list_runs(s, workload="chat")] == [first.id]
    with pytest.raises(NotFoundError), db.session() as s:
        runs.get_run(s, 10_000)
    with pytest.raises(ValueError, match="kind: expected one of replay, live, online"), db.session() as s:
        runs.start_run(s, "chat", "guess")
    with pytest.raises(ValueError, match="status: a run finishes as one of"), db.session() as s:
        runs.finish_run(s, second.id, "running")


def test_a_run_ended_by_an_exception_is_cancelled_on_ctrl_c_and_failed_otherwise(db: Database) -> None:
    with db.session() as s:
        interrupted = runs.start_run(s, "chat", "replay")
        crashed = runs.start_run(s, "chat", "live")
    with db.session() as s:
        cancelled = runs.fail_run(s, interrupted.id, KeyboardInterrupt())
        failed = runs.fail_run(s, crashed.id, ValueError("x" * 3000))
    assert (cancelled.status, cancelled.error) == ("cancelled", "KeyboardInterrupt: ")
    assert failed.status == "failed" and failed.error == ("ValueError: " + "x" * 3000)[:2000]
