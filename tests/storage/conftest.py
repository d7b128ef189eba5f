"""One conformance suite, two databases: every storage test runs on SQLite and on PostgreSQL.

PostgreSQL comes from ``SPECTUNE_TEST_PG_URL`` (``make test`` sets it from ``scripts/postgres.sh start``); each test
module gets its own freshly created database on that server. Without the URL the PostgreSQL half is skipped locally
and fails in CI (``CI=true``), so a broken server start can never pass as green.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from storage import migrate
from storage.db import Database
from storage.models import Base

BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    url = os.environ.get("SPECTUNE_TEST_PG_URL", "").strip()
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("SPECTUNE_TEST_PG_URL is unset but CI=true: the PostgreSQL half of the storage suite must run "
                    "in CI (make test sets it from `scripts/postgres.sh start`)")
    pytest.skip("SPECTUNE_TEST_PG_URL is unset; run: export SPECTUNE_TEST_PG_URL=$(scripts/postgres.sh start)")


@contextmanager
def _empty_database(backend: str, request: pytest.FixtureRequest, tmp_dir: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp_dir / f'{uuid.uuid4().hex[:8]}.db'}"
        return
    server = make_url(request.getfixturevalue("pg_server_url"))
    name = f"spectune_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A factory of empty databases (no schema) on the test's backend, dropped at the end of the test."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(_empty_database(backend, request, tmp_path))


@pytest.fixture(scope="module", params=BACKENDS)
def migrated_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One database per test module and backend, upgraded to the head revision."""
    with _empty_database(request.param, request, tmp_path_factory.mktemp("db")) as url:
        with Database(url) as db:
            migrate.upgrade(db)
        yield url


@pytest.fixture
def db(migrated_url: str) -> Iterator[Database]:
    """The module's database, emptied before the test."""
    with Database(migrated_url) as database:
        with database.session() as session:
            for table in reversed(Base.metadata.sorted_tables):
                session.execute(table.delete())
        yield database
