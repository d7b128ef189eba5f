"""``spectune profiles list|show|put|activate|rollback|history|delete``: versioned speculation profiles per workload."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.cli.db import DbOption, JsonOption, cli_errors, open_database
from tuner.cli.errors import UsageError

if TYPE_CHECKING:
    from storage.identity import EngineIdentity
    from storage.schemas import ProfileRecord

profiles_app = typer.Typer(help="Versioned speculation profiles per workload (one active per engine identity).",
                           no_args_is_help=True)

Workload = Annotated[str, typer.Argument(help="Workload name.", show_default=False)]
Version = Annotated[str | None, typer.Option("--version", metavar="N", help="Profile version.", show_default=False)]
Target = Annotated[str | None, typer.Option(help="Engine identity: target model.", show_default=False)]
Draft = Annotated[str | None, typer.Option(help="Engine identity: draft model.", show_default=False)]
Dtype = Annotated[str | None, typer.Option(help="Engine identity: dtype.", show_default=False)]
Hardware = Annotated[str | None, typer.Option(help="Engine identity: hardware fingerprint.", show_default=False)]


@profiles_app.command("list")
def list_profiles(workload: Annotated[str | None, typer.Option(help="Only this workload.")] = None,
                  db: DbOption = None, as_json: JsonOption = False) -> None:
    """List the active profiles: one per workload and engine identity."""
    from storage import profiles

    with cli_errors(), open_database(db) as database, database.session(readonly=True) as session:
        records = profiles.list_active(session, workload)
    _print_records(records, as_json)


@profiles_app.command("show")
def show(workload: Workload, version: Version = None, target: Target = None, draft: Draft = None, dtype: Dtype = None,
         hardware: Hardware = None, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show one profile: ``--version N``, else the active one that applies to the engine identity given (exact before
    portable); with neither, the workload's only active profile."""
    from storage import profiles

    with cli_errors(), open_database(db) as database, database.session(readonly=True) as session:
        if version is not None:
            record = profiles.get_profile(session, workload, _version(version))
        elif any(v is not None for v in (target, draft, dtype, hardware)):
            engine = _identity(target, draft, dtype, hardware)
            record = profiles.resolve(session, workload, engine)
            if record is None:
                raise UsageError(f"no active profile of workload {workload!r} applies to {engine}")
        else:
            record = _only_active(profiles.list_active(session, workload), workload)
    _print_record(record, as_json)


@profiles_app.command("put")
def put(workload: Workload,
        config: Annotated[str, typer.Option(metavar="JSON_OR_FILE", help="Speculation config (SpecConfig JSON).")],
        target: Target = None, draft: Draft = None, dtype: Dtype = None, hardware: Hardware = None,
        schedule: Annotated[str | None, typer.Option(
            metavar="JSON_OR_FILE", help="List of {min_batch, max_batch, min_context, max_context, config}.")] = None,
        measurements: Annotated[str | None, typer.Option(
            metavar="JSON_OR_FILE", help="{buckets: [{batch_size, tokens_per_s, samples, ...}]}.")] = None,
        note: Annotated[str | None, typer.Option(help="Free-text provenance note.")] = None,
        activate: Annotated[bool, typer.Option(help="Make the new version the active one.")] = True,
        db: DbOption = None, as_json: JsonOption = False) -> None:
    """Store a new profile version for the workload (created if new) and, by default, activate it."""
    from storage import profiles
    from storage.schemas import ProfileCreate

    with cli_errors():
        new = ProfileCreate.model_validate({
            "config": _json_arg("--config", config),
            "identity": _identity(target, draft, dtype, hardware),
            "schedule": _json_arg("--schedule", schedule) if schedule is not None else None,
            "measurements": _json_arg("--measurements", measurements) if measurements is not None else None,
            "provenance": {"kind": "manual", "note": note},
        })
        with open_database(db) as database, database.session() as session:
            record = profiles.put_profile(session, workload, new, activate=activate)
    _print_record(record, as_json)


@profiles_app.command("activate")
def activate(workload: Workload, version: Annotated[str, typer.Option("--version", metavar="N", help="Version.")],
             db: DbOption = None, as_json: JsonOption = False) -> None:
    """Make a stored version the active profile of its engine identity."""
    from storage import profiles

    with cli_errors(), open_database(db) as database, database.session() as session:
        record = profiles.activate(session, workload, _version(version))
    _print_record(record, as_json)


