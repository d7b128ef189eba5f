"""The sidecar's errors: the engine server's body (``engine.server.http_errors``) plus storage's NotFound as 404,
Conflict as 409, the database down as 503 and a ValueError from below as 422."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from engine.server import http_errors
from engine.server.http_errors import ApiError, error_response, param_of
from storage.errors import ConflictError, NotFoundError, StorageError

__all__ = ["ApiError", "install_error_handlers"]


def install_error_handlers(app: FastAPI) -> None:
    http_errors.install(app)

    @app.exception_handler(NotFoundError)
    async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return error_response(404, str(exc))

    @app.exception_handler(ConflictError)
    async def _conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return error_response(409, str(exc))

    @app.exception_handler(StorageError)
    async def _storage(_: Request, exc: StorageError) -> JSONResponse:
        return error_response(503, f"database unavailable: {exc}")

    @app.exception_handler(ValueError)
    async def _bad_value(_: Request, exc: ValueError) -> JSONResponse:
        return error_response(422, str(exc), param_of(str(exc)))
