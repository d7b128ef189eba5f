"""Schema migrations (Alembic, configured in code) and the start-up check that refuses an out-of-date schema.

Our revision lives in ``spectune_alembic_version``: Optuna's RDB storage keeps its own ``alembic_version`` table in the
same database, and autogenerate only looks at our tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from storage.db import Database, translate
from storage.errors import SchemaOutOfDateError, StorageError
from storage.models import Base

VERSION_TABLE = "spectune_alembic_version"
MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate sees only our tables, not Optuna's or anyone else's sharing the database."""
    return type_ != "table" or name in Base.metadata.tables


def alembic_config(db: Database, script_location: Path = MIGRATIONS_DIR) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location))
    config.attributes["database"] = db
    return config


def head_revision(script_location: Path = MIGRATIONS_DIR) -> str:
    heads = ScriptDirectory(str(script_location)).get_heads()
    if len(heads) != 1:
        raise StorageError(f"migrations have {len(heads)} heads ({', '.join(heads)}); merge them into one")
    return heads[0]


def current_revision(db: Database) -> str | None:
    """The revision the database is at, ``None`` for a database without our schema."""
    with _errors(), db.engine.connect() as connection:
        return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(db: Database, revision: str = "head", *, script_location: Path = MIGRATIONS_DIR) -> None:
    with _errors():
        command.upgrade(alembic_config(db, script_location), revision)


def downgrade(db: Database, revision: str, *, script_location: Path = MIGRATIONS_DIR) -> None:
    with _errors():
        command.downgrade(alembic_config(db, script_location), revision)


def new_revision(db: Database, message: str, *, autogenerate: bool = True,
                 script_location: Path = MIGRATIONS_DIR) -> Path:
    """Write the next numbered revision (e.g. ``0002_add_decisions.py``) and return its path; review it before use."""
    head = head_revision(script_location)
    rev_id = f"{int(head) + 1:04d}" if head.isdigit() else None
    with _errors():
        script = command.revision(alembic_config(db, script_location), message=message, autogenerate=autogenerate,
                                  rev_id=rev_id)
    assert script is not None and not isinstance(script, list)
    return Path(script.path)


def upgrade_command(db: Database) -> str:
    return f"spectune db upgrade --db {db.display_url}"


def check_schema(db: Database, *, script_location: Path = MIGRATIONS_DIR) -> None:
    """Raise :class:`SchemaOutOfDateError` unless the database is at this code's head revision."""
    head = head_revision(script_location)
    current = current_revision(db)
    if current == head:
        return
    if current is None:
        raise SchemaOutOfDateError(f"database {db.display_url} has no spectune schema; run `{upgrade_command(db)}`")
    if current not in {script.revision for script in ScriptDirectory(str(script_location)).walk_revisions()}:
        raise SchemaOutOfDateError(f"database {db.display_url} is at schema revision {current}, which this spectune "
                                   f"does not know (its newest is {head}); upgrade spectune")
    raise SchemaOutOfDateError(f"database {db.display_url} is at schema revision {current} but this spectune needs "
                               f"{head}; run `{upgrade_command(db)}`")


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except SQLAlchemyError as exc:
        raise translate(exc) from exc
    except CommandError as exc:
        raise StorageError(str(exc)) from None
