"""The database handle: default URL, SQLite settings, and readers that do not queue behind a writer."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from storage import profiles
from storage.db import ENV_URL, Database, default_url
from storage.errors import StorageError
from storage.migrate import upgrade
from storage.schemas import ProfileCreate


def test_default_url_comes_from_the_environment_else_the_user_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "postgresql+psycopg://u@db.internal/spectune")
    assert default_url() == "postgresql+psycopg://u@db.internal/spectune"
    monkeypatch.delenv(ENV_URL)
    url = default_url()
    assert url.startswith("sqlite:///") and url.endswith("/spectune/spectune.db")


def test_sqlite_runs_in_wal_mode_with_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'nested' / 'dir' / 'spectune.db'}") as db, db.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        assert conn.execute(text("PRAGMA busy_timeout")).scalar_one() == 30_000
        assert conn.execute(text("PRAGMA foreign_keys")).scalar_one() == 1


def test_sqlite_readers_do_not_wait_for_a_writer(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'spectune.db'}") as db:
        upgrade(db)
        with db.session() as s:
            profiles.put_profile(s, "chat", ProfileCreate(config={"method": "ngram"}))
        writing, done = threading.Event(), threading.Event()

        def writer() -> None:
            with db.session() as s:
                profiles.put_profile(s, "chat", ProfileCreate(config={"method": "off"}))
                writing.set()
                done.wait(timeout=10)  # hold the write lock while the main thread reads

        thread = threading.Thread(target=writer)
        thread.start()
        assert writing.wait(timeout=10)
        start = time.perf_counter()
        with db.session(readonly=True) as s:
            versions = [r.version for r in profiles.history(s, "chat")]
        elapsed = time.perf_counter() - start
        done.set()
        thread.join()
        assert versions == [1]  # the writer's version 2 is not committed yet
        assert elapsed < 1.0


def test_unusable_urls_raise_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="invalid database URL"):
        Database("mysql+nodriver://x/y")
    (tmp_path / "file").write_text("")
    with pytest.raises(StorageError, match="cannot create the folder"):
        Database(f"sqlite:///{tmp_path / 'file' / 'x.db'}")
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StorageError, match="database error: unable to open database file"), Database(
            f"sqlite:///{tmp_path / 'dir.db'}") as db, db.session() as s:
        s.execute(text("SELECT 1"))
