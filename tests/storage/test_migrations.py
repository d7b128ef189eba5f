"""Migrations: one head, empty -> head, models equal the migrated schema, down/up round trips, the start-up check, and
Optuna's tables living in the same database."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from storage import migrate, profiles
from storage.db import Database
from storage.errors import SchemaOutOfDateError
from storage.models import Base
from storage.schemas import ProfileCreate

OUR_TABLES = set(Base.metadata.tables)


def schema_diff(db: Database) -> list[object]:
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "version_table": migrate.VERSION_TABLE, "include_name": migrate.include_name, "compare_type": True})
        return compare_metadata(context, Base.metadata)


def tables(db: Database) -> set[str]:
    return set(inspect(db.engine).get_table_names())


def test_single_linear_history() -> None:
    script = ScriptDirectory(str(migrate.MIGRATIONS_DIR))
    assert script.get_heads() == [migrate.head_revision()]
    revisions = list(script.walk_revisions())
    assert sum(r.down_revision is None for r in revisions) == 1
    assert all(not r.is_merge_point for r in revisions)


def test_upgrade_empty_to_head_matches_the_models(make_empty_url: Callable[[], str]) -> None:
    with Database(make_empty_url()) as db:
        assert migrate.current_revision(db) is None
        migrate.upgrade(db)
        assert migrate.current_revision(db) == migrate.head_revision()
        assert tables(db) == OUR_TABLES | {migrate.VERSION_TABLE}
        assert schema_diff(db) == []
        migrate.check_schema(db)


def test_step_by_step_down_and_up_round_trip(make_empty_url: Callable[[], str]) -> None:
    chain = [r.revision for r in ScriptDirectory(str(migrate.MIGRATIONS_DIR)).walk_revisions()][::-1]
    with Database(make_empty_url()) as db:
        for revision in chain:
            migrate.upgrade(db, revision)
            assert migrate.current_revision(db) == revision
        for expected in [*chain[-2::-1], None]:
            migrate.downgrade(db, "-1")
            assert migrate.current_revision(db) == expected
        assert tables(db) & OUR_TABLES == set()
        migrate.upgrade(db)
        assert schema_diff(db) == []


def test_out_of_date_schema_names_the_upgrade_command(make_empty_url: Callable[[], str], tmp_path: Path) -> None:
    with Database(make_empty_url()) as db:
        with pytest.raises(SchemaOutOfDateError, match=r"no spectune schema; run `spectune db upgrade --db .+`"):
            migrate.check_schema(db)

        migrate.upgrade(db)
        # A copy of the migrations with one more revision stands in for a newer spectune.
        newer = tmp_path / "migrations"
        shutil.copytree(migrate.MIGRATIONS_DIR, newer, ignore=shutil.ignore_patterns("__pycache__"))
        written = migrate.new_revision(db, "add nothing", script_location=newer)
        head = migrate.head_revision()
        assert written.name == f"{int(head) + 1:04d}_add_nothing.py"
        with pytest.raises(SchemaOutOfDateError,
                           match=rf"at schema revision {head} but this spectune needs {int(head) + 1:04d}; "
                                 r"run `spectune db upgrade --db "):
            migrate.check_schema(db, script_location=newer)

        migrate.upgrade(db, script_location=newer)
        migrate.check_schema(db, script_location=newer)
        with pytest.raises(SchemaOutOfDateError, match="which this spectune does not know"):
            migrate.check_schema(db)


def test_password_is_hidden_in_the_message(make_empty_url: Callable[[], str]) -> None:
    url = make_empty_url()
    with Database(url) as db, pytest.raises(SchemaOutOfDateError) as caught:
        migrate.check_schema(db)
    if db.url.password:
        assert db.url.password not in str(caught.value) and "***" in str(caught.value)


@pytest.mark.parametrize("optuna_first", [False, True])
def test_optuna_shares_the_database(make_empty_url: Callable[[], str], optuna_first: bool) -> None:
    url = make_empty_url()
    with Database(url) as db:
        if not optuna_first:
            migrate.upgrade(db)
        storage = optuna.storages.RDBStorage(url)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(study_name="chat-replay", storage=storage)
        study.optimize(lambda trial: (trial.suggest_int("k", 1, 8) - 3) ** 2, n_trials=4)
        if optuna_first:
            migrate.upgrade(db)

        migrate.check_schema(db)
        assert schema_diff(db) == []
        assert {"studies", "trials", "alembic_version", migrate.VERSION_TABLE} | OUR_TABLES <= tables(db)
        with db.session() as s:
            record = profiles.put_profile(s, "chat", ProfileCreate(config={"method": "ngram", "k": 3}, provenance={
                "kind": "optuna", "study": "chat-replay", "trial": study.best_trial.number}))
        assert record.provenance.trial == study.best_trial.number
        second = optuna.storages.RDBStorage(url)
        reloaded = optuna.load_study(study_name="chat-replay", storage=second)
        assert len(reloaded.trials) == 4
        with db.engine.connect() as conn:
            optuna_revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        assert optuna_revision != migrate.current_revision(db)
        storage.engine.dispose()
        second.engine.dispose()
