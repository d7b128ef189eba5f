"""The sidecar's FastAPI app, assembled in one place: routers, error handlers, and the controller thread's life span.

``build_state`` refuses an out-of-date database schema (naming ``spectune db upgrade``) before anything serves.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from storage.db import Database
from storage.migrate import check_schema
from tuner.sidecar.deps import TokenAuth
from tuner.sidecar.errors import install_error_handlers
from tuner.sidecar.routes import decisions, engine_profile, observe, profiles, recommendation, workloads
from tuner.sidecar.settings import Settings
from tuner.sidecar.state import SidecarState
from tuner.tuning.routes import studies_router


def build_state(settings: Settings) -> SidecarState:
    """Open and check the database; raises ``SchemaOutOfDateError`` naming the upgrade command."""
    db = Database(settings.db_url)
    try:
        check_schema(db)
    except BaseException:
        db.dispose()
        raise
    return SidecarState(settings=settings, db=db)


def create_app(state: SidecarState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        stop = threading.Event()
        thread = None
        if state.controller is not None:
            thread = threading.Thread(target=state.controller.run, args=(stop, state.settings.poll_interval_s),
                                      name="spectune-controller", daemon=True)
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread is not None:
                thread.join(timeout=30)
            if state.studies is not None:
                state.studies.shutdown()

    app = FastAPI(title="spectune sidecar", version="0.1.0", lifespan=lifespan,
                  description="Per-workload speculative-decoding profiles, recommendations and the controller's "
                              "decisions. /v1 routes need 'Authorization: Bearer $SPECTUNE_API_TOKEN' when it is set.")
    app.state.sidecar = state
    for module in (observe, workloads, profiles, engine_profile, recommendation, decisions):
        app.include_router(module.router)
    if state.studies is not None:
        app.include_router(studies_router(state.studies), dependencies=[TokenAuth])
    install_error_handlers(app)
    return app
