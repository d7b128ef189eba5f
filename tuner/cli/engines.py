"""``spectune engines install llama.cpp`` and ``spectune engine launch llama.cpp``: external engines spectune steers."""

from __future__ import annotations

import json
import shlex
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from tuner.cli.errors import UsageError, user_errors
from tuner.cli.signals import sigterm_interrupts

engines_app = typer.Typer(help="Install the external engines spectune can steer.", no_args_is_help=True)
engine_app = typer.Typer(help="Run an engine: spectune's own server or an external one.", no_args_is_help=True)


class EngineName(StrEnum):
    llamacpp = "llama.cpp"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@engines_app.command("install")
def install(
    engine: Annotated[EngineName, typer.Argument(help="The engine to build.")],
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, max=64, help="Parallel compile jobs.")] = 2,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Build llama.cpp's llama-server from the llama-cpp-python sdist on PyPI into the cache (reused when present);
    print the binary's path."""
    from tuner.engines.llamacpp_install import InstallError, install_llama_server

    try:
        installed = install_llama_server(jobs=jobs, progress=(lambda _: None) if quiet else _progress)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=1) from None
    print(installed.server)


def parse_config_json(text: str) -> tuple[Any, dict[str, Any] | None]:
    """``--config`` JSON -> (SpecConfig, the ``llamacpp`` extension dict or None)."""
    from engine.config import SpecConfig

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--config: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise UsageError("--config: expected a JSON object, e.g. {\"method\": \"ngram\", \"k\": 8}")
    extension = raw.pop("llamacpp", None)
    if extension is not None and not isinstance(extension, dict):
        raise UsageError("llamacpp: expected a JSON object of llama.cpp settings")
    return SpecConfig.model_validate(raw), extension


def _stored_config(workload: str, model: str, draft: str | None, db: str | None) -> Any:
    from tuner.cli.db import cli_errors, open_database
    from tuner.engines.llamacpp_profiles import active_config, llamacpp_identity

    with cli_errors():
        database = open_database(db)
        with database.session(readonly=True) as session:
            return active_config(session, workload, llamacpp_identity(model, draft))


@engine_app.command("launch")
def launch(
    engine: Annotated[EngineName, typer.Argument(help="The engine to run.")],
    model: Annotated[str, typer.Option("--model", help="Registered model name or a .gguf file.")],
    config: Annotated[str | None, typer.Option(
        "--config", help="SpecConfig JSON; llama.cpp-only settings under \"llamacpp\", e.g. {\"method\": \"ngram\", "
        "\"k\": 16, \"min_n\": 16, \"max_n\": 16, \"llamacpp\": {\"spec_type\": \"ngram-mod\"}}. "
        "Default: speculation off.")] = None,
    workload: Annotated[str | None, typer.Option(
        "--workload", help="Launch with this workload's active stored profile instead of --config.")] = None,
    db: Annotated[str | None, typer.Option(
        "--db", metavar="URL", show_default=False,
        help="Database URL for --workload; default $SPECTUNE_DB_URL, else the SQLite file in the user data "
             "directory.")] = None,
    draft: Annotated[str | None, typer.Option("--draft", help="Draft model name or .gguf (method draft).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535, help="Port (default: a free one).")] = None,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for decode and prefill.")] = 2,
    ctx_size: Annotated[int, typer.Option("--ctx-size", min=128, help="Context length per server.")] = 4096,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the llama-server command and exit.")] = False,
) -> None:
    """Start llama-server on 127.0.0.1 with a speculation config (given, or a workload's stored profile) and serve
    until interrupted (Ctrl-C)."""
    from tuner.engines.base import EngineError
    from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf
    from tuner.engines.llamacpp_install import InstallError, default_install, find_llama_server
    from tuner.engines.llamacpp_server import ServerOptions, free_port, server_command

    with user_errors():
        if config is not None and workload is not None:
            raise UsageError("--config and --workload: give one of them, not both")
        if workload is not None:
            spec, extension = _stored_config(workload, model, draft, db)
        else:
            spec, extension = parse_config_json(config or '{"method": "off"}')
        options = ServerOptions(model=resolve_gguf(model, "--model"), threads=threads, ctx_size=ctx_size, port=port)
        adapter = LlamaCppEngine(options, draft_model=resolve_gguf(draft, "--draft") if draft else None)
        flags = adapter.flags_for(spec, extension)
    if dry_run:
        print(shlex.join(server_command(default_install().server, options, port or free_port(), flags)))
        return
    sigterm_interrupts()
    try:
        find_llama_server()
        adapter.apply(workload or "default", spec, extension)
    except (InstallError, EngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=1) from None
    process = adapter.process
    assert process is not None
    try:  # from here on Ctrl-C stops the server: a caller may send it as soon as it reads the ready line
        print(f"llama-server ready at {process.url} (pid {process.pid}): {spec.label()}", file=sys.stderr)
        print(shlex.join(process.command), file=sys.stderr, flush=True)
        code = process.wait()
    except KeyboardInterrupt:
        code = 0
    finally:
        adapter.stop()
    raise typer.Exit(code=code)


