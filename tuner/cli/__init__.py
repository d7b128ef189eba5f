"""The ``spectune`` command line. Each sub-command group lives in its own module and keeps heavy imports (torch,
transformers, SQLAlchemy) inside the command bodies, so ``spectune --help`` stays instant."""

from __future__ import annotations

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
    app()
