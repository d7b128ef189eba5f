"""``/v1/studies`` on a tiny FastAPI app: start in the background, one per workload, status, list, stop, 4xx."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from storage.db import Database
from storage.profiles import list_active
from storage.runs import list_runs
from tests.policies.synthetic import linear_cost
from tests.tuner.tune_helpers import copy_traces, fresh_traces, migrated_sqlite
from tuner.traces import write_traces
from tuner.tuning.routes import StudyManager, studies_router


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[TestClient, StudyManager, str]]:
    url = migrated_sqlite(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    write_traces(traces / "all.jsonl", copy_traces() + fresh_traces())
    manager = StudyManager(url, traces_dir=traces, cost_model=linear_cost())
    app = FastAPI()
    app.include_router(studies_router(manager))
    with TestClient(app) as client:
        yield client, manager, url
    manager.shutdown()


def test_start_runs_in_background_and_saves_the_profile(setup: tuple[TestClient, StudyManager, str]) -> None:
    client, manager, url = setup
    response = client.post("/v1/studies", json={"workload": "copy", "trials": 12, "seed": 1})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["study_name"] == "copy-replay-throughput" and body["trials_total"] == 12
    assert body["state"] in ("running", "succeeded")
    final = manager.join("copy-replay-throughput", timeout=120)
    assert final.state == "succeeded" and final.trials_done == 12 and final.profile_version == 1
    status = client.get("/v1/studies/copy-replay-throughput").json()
    assert status["state"] == "succeeded" and status["best_values"][0] > 0
    assert [s["study_name"] for s in client.get("/v1/studies").json()] == ["copy-replay-throughput"]
    with Database(url) as db, db.session() as s:
        assert list_active(s, "copy")[0].provenance.study == "copy-replay-throughput"


def test_one_running_study_per_workload_and_stop(setup: tuple[TestClient, StudyManager, str]) -> None:
    client, manager, url = setup
    assert client.post("/v1/studies", json={"workload": "fresh", "trials": 5000}).status_code == 202
    conflict = client.post("/v1/studies", json={"workload": "fresh", "trials": 10, "study_name": "other"})
    assert conflict.status_code == 409 and "already has a running study" in conflict.json()["detail"]
    deadline = time.monotonic() + 60
    while client.get("/v1/studies/fresh-replay-throughput").json()["trials_done"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    stopped = client.post("/v1/studies/fresh-replay-throughput/stop")
    assert stopped.status_code == 202 and stopped.json()["state"] in ("stopping", "stopped")
    final = manager.join("fresh-replay-throughput", timeout=60)
    assert final.state == "stopped" and final.trials_done < 5000 and final.profile_version is None
    assert client.post("/v1/studies/fresh-replay-throughput/stop").status_code == 409
    with Database(url) as db, db.session() as s:
        assert list_runs(s, "fresh")[0].status == "cancelled"
    # another study of the same workload may start once the first has ended
    assert client.post("/v1/studies", json={"workload": "fresh", "trials": 2, "study_name": "other"}).status_code == 202
    assert manager.join("other", timeout=60).state == "succeeded"


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"workload": "copy", "trials": 0}, 422, "trials"),
    ({"workload": "copy", "objective": "speed"}, 422, "objective"),
    ({"workload": "bad name!"}, 422, "workload"),
    ({"workload": "copy", "batch_mix": {"0": 1}}, 422, "batch_mix"),
    ({"workload": "copy", "unknown": 1}, 422, "unknown"),
    ({"workload": "nothing-recorded"}, 422, "workload"),
    ({"workload": "copy", "source": "live"}, 422, "source"),
])
def test_bad_requests_name_the_field(setup: tuple[TestClient, StudyManager, str], body: dict, code: int,
                                     field: str) -> None:
    client, _, _ = setup
    response = client.post("/v1/studies", json=body)
    assert response.status_code == code
    assert field in str(response.json()["detail"])


def test_unknown_study_is_404(setup: tuple[TestClient, StudyManager, str]) -> None:
    client, _, _ = setup
    assert client.get("/v1/studies/nope").status_code == 404
    assert client.post("/v1/studies/nope/stop").status_code == 404


def test_a_study_without_a_batch_mix_is_scored_at_the_observed_one(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    write_traces(traces / "all.jsonl", copy_traces())
    observed = {"copy": {1: 0.25, 8: 0.75}}
    manager = StudyManager(url, traces_dir=traces, cost_model=linear_cost(), observed_mix=observed.get)
    app = FastAPI()
    app.include_router(studies_router(manager))
    try:
        with TestClient(app) as client:
            started = client.post("/v1/studies", json={"workload": "copy", "trials": 3, "seed": 1}).json()
            assert started["batch_mix"] == {"1": 0.25, "8": 0.75}
            assert manager.join("copy-replay-throughput", timeout=120).state == "succeeded"
            given = client.post("/v1/studies", json={"workload": "copy", "trials": 3, "study_name": "given",
                                                     "batch_mix": {"4": 1}}).json()
            assert given["batch_mix"] == {"4": 1.0}
            assert manager.join("given", timeout=120).state == "succeeded"
    finally:
        manager.shutdown()