@engine_app.command("tune")
def tune(
    engine: Annotated[EngineName, typer.Argument(help="The engine to tune.")],
    model: Annotated[str, typer.Option("--model", help="Registered model name or a .gguf file.")],
    workload: Annotated[str, typer.Option("--workload", help="Workload to tune (its profile is stored).")],
    draft: Annotated[str | None, typer.Option("--draft", help="Draft model name or .gguf (adds method draft).")]
    = None,
    prompts: Annotated[int | None, typer.Option(
        "--prompts", min=1, help="Use the first N prompts of the shipped set named like the workload.")] = None,
    trials: Annotated[int, typer.Option("--trials", min=1, help="Optuna trials (one llama-server launch each, "
                                                                "reused when a config repeats).")] = 6,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Tokens per request.")] = 96,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Interleaved rounds confirming the best "
                                                                "candidates against off.")] = 2,
    confirm_top: Annotated[int, typer.Option("--confirm-top", min=1, help="Candidates confirmed.")] = 2,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads for decode and prefill.")] = 2,
    db: Annotated[str | None, typer.Option("--db", metavar="URL", show_default=False,
                                           help="Database URL; default $SPECTUNE_DB_URL.")] = None,
) -> None:
    """Live Optuna search over llama-server's speculation flags for one workload: each trial launches the server
    with a config and sends the workload's prompts; the best candidates are re-measured against off on fresh
    servers, and the winner (off unless it beats off by 10%) is stored as the workload's active profile for this
    model pair. Run `spectune engine launch llama.cpp --workload W` to serve with it."""
    from tuner.cli.db import cli_errors, open_database
    from tuner.engines.base import EngineError
    from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf
    from tuner.engines.llamacpp_install import InstallError, find_llama_server
    from tuner.engines.llamacpp_profiles import llamacpp_identity
    from tuner.engines.llamacpp_server import ServerOptions
    from tuner.engines.llamacpp_tuning import tune_llamacpp, workload_prompts
    from tuner.workloads import SHIPPED

    with cli_errors():
        if workload not in SHIPPED:
            raise UsageError(f"--workload: no shipped prompt set named {workload!r} (shipped: {', '.join(SHIPPED)})")
        with open_database(db) as database:
            url = database.url.render_as_string(hide_password=False)
        adapter = LlamaCppEngine(ServerOptions(model=resolve_gguf(model, "--model"), threads=threads),
                                 draft_model=resolve_gguf(draft, "--draft") if draft else None)
    sigterm_interrupts()
    try:
        find_llama_server()
        result = tune_llamacpp(adapter, workload, workload_prompts(workload, prompts), storage_url=url,
                               identity=llamacpp_identity(model, draft), trials=trials, has_draft=draft is not None,
                               max_tokens=max_tokens, confirm_top=confirm_top, rounds=rounds, log=_progress)
    except (InstallError, EngineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        print("interrupted: the study keeps its finished trials; run the same command to resume", file=sys.stderr)
        raise typer.Exit(code=130) from None
    finally:
        adapter.stop()
    print(f"{workload}: {result.chosen.label()} (profile version {result.profile.version}, study {result.study_name})")
