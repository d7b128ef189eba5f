"""Request dependencies as ``Annotated`` aliases: the sidecar state, a database session, and the bearer-token check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from engine.server.bearer import require_bearer
from tuner.sidecar.state import SidecarState


def get_state(request: Request) -> SidecarState:
    return request.app.state.sidecar


State = Annotated[SidecarState, Depends(get_state)]


def require_token(state: State, authorization: Annotated[str | None, Header()] = None) -> None:
    """With ``SPECTUNE_API_TOKEN`` set, demand ``Authorization: Bearer <token>``."""
    require_bearer(authorization, state.settings.api_token, "SPECTUNE_API_TOKEN")


TokenAuth = Depends(require_token)


def read_session(state: State) -> Iterator[Session]:
    with state.db.session(readonly=True) as session:
        yield session


def write_session(state: State) -> Iterator[Session]:
    with state.db.session() as session:
        yield session


ReadSession = Annotated[Session, Depends(read_session, scope="function")]
WriteSession = Annotated[Session, Depends(write_session, scope="function")]
