"""Synthetic workloads for the tuning tests: a copy-heavy one (n-gram lookup predicts everything) and one whose
outputs are fresh tokens the draft never ranks first (acceptance 0)."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from storage import migrate
from storage.db import Database
from tests.policies.synthetic import make_trace
from tuner.traces import Trace


def copy_traces(workload: str = "copy", requests: int = 4, repeats: int = 2) -> list[Trace]:
    """The output repeats the prompt ``repeats`` times: after its first token every n-gram lookup is right."""
    out = []
    for r in range(requests):
        prompt = list(range(100 + 50 * r, 140 + 50 * r))
        out.append(make_trace(prompt * repeats, prompt=prompt, workload=workload, request_id=f"c{r}",
                              ranks=[3] * (40 * repeats)))
    return out


def fresh_traces(workload: str = "fresh", requests: int = 4) -> list[Trace]:
    """Every token is new (no n-gram matches) and the draft never ranks it first."""
    out = []
    for r in range(requests):
        base = 5000 + 200 * r
        out.append(make_trace(list(range(base + 10, base + 70)), prompt=list(range(base, base + 10)),
                              workload=workload, request_id=f"f{r}", ranks=[8] * 60))
    return out


def mixed_traces(workload: str = "mixed", requests: int = 8) -> list[Trace]:
    """Fresh tokens (no n-gram matches) that the draft ranks first with probability 0.8 (a seeded pattern): draft
    chains pay off while a step is cheap (small batches), not when verify cost grows with the batch's tokens."""
    out = []
    for r in range(requests):
        base = 1000 * (r + 1)
        output = list(range(base + 100, base + 196))
        hits = random.Random(r)
        out.append(make_trace(output, prompt=list(range(base, base + 16)), workload=workload, request_id=f"m{r}",
                              ranks=[0 if hits.random() < 0.8 else 8 for _ in output]))
    return out


def migrated_sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / f'{uuid.uuid4().hex[:8]}.db'}"
    with Database(url) as db:
        migrate.upgrade(db)
    return url


@contextmanager
def migrated_postgres() -> Iterator[str]:
    """A fresh, migrated database on the server at SPECTUNE_TEST_PG_URL, dropped afterwards."""
    server = make_url(os.environ["SPECTUNE_TEST_PG_URL"])
    name = f"spectune_tune_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = server.set(database=name).render_as_string(hide_password=False)
        with Database(url) as db:
            migrate.upgrade(db)
        yield url
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
