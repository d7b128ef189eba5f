"""Storage: workloads, versioned speculation profiles and tuning runs in SQLite or PostgreSQL, migrated by Alembic.

Import what you need from the submodules (``storage.db``, ``storage.profiles``, ...); this package root stays empty
so that importing ``storage.errors`` or ``storage.schemas`` does not pull in SQLAlchemy.
"""
