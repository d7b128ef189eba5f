"""The database handle: a URL becomes an engine and sessions; one context manager owns commit, rollback and close.

SQLite runs in WAL mode with a busy timeout and foreign keys on, and write transactions start with ``BEGIN IMMEDIATE``
so that concurrent writers queue up instead of failing on an upgraded read lock. PostgreSQL needs nothing special: the
storage functions lock the workload row (``SELECT ... FOR UPDATE``) before they change its profiles.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import platformdirs
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from storage.errors import ConflictError, StorageError

ENV_URL = "SPECTUNE_DB_URL"
SQLITE_BUSY_TIMEOUT_MS = 30_000
_READONLY = "spectune_readonly"


def default_url() -> str:
    """``$SPECTUNE_DB_URL``, else a SQLite file in the user's data directory."""
    from_env = os.environ.get(ENV_URL, "").strip()
    if from_env:
        return from_env
    return f"sqlite:///{Path(platformdirs.user_data_dir('spectune')) / 'spectune.db'}"


def describe(exc: SQLAlchemyError) -> str:
    """The first line of the driver's message (no SQL, no parameters)."""
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def translate(exc: SQLAlchemyError) -> StorageError:
    if isinstance(exc, IntegrityError):
        return ConflictError(f"conflicts with stored data: {describe(exc)}")
    return StorageError(f"database error: {describe(exc)}")


class Database:
    """One database URL: an engine, its sessions, and the URL to show to people (password hidden).

    Thread-safe (one engine with a connection pool); create a new ``Database`` in each process you fork.
    """

    def __init__(self, url: str | None = None) -> None:
        raw = url or default_url()
        try:
            self.url: URL = make_url(raw)
            self.engine: Engine = _create_engine(self.url)
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise StorageError(f"invalid database URL {raw!r}: {exc}") from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readonly_sessions = sessionmaker(self.engine.execution_options(**{_READONLY: True}),
                                               expire_on_commit=False)

    @property
    def display_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    @contextmanager
    def session(self, *, readonly: bool = False) -> Iterator[Session]:
        """A transaction: committed when the block ends, rolled back on any exception, always closed.

        SQLAlchemy and driver errors leave as :class:`StorageError` (:class:`ConflictError` for constraint violations).
        ``readonly=True`` lets SQLite start a deferred transaction that does not queue behind writers.
        """
        session = (self._readonly_sessions if readonly else self._sessions)()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            _rollback(session)
            raise translate(exc) from exc
        except BaseException:
            _rollback(session)
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()


def _rollback(session: Session) -> None:
    # The connection may already be gone; the error worth reporting is the one that got us here.
    with suppress(SQLAlchemyError):
        session.rollback()


def _create_engine(url: URL) -> Engine:
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, connect_args=_connect_args(url))
    if url.database and url.database != ":memory:":
        folder = Path(url.database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder of SQLite database {url.database}: {exc}") from None
    engine = create_engine(url)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _connect_args(url: URL) -> dict[str, Any]:
    # Fail fast on an unreachable server instead of hanging a CLI or a service start.
    return {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take BEGIN away from the sqlite3 module (it would defer it) so _sqlite_on_begin decides how transactions start.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_on_begin(conn: Any) -> None:
    # IMMEDIATE takes the write lock up front (waiting up to busy_timeout); a deferred transaction that reads and then
    # writes fails at once with SQLITE_BUSY when another writer got in between.
    readonly = conn.get_execution_options().get(_READONLY, False)
    conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")
