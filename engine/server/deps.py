"""Request dependencies, as ``Annotated`` aliases: the server state and the admin bearer-token check."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Header, Request

from engine.server.errors import ApiError
from engine.server.state import ServerState


def get_state(request: Request) -> ServerState:
    return request.app.state.server


State = Annotated[ServerState, Depends(get_state)]


def require_admin(state: State, authorization: Annotated[str | None, Header()] = None) -> None:
    """With ``SPECTUNE_ADMIN_TOKEN`` set, demand ``Authorization: Bearer <token>`` (compared in constant time)."""
    expected = state.settings.admin_token
    if expected is None:
        return
    scheme, _, given = (authorization or "").partition(" ")
    valid = hmac.compare_digest(given.strip().encode(), expected.get_secret_value().encode())
    if scheme.lower() != "bearer" or not valid:
        raise ApiError(401, "authorization: a valid 'Bearer <SPECTUNE_ADMIN_TOKEN>' header is required",
                       "authorization", {"WWW-Authenticate": "Bearer"})


AdminAuth = Depends(require_admin)
