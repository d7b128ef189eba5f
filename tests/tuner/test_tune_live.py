"""Live searches and confirmation on a real engine server (a tiny random model as target and draft, on loopback)
through the spectune engine client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config import SpecConfig
from storage.db import Database
from storage.profiles import list_active
from tests.engine.server_harness import ServerProcess, save_tiny_server_model
from tests.policies.synthetic import linear_cost
from tests.tuner.tune_helpers import copy_traces, migrated_sqlite
from tuner.engines.spectune import SpectuneEngine
from tuner.tuning.study import tune

PROMPTS = ["abcabcabcabc", "hello hello hello", "x = 1; x = 1; x ="]
TINY_ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpectuneEngine]:
    tmp = tmp_path_factory.mktemp("live")
    model = save_tiny_server_model(tmp / "model")
    proc = ServerProcess(["--target", str(model), "--draft", str(model), "--max-batch", "4"], tmp / "server.log",
                         TINY_ENV)
    client = SpectuneEngine(proc.url, timeout_s=120)
    client.start()
    yield client
    client.stop()
    proc.stop()


def test_replay_candidates_are_confirmed_live_before_saving(engine: SpectuneEngine, tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    result = tune("copy", 10, storage_url=url, traces=copy_traces(), cost=linear_cost(), seed=4, progress=False,
                  engine=engine, prompts=PROMPTS, max_tokens=16, confirm_top=2)
    assert len(result.confirmed) == 2
    assert all(c["tokens_per_s"] > 0 and c["tokens_per_s_off"] > 0 for c in result.confirmed)
    profile = result.profile
    assert profile is not None and profile.provenance.note.startswith("confirmed live on 3 prompts")
    pick = next(c for c in result.confirmed if c["trial"] == profile.provenance.trial)
    assert pick["tokens_per_s"] == max(c["tokens_per_s"] for c in result.confirmed)
    bucket = profile.measurements.buckets[0]
    assert bucket.batch_size == 1 and bucket.samples == len(PROMPTS)
    assert bucket.tokens_per_s == pytest.approx(pick["tokens_per_s"])
    assert bucket.tokens_per_s_off == pytest.approx(pick["tokens_per_s_off"])
    served = engine.spec_configs()
    assert SpecConfig.model_validate(served["workloads"]["copy"]) == profile.config


def test_live_source_scores_trials_on_the_engine(engine: SpectuneEngine, tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    result = tune("live-w", 4, source="live", storage_url=url, seed=0, progress=False, engine=engine,
                  prompts=PROMPTS, max_tokens=12, confirm_top=1)
    assert result.trials_done == 4 and result.best[0]["values"][0] > 0
    with Database(url) as db, db.session() as s:
        active = list_active(s, "live-w")
    assert active[0].provenance.study == "live-w-live-throughput"
    assert active[0].measurements.buckets[0].samples == len(PROMPTS)
