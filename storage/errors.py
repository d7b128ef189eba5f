"""The storage layer's own exceptions; callers never see a driver or SQLAlchemy exception."""

from __future__ import annotations


class StorageError(Exception):
    """The database failed or refused an operation (connection, driver, constraint)."""


class NotFoundError(StorageError):
    """The workload, profile version or tuning run does not exist."""


class ConflictError(StorageError):
    """The operation contradicts the stored state (e.g. deleting the active version, a concurrent duplicate)."""


class SchemaOutOfDateError(StorageError):
    """The database schema is not at the revision this code expects; the message names the command that fixes it."""
