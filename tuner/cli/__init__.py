"""The ``spectune`` command line. Each sub-command group lives in its own module and keeps heavy imports (torch,
transformers, SQLAlchemy) inside the command bodies, so ``spectune --help`` stays instant."""

from __future__ import annotations

import typer

app = typer.Typer(name="spectune", help="Decide, per workload and live, whether speculative decoding pays.",
                  no_args_is_help=True, pretty_exceptions_enable=False)


def main() -> None:
    app()
