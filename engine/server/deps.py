"""Request dependencies, as ``Annotated`` aliases: the server state and the admin bearer-token check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from engine.server.bearer import require_bearer
from engine.server.state import ServerState


def get_state(request: Request) -> ServerState:
    return request.app.state.server


State = Annotated[ServerState, Depends(get_state)]


def require_admin(state: State, authorization: Annotated[str | None, Header()] = None) -> None:
    """With ``SPECTUNE_ADMIN_TOKEN`` set, demand ``Authorization: Bearer <token>``."""
    require_bearer(authorization, state.settings.admin_token, "SPECTUNE_ADMIN_TOKEN")


AdminAuth = Depends(require_admin)
