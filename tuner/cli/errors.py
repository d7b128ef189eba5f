"""One way for every command to fail on bad input: a one-line message on stderr and exit code 2."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer
from pydantic import ValidationError


class UsageError(Exception):
    """Bad input from the user; the message names the field or value at fault."""


def describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "config"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def fail(message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code=2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the project's input errors into ``error: ...`` and exit code 2 instead of a traceback."""
    try:
        yield
    except ValidationError as exc:
        raise fail(describe_validation_error(exc)) from None
    except (UsageError, ValueError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
