"""The ``spectune`` command line. Each sub-command group lives in its own module and keeps heavy imports (torch,
transformers, SQLAlchemy) inside the command bodies, so ``spectune --help`` stays instant."""

from __future__ import annotations

import os

import typer

from tuner.cli.calibrate import calibrate
from tuner.cli.db import db_app
from tuner.cli.demo import demo
from tuner.cli.engine import serve
from tuner.cli.engines import engine_app, engines_app
from tuner.cli.generate import generate
from tuner.cli.models import models_app
from tuner.cli.profiles import profiles_app
from tuner.cli.record import record
from tuner.cli.replay import replay
from tuner.cli.sidecar import sidecar
from tuner.cli.tune import tune

app = typer.Typer(name="spectune", help="Decide, per workload and live, whether speculative decoding pays.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(models_app, name="models")
app.add_typer(db_app, name="db")
app.add_typer(profiles_app, name="profiles")
app.add_typer(engines_app, name="engines")
app.add_typer(engine_app, name="engine")
engine_app.command("serve")(serve)
app.command("replay")(replay)
app.command("generate")(generate)
app.command("record")(record)
app.command("calibrate")(calibrate)
app.command("tune")(tune)
app.command("sidecar")(sidecar)
app.command("demo")(demo)


def main() -> None:
    # Spinning OpenMP workers starve the server's HTTP thread and any neighbour process on a shared CPU, and skew
    # every timing (calibrate, generate --compare, demo): SmolLM2 bf16 with 2 threads beside one busy process measured
    # 0.8-4.6 tok/s spinning vs 10.8-13.7 tok/s passive. Set before any command loads torch; the user's value wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app()
