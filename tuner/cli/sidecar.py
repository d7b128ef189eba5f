"""``spectune sidecar``: the tuning service (REST API) and, with ``--engine-url``, the controller steering it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.db import DbOption, cli_errors


def sidecar(
    engine_url: Annotated[str | None, typer.Option(
        help="spectune engine server to steer (its /stats and /admin/spec-config); without it: API only.")] = None,
    db: DbOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8002,
    policy: Annotated[str, typer.Option(help="goodput SPEC the controller prices configs with.")] = "goodput",
    cost_model: Annotated[Path | None, typer.Option(help="Cost model JSON from `spectune calibrate`.")] = None,
    poll_interval: Annotated[float, typer.Option(help="Seconds between reads of the engine's /stats.")] = 1.0,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error.")] = "info",
) -> None:
    """Serve the sidecar API until interrupted; /v1 needs ``Authorization: Bearer $SPECTUNE_API_TOKEN`` when set, and
    the engine's /admin is sent ``$SPECTUNE_ADMIN_TOKEN``. Refuses a database whose schema is out of date."""
    from tuner.sidecar.settings import Settings

    overrides: dict[str, object] = {"host": host, "port": port, "policy": policy, "poll_interval_s": poll_interval}
    for key, value in (("engine_url", engine_url), ("db_url", db), ("cost_model", cost_model)):
        if value is not None:
            overrides[key] = value
    with cli_errors():
        settings = Settings(**overrides)
        level = logging.getLevelNamesMapping().get(log_level.upper())
        if level is None:
            raise ValueError(f"log-level: {log_level!r} is not one of debug, info, warning, error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(max(level, logging.WARNING))
    import uvicorn

    from tuner.sidecar.app import create_app
    from tuner.sidecar.service import build_service

    with cli_errors():
        state = build_service(settings)
    uvicorn.run(create_app(state), host=settings.host, port=settings.port, log_level=log_level.lower(),
                timeout_graceful_shutdown=5)
