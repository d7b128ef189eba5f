"""The engine server's errors: the shared body (``engine.server.http_errors``) plus 400 for bad engine input or
prompts and 503 while the engine is down."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.engine import EngineInputError
from engine.prompts import PromptError
from engine.server import http_errors
from engine.server.http_errors import ApiError, error_response, param_of
from engine.server.scheduler import EngineUnavailable

__all__ = ["ApiError", "install_error_handlers"]


def install_error_handlers(app: FastAPI) -> None:
    http_errors.install(app)

    @app.exception_handler(EngineInputError)
    @app.exception_handler(PromptError)
    async def _bad_input(_: Request, exc: ValueError) -> JSONResponse:
        return error_response(400, str(exc), param_of(str(exc)))

    @app.exception_handler(EngineUnavailable)
    async def _unavailable(_: Request, exc: EngineUnavailable) -> JSONResponse:
        return error_response(503, f"engine unavailable: {exc}")
