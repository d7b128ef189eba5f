"""The error body every spectune HTTP service answers with, OpenAI's shape:
``{"error": {"message", "type", "param", "code"}}``, with a message that names the field at fault; never a traceback.
The engine server and the tuner's sidecar each add handlers for their own exceptions on top of ``install``."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException


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


def describe(exc: RequestValidationError) -> tuple[str, str]:
    """``("max_tokens: Input should be ...; stop: ...", "max_tokens")``."""
    errors = exc.errors()
    # a JSON syntax error's location is a character offset, not a field
    locations = ["body" if e["type"] == "json_invalid" else _location(tuple(e["loc"])) for e in errors]
    parts = [f"{loc}: {e['msg']}" for loc, e in zip(locations, errors, strict=True)]
    return "; ".join(parts), locations[0] if locations else "body"


def param_of(message: str) -> str | None:
    """The field a ``"field: what is wrong"`` message names, if it names one."""
    head, sep, _ = message.partition(":")
    return head if sep and " " not in head else None


def install(app: FastAPI) -> None:
    """Handlers for what every service raises: request validation (422), ``ApiError`` and Starlette's HTTP errors."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = describe(exc)
        return error_response(422, message, param)

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))
