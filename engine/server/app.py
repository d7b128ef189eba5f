"""The FastAPI app: routers, error handlers, and the stepping thread's life span."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from engine.server.errors import install_error_handlers
from engine.server.routes import admin, completions, models, observe
from engine.server.state import ServerState


def create_app(state: ServerState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.scheduler.start()
        try:
            yield
        finally:
            state.scheduler.stop()

    app = FastAPI(title="spectune engine", version="0.1.0", lifespan=lifespan)
    app.state.server = state
    for module in (completions, models, admin, observe):
        app.include_router(module.router)
    install_error_handlers(app)
    return app
