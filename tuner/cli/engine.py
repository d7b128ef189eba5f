"""``spectune engine serve``: the OpenAI-compatible engine server with live speculation control. Registered on the
``engine`` group next to ``engine launch llama.cpp``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.cli.errors import user_errors
from tuner.cli.options import DRAFT_DTYPE_HELP

if TYPE_CHECKING:
    from engine.server.settings import ServerSettings
    from engine.server.state import ServerState

def serve(
    target: Annotated[str, typer.Option(help="Target model: registry name, model directory or .gguf file.")],
    draft: Annotated[str | None, typer.Option(help="Draft model for method 'draft' (same tokenizer).")] = None,
    dtype: Annotated[str, typer.Option(help="float32 | bfloat16 | float16 (CUDA only).")] = "float32",
    draft_dtype: Annotated[str | None, typer.Option(help=DRAFT_DTYPE_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8001,
    max_batch: Annotated[int, typer.Option(help="Requests in the running batch at most.")] = 8,
    profile_source: Annotated[str | None, typer.Option(
        help="Sidecar URL or exported profile JSON applied at startup; on failure the default is used.")] = None,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error.")] = "info",
) -> None:
    """Load the models, apply the startup profiles, and serve until interrupted.

    Admin endpoints need ``Authorization: Bearer $SPECTUNE_ADMIN_TOKEN`` when that variable is set; a sidecar profile
    source is sent ``$SPECTUNE_API_TOKEN``.
    """
    from engine.server.settings import ServerSettings

    with user_errors():
        settings = ServerSettings(target=target, draft=draft, dtype=dtype, draft_dtype=draft_dtype, host=host,
                                  port=port, max_batch=max_batch, profile_source=profile_source)
        level = logging.getLevelNamesMapping().get(log_level.upper())
        if level is None:
            raise ValueError(f"log-level: {log_level!r} is not one of debug, info, warning, error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from engine.server.app import create_app

    with user_errors():
        state = _load(settings)
    uvicorn.run(create_app(state), host=settings.host, port=settings.port, log_level=log_level.lower(),
                timeout_graceful_shutdown=5)


def _load(settings: ServerSettings) -> ServerState:
    from engine.models import load_pair
    from engine.server.state import build_state

    target, draft = load_pair(settings.target, settings.draft, settings.dtype, settings.draft_dtype)
    return build_state(settings, target, draft)
