"""The sidecar REST API on a migrated SQLite database: auth, profiles, engine startup profiles, exports, decisions,
errors (401/404/409/422 naming the field) and the schema check at startup."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.config import SpecConfig
from engine.server.profile_source import ProfileSet
from storage import migrate
from storage.db import Database
from storage.decisions import record_decision
from storage.errors import SchemaOutOfDateError
from storage.schemas import DecisionCreate
from tuner.sidecar.app import build_state, create_app
from tuner.sidecar.service import build_service
from tuner.sidecar.settings import Settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NGRAM = {"method": "ngram", "k": 4}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'sidecar.db'}"
    with Database(url) as db:
        migrate.upgrade(db)
    return url


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    state = build_service(Settings(api_token=TOKEN, db_url=db_url))
    with TestClient(create_app(state)) as test_client:
        yield test_client
    state.db.dispose()


def _put(client: TestClient, workload: str, config: dict, **extra: object) -> dict:
    response = client.post("/v1/profiles", json={"workload": workload, "config": config, **extra}, headers=AUTH)
    assert response.status_code == 201, response.text
    return response.json()


def test_token_is_required_on_v1_but_not_on_health_and_metrics(client: TestClient) -> None:
    assert client.get("/v1/profiles").status_code == 401
    wrong = client.get("/v1/profiles", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.json()["error"]["param"] == "authorization"
    assert "'Bearer <SPECTUNE_API_TOKEN>'" in wrong.json()["error"]["message"]
    assert wrong.headers["www-authenticate"] == "Bearer"
    assert client.get("/v1/profiles", headers={"Authorization": TOKEN}).status_code == 401  # scheme missing
    assert client.get("/v1/profiles", headers=AUTH).json() == []
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["database"] == "ok" and health["engine_reachable"] is None
    assert "spectune_sidecar:tuning_runs" in client.get("/metrics").text


def test_profile_lifecycle_versions_activate_rollback(client: TestClient) -> None:
    first = _put(client, "code", NGRAM)
    second = _put(client, "code", {"method": "ngram", "k": 8})
    assert (first["version"], second["version"]) == (1, 2)
    assert [p["version"] for p in client.get("/v1/profiles", headers=AUTH).json()] == [2]
    assert [p["version"] for p in client.get("/v1/profiles/code/versions", headers=AUTH).json()] == [2, 1]
    assert client.get("/v1/profiles/code/versions/1", headers=AUTH).json()["config"]["k"] == 4
    back = client.post("/v1/profiles/code/rollback", headers=AUTH)
    assert back.status_code == 200 and back.json()["version"] == 1
    assert client.get("/v1/profiles/code", headers=AUTH).json()["version"] == 1
    again = client.post("/v1/profiles/code/rollback", headers=AUTH)
    assert again.status_code == 409 and "no version before 1" in again.json()["error"]["message"]
    assert client.post("/v1/profiles/code/versions/2/activate", headers=AUTH).json()["active"] is True
    inactive = _put(client, "code", {"method": "off"}, activate=False)
    assert inactive["active"] is False
    assert client.get("/v1/profiles/code", headers=AUTH).json()["version"] == 2


def test_not_found_and_validation_errors_name_the_field(client: TestClient) -> None:
    missing = client.get("/v1/profiles/nope/versions", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "unknown workload 'nope'"
    assert client.get("/v1/profiles/code/versions/9", headers=AUTH).status_code == 404
    bad_k = client.post("/v1/profiles", json={"workload": "w", "config": {"method": "ngram", "k": 0}}, headers=AUTH)
    assert bad_k.status_code == 422 and bad_k.json()["error"]["param"] == "config.k"
    bad_name = client.post("/v1/profiles", json={"workload": "-x", "config": NGRAM}, headers=AUTH)
    assert bad_name.status_code == 422 and bad_name.json()["error"]["param"] == "workload"
    extra = client.post("/v1/profiles", json={"workload": "w", "config": NGRAM, "colour": 1}, headers=AUTH)
    assert extra.status_code == 422 and extra.json()["error"]["param"] == "colour"
    not_json = client.post("/v1/profiles", content=b"{", headers=AUTH | {"Content-Type": "application/json"})
    assert not_json.status_code == 422 and not_json.json()["error"]["param"] == "body"
    bad_limit = client.get("/v1/decisions?limit=0", headers=AUTH)
    assert bad_limit.status_code == 422 and bad_limit.json()["error"]["param"] == "limit"


def test_engine_profile_exact_identity_beats_portable_and_reads_as_the_engines_profile_set(client: TestClient) -> None:
    _put(client, "code", NGRAM)
    _put(client, "code", {"method": "ngram", "k": 2}, identity={"target": "t", "dtype": "float32"})
    _put(client, "chat", {"method": "off"})
    _put(client, "default", {"method": "ngram", "k": 3})
    _put(client, "team/a", NGRAM)  # a storage name the engine cannot take
    _put(client, "drafty", {"method": "draft", "k": 4})
    exact = client.get("/v1/engine-profile?target=t&dtype=float32&hardware=cpu", headers=AUTH).json()
    assert exact["workloads"]["code"]["k"] == 2 and exact["versions"]["code"] == 2
    assert exact["default"]["k"] == 3 and exact["workloads"]["chat"]["method"] == "off"
    assert set(exact["skipped"]) == {"team/a", "drafty"}
    other = client.get("/v1/engine-profile?target=other&dtype=float32&draft=d", headers=AUTH).json()
    assert other["workloads"]["code"]["k"] == 4 and other["workloads"]["drafty"]["method"] == "draft"
    parsed = ProfileSet.model_validate(exact)
    assert parsed.workloads["code"] == SpecConfig(method="ngram", k=2)
    assert client.get("/v1/engine-profile").status_code == 401


def test_export_calls_the_exporter_for_each_format(client: TestClient) -> None:
    _put(client, "code", NGRAM)
    vllm = client.get("/v1/profiles/code/export?format=vllm", headers=AUTH)
    assert vllm.status_code == 200, vllm.text
    assert vllm.json()["config"]["num_speculative_tokens"] == 4 and "--speculative-config" in vllm.json()["args"]
    assert client.get("/v1/profiles/code/export?format=json&version=1", headers=AUTH).json()["config"]["config"][
        "method"] == "ngram"
    bad = client.get("/v1/profiles/code/export?format=tgi", headers=AUTH)
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "format"


def test_decisions_audit_trail_filters_and_pages(client: TestClient, db_url: str) -> None:
    with Database(db_url) as db, db.session() as session:
        for kind in ("hold", "apply", "rollback"):
            record_decision(session, "code", DecisionCreate(kind=kind, reason=f"{kind} because", evidence={"n": 1},
                                                            to_config=SpecConfig(method="ngram")))
    trail = client.get("/v1/decisions", headers=AUTH).json()
    assert [d["kind"] for d in trail] == ["rollback", "apply", "hold"]
    assert trail[0]["evidence"] == {"n": 1} and trail[0]["to_config"]["method"] == "ngram"
    assert [d["kind"] for d in client.get("/v1/decisions?kind=apply", headers=AUTH).json()] == ["apply"]
    page = client.get(f"/v1/decisions?before_id={trail[0]['id']}&limit=1", headers=AUTH).json()
    assert [d["kind"] for d in page] == ["apply"]
    assert client.get("/v1/decisions?workload=nope", headers=AUTH).status_code == 404
    assert client.get("/v1/decisions?kind=bogus", headers=AUTH).json()["error"]["param"] == "kind"


def test_recommendation_needs_a_controller(client: TestClient) -> None:
    response = client.get("/v1/recommendation?workload=code", headers=AUTH)
    assert response.status_code == 404 and "--engine-url" in response.json()["error"]["message"]


def test_refuses_an_out_of_date_schema_naming_the_upgrade_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Database(url) as db:
        migrate.upgrade(db, "0001")
    with pytest.raises(SchemaOutOfDateError, match=r"spectune db upgrade"):
        build_state(Settings(db_url=url))


def test_studies_router_is_included_behind_the_token(client: TestClient) -> None:
    assert client.get("/v1/studies").status_code == 401
    assert client.get("/v1/studies", headers=AUTH).json() == []
    replay = client.post("/v1/studies", json={"workload": "code", "trials": 2}, headers=AUTH)
    assert replay.status_code == 422 and "--traces" in replay.text
    assert "spectune_sidecar:tuning_runs" in client.get("/metrics").text
