"""Bearer-token checks for the engine server's admin routes and the sidecar's API."""

from __future__ import annotations

import hmac

from pydantic import SecretStr

from engine.server.http_errors import ApiError


def require_bearer(authorization: str | None, expected: SecretStr | None, variable: str) -> None:
    """With a token configured, demand ``Authorization: Bearer <token>`` (compared in constant time); a 401 names
    the environment ``variable`` that holds the token."""
    if expected is None:
        return
    scheme, _, given = (authorization or "").partition(" ")
    valid = hmac.compare_digest(given.strip().encode(), expected.get_secret_value().encode())
    if scheme.lower() != "bearer" or not valid:
        raise ApiError(401, f"authorization: a valid 'Bearer <{variable}>' header is required", "authorization",
                       {"WWW-Authenticate": "Bearer"})
