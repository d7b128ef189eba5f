"""Alembic migrations for storage; run them with ``spectune db upgrade`` (see ``storage.migrate``), not by importing."""
