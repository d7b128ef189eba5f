"""``spectune db upgrade|current|downgrade|revision``: the storage schema, plus the ``--db`` helpers the storage-backed
command groups share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.errors import fail, user_errors

if TYPE_CHECKING:
    from storage.db import Database

DbOption = Annotated[str | None, typer.Option(
    "--db", metavar="URL", show_default=False,
    help="Database URL (SQLAlchemy form); default $SPECTUNE_DB_URL, else a SQLite file in the user data directory.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]

db_app = typer.Typer(help="The storage database: schema migrations.", no_args_is_help=True)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Bad input and storage failures (unknown workload, conflict, unreachable or outdated database) -> exit 2."""
    from storage.errors import StorageError

    with user_errors():
        try:
            yield
        except StorageError as exc:
            raise fail(str(exc)) from None


def open_database(url: str | None, *, check: bool = True) -> Database:
    """The database at ``url``; with ``check`` it must be at the current schema revision."""
    from storage.db import Database
    from storage.migrate import check_schema

    db = Database(url)
    if check:
        check_schema(db)
    return db


@db_app.command("upgrade")
def upgrade(db: DbOption = None,
            revision: Annotated[str, typer.Option(help="Target revision.")] = "head") -> None:
    """Create or migrate the schema (to the newest revision by default); safe to repeat."""
    from storage import migrate

    with cli_errors(), open_database(db, check=False) as database:
        migrate.upgrade(database, revision)
        print(f"{database.display_url}: schema at revision {migrate.current_revision(database)}")


@db_app.command("current")
def current(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show the database's schema revision and the newest one this spectune knows."""
    import json

    from storage import migrate

    with cli_errors(), open_database(db, check=False) as database:
        revision, head = migrate.current_revision(database), migrate.head_revision()
    if as_json:
        print(json.dumps({"url": database.display_url, "current": revision, "head": head,
                          "up_to_date": revision == head}))
        return
    state = "up to date" if revision == head else f"out of date; run `{migrate.upgrade_command(database)}`"
    print(f"{database.display_url}: revision {revision or 'none'} (head {head}, {state})")


@db_app.command("downgrade")
def downgrade(revision: Annotated[str, typer.Option(help="Target revision: 0001, -1, or base (drops every table).")],
              db: DbOption = None) -> None:
    """Migrate the schema back to an older revision."""
    from storage import migrate

    with cli_errors(), open_database(db, check=False) as database:
        migrate.downgrade(database, revision)
        print(f"{database.display_url}: schema at revision {migrate.current_revision(database) or 'none (base)'}")


@db_app.command("revision")
def revision(message: Annotated[str, typer.Option("--message", "-m", help="What the revision changes.")],
             db: DbOption = None,
             autogenerate: Annotated[bool, typer.Option(help="Diff storage.models against the database.")] = True,
             ) -> None:
    """For developers: write the next numbered migration into storage/migrations/versions (database must be at head)."""
    from storage import migrate

    with cli_errors(), open_database(db) as database:
        print(migrate.new_revision(database, message, autogenerate=autogenerate))
