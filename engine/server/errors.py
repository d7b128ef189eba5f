"""Every error leaves the server as an OpenAI-style body, ``{"error": {"message", "type", "param", "code"}}``,
with a message that names the field at fault; never a traceback."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from engine.engine import EngineInputError
from engine.prompts import PromptError
from engine.server.scheduler import EngineUnavailable


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers


def _body(status: int, message: str, param: str | None) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error_response(status: int, message: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(_body(status, message, param), status_code=status, headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "header", "path")]
    return ".".join(parts) or "body"


def describe(exc: RequestValidationError) -> tuple[str, str]:
    """``("max_tokens: Input should be ...; stop: ...", "max_tokens")``."""
    errors = exc.errors()
    # a JSON syntax error's location is a character offset, not a field
    locations = ["body" if e["type"] == "json_invalid" else _location(tuple(e["loc"])) for e in errors]
    parts = [f"{loc}: {e['msg']}" for loc, e in zip(locations, errors)]
    return "; ".join(parts), locations[0] if locations else "body"


def _param_of(message: str) -> str | None:
    head, sep, _ = message.partition(":")
    return head if sep and " " not in head else None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = describe(exc)
        return error_response(422, message, param)

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.headers)

    @app.exception_handler(EngineInputError)
    @app.exception_handler(PromptError)
    async def _bad_input(_: Request, exc: ValueError) -> JSONResponse:
        return error_response(400, str(exc), _param_of(str(exc)))

    @app.exception_handler(EngineUnavailable)
    async def _unavailable(_: Request, exc: EngineUnavailable) -> JSONResponse:
        return error_response(503, f"engine unavailable: {exc}")

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, getattr(exc, "headers", None))
