"""Every error leaves the sidecar as ``{"error": {"message", "type", "param", "code"}}`` with a message naming the
field at fault (the engine server's shape); storage's NotFound is 404 and Conflict 409; never a traceback."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from storage.errors import ConflictError, NotFoundError, StorageError


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def error_response(status: int, message: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                        status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "header", "path")]
    return ".".join(parts) or "body"


def _param_of(message: str) -> str | None:
    head, sep, _ = message.partition(":")
    return head if sep and " " not in head else None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        locations = ["body" if e["type"] == "json_invalid" else _location(tuple(e["loc"])) for e in errors]
        message = "; ".join(f"{loc}: {e['msg']}" for loc, e in zip(locations, errors, strict=True))
        return error_response(422, message, locations[0] if locations else "body")

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.headers)

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
        return error_response(422, str(exc), _param_of(str(exc)))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))
