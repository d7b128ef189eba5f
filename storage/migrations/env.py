"""Alembic environment: configured by ``storage.migrate`` (no alembic.ini), which hands over the ``Database``."""

from __future__ import annotations

from alembic import context

from storage.migrate import VERSION_TABLE, include_name
from storage.models import Base

database = context.config.attributes["database"]

with database.engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,
        render_as_batch=True,  # SQLite can only ALTER by copying the table; batch mode does that for us
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