@profiles_app.command("rollback")
def rollback(workload: Workload, target: Target = None, draft: Draft = None, dtype: Dtype = None,
             hardware: Hardware = None, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Activate the version before the active one, for exactly this engine identity (portable if none given)."""
    from storage import profiles

    with cli_errors(), open_database(db) as database, database.session() as session:
        record = profiles.rollback(session, workload, _identity(target, draft, dtype, hardware))
    _print_record(record, as_json)


@profiles_app.command("history")
def history(workload: Workload, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Every version of the workload, newest first."""
    from storage import profiles

    with cli_errors(), open_database(db) as database, database.session(readonly=True) as session:
        records = profiles.history(session, workload)
    _print_records(records, as_json)


@profiles_app.command("delete")
def delete(workload: Workload, version: Annotated[str, typer.Option("--version", metavar="N", help="Version.")],
           force: Annotated[bool, typer.Option(help="Also delete the active version (its identity is then left "
                                                    "without an active profile).")] = False,
           db: DbOption = None, as_json: JsonOption = False) -> None:
    """Delete one version; the active one is refused unless --force."""
    from storage import profiles

    with cli_errors():
        number = _version(version)
        with open_database(db) as database, database.session() as session:
            profiles.delete_profile(session, workload, number, force=force)
    print(json.dumps({"workload": workload, "deleted": number}) if as_json
          else f"deleted version {number} of workload {workload}")


@profiles_app.command("export")
def export(
    out: Annotated[Path, typer.Option("--out", help="File to write.", show_default=False)],
    model: Annotated[str, typer.Option("--model", help="Registered model name or .gguf the presets serve.")],
    export_format: Annotated[str, typer.Option("--format", help="Output: llamacpp-presets.")] = "llamacpp-presets",
    draft: Annotated[str | None, typer.Option("--draft", help="Draft model name or .gguf (method draft).")] = None,
    threads: Annotated[int, typer.Option("--threads", min=1, help="CPU threads per server.")] = 2,
    ctx_size: Annotated[int, typer.Option("--ctx-size", min=128, help="Context length per server.")] = 4096,
    db: DbOption = None,
) -> None:
    """Write a llama-server router preset file (--models-preset): one preset per workload with its active profile."""
    from tuner.engines.llamacpp_presets import export_presets

    with cli_errors():
        if export_format != "llamacpp-presets":
            raise UsageError(f"--format: expected llamacpp-presets, got {export_format!r}")
        with open_database(db) as database, database.session(readonly=True) as session:
            written = export_presets(session, out, model=model, draft=draft, threads=threads, ctx_size=ctx_size)
    for preset in written.presets:
        print(f"{preset.workload}: v{preset.version} {preset.label}")
    for reason in written.skipped:
        print(f"skipped {reason}", file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)


def _version(text: str) -> int:
    # Parsed here rather than by click so that a bad value is one `error:` line like every other input error.
    if not text.strip().isdigit() or int(text) < 1:
        raise UsageError(f"--version: expected a positive integer, got {text!r}")
    return int(text)


def _identity(target: str | None, draft: str | None, dtype: str | None, hardware: str | None) -> EngineIdentity:
    from storage.identity import EngineIdentity

    return EngineIdentity(target=target, draft=draft, dtype=dtype, hardware=hardware)


def _json_arg(option: str, value: str) -> Any:
    """Inline JSON (starting with ``{`` or ``[``) or the path of a JSON file."""
    text, where = value.strip(), ""
    if not text.startswith(("{", "[")):
        path = Path(value).expanduser()
        if not path.is_file():
            raise UsageError(f"{option}: neither inline JSON nor an existing file: {value!r}")
        text, where = path.read_text(), f" in {path}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option}: invalid JSON{where}: {exc}") from None


def _only_active(records: list[ProfileRecord], workload: str) -> ProfileRecord:
    if not records:
        raise UsageError(f"workload {workload!r} has no active profile")
    if len(records) > 1:
        found = "; ".join(f"version {r.version} for {r.identity}" for r in records)
        raise UsageError(f"workload {workload!r} has {len(records)} active profiles ({found}); "
                         "pass --version or the engine identity (--target/--draft/--dtype/--hardware)")
    return records[0]


def _print_records(records: list[ProfileRecord], as_json: bool) -> None:
    from storage.schemas import describe_profile

    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
        return
    rows = [("workload", "version", "active", "identity", "config", "provenance", "created")]
    rows += [(r.workload, str(r.version), "*" if r.active else "", str(r.identity),
              describe_profile(r.config, r.schedule), r.provenance.kind, _when(r.created_at)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _print_record(record: ProfileRecord, as_json: bool) -> None:
    from storage.schemas import span

    if as_json:
        print(json.dumps(record.model_dump(mode="json"), indent=2))
        return
    p = record.provenance
    origin = ", ".join(x for x in (p.kind, p.study and f"study {p.study}",
                                   p.trial is not None and f"trial {p.trial}", p.note) if x)
    lines = [
        f"workload:     {record.workload}",
        f"version:      {record.version}{' (active)' if record.active else ''}",
        f"identity:     {record.identity}",
        f"config:       {record.config.label()}  {json.dumps(record.config.model_dump(mode='json'))}",
        f"provenance:   {origin}",
        f"created:      {_when(record.created_at)}",
    ]
    if record.activated_at is not None:
        lines.append(f"activated:    {_when(record.activated_at)}")
    if record.schedule is not None:
        lines += ["schedule:"] + [
            f"  batch {span(e.min_batch, e.max_batch)}, context {span(e.min_context, e.max_context)}: "
            f"{e.config.label()}" for e in record.schedule.root]
    if record.measurements is not None:
        lines += ["measurements:"] + [
            f"  batch {b.batch_size}: {b.tokens_per_s:.1f} tokens/s"
            + (f" (off {b.tokens_per_s_off:.1f})" if b.tokens_per_s_off is not None else "")
            + (f", mean acceptance length {b.mean_acceptance_length:.2f}" if b.mean_acceptance_length else "")
            + (f", p99 {b.latency_p99_ms:.1f} ms" if b.latency_p99_ms is not None else "")
            + f", {b.samples} samples" for b in record.measurements.buckets]
    print("\n".join(lines))


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
