"""``spectune models list|fetch``: the registered models and their state in the local cache."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from tuner.cli.errors import user_errors

models_app = typer.Typer(help="The models spectune can fetch, convert and load.", no_args_is_help=True)


def _rows() -> list[dict[str, object]]:
    from engine.models import REGISTRY
    from engine.models.cache import gguf_path, is_complete, model_dir

    return [{"name": spec.name, "params": spec.params, "description": spec.description,
             "packages": list(spec.packages), "cached": is_complete(model_dir(spec.name)),
             "path": str(model_dir(spec.name)), "gguf_cached": gguf_path(spec.name).is_file(),
             "gguf_path": str(gguf_path(spec.name))} for spec in REGISTRY.values()]


def _packages_summary(packages: list[str]) -> str:
    return packages[0] if len(packages) == 1 else f"{packages[0]} +{len(packages) - 1} more"


@models_app.command("list")
def list_models(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
                ) -> None:
    """List the registered models, whether each is converted in the cache, and where."""
    rows = _rows()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = [("name", "params", "packages", "cached", "path")]
    table += [(r["name"], r["params"], _packages_summary(r["packages"]), "yes" if r["cached"] else "no", r["path"])
              for r in rows]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(table[0]) - 1)]
    for *cells, path in table:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True)) + f"  {path}")


@models_app.command("fetch")
def fetch(
    names: Annotated[list[str], typer.Argument(help="Registered model names (see `spectune models list`).")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Download, assemble and convert registered models into the cache; print each model's directory."""
    from engine.models import ModelFetchError, fetch_model
    from engine.models.registry import get_spec

    with user_errors():
        for name in names:
            get_spec(name)
        for name in names:
            try:
                path = fetch_model(name, progress=not quiet)
            except ModelFetchError as exc:
                print(f"error: {exc}", file=sys.stderr)
                raise typer.Exit(code=1) from None
            print(path)
