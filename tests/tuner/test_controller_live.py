"""The controller against a real engine server subprocess (tiny random models on loopback): it converges to n-gram
speculation where the output repeats the prompt, turns speculation off where a random draft model is never accepted,
startup profiles from a real sidecar subprocess reach the engine, and the engine serves on when the sidecar is down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from engine.config import SpecConfig
from engine.models import load_model
from storage import migrate
from storage.db import Database
from storage.decisions import list_decisions
from tests.engine.server_harness import ServerProcess, free_port, save_tiny_server_model
from tuner.calibrate import Grid, calibrate
from tuner.controller.estimate import Estimator, build_estimator
from tuner.controller.loop import Controller
from tuner.controller.stabilise import Stabiliser, StabilityOptions
from tuner.engines.spectune import SpectuneEngine

ADMIN = "admin-token"
API = "api-token"
ENV = {"OMP_NUM_THREADS": "1", "SPECTUNE_ADMIN_TOKEN": ADMIN, "SPECTUNE_API_TOKEN": API}
FAST = StabilityOptions(off_window_s=1.0, on_window_s=2.0, change_window_s=2.0, rollback_window_s=3.0,
                        min_samples=32, max_changes=4, rate_window_s=600)
REPEATING = "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab "


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return save_tiny_server_model(root / "target", seed=0), save_tiny_server_model(root / "draft", seed=7)


@pytest.fixture(scope="module")
def cost_model(models: tuple[Path, Path]):  # noqa: ANN201 - a CostModel
    target, draft = (load_model(p, dtype="float32", progress=False) for p in models)
    grid = Grid(batch_sizes=(1, 2), tokens=(1, 4, 9), draft_tokens=(1, 2), context_lens=(32, 128), warmup=2, repeats=3)
    return calibrate(target, draft, grid)


@pytest.fixture(scope="module")
def engine(models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    target, draft = models
    proc = ServerProcess(["--target", str(target), "--draft", str(draft), "--max-batch", "4"],
                         tmp_path_factory.mktemp("engine") / "engine.log", ENV)
    yield proc
    proc.stop()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'live.db'}")
    migrate.upgrade(database)
    yield database
    database.dispose()


def _traffic(url: str, workload: str, prompt: str, stop: threading.Event) -> threading.Thread:
    def send() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 48, "temperature": 0,
                                                     "workload": workload, "ignore_eos": True})

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _steer(engine: ServerProcess, db: Database, cost, policy: str, workload: str, prompt: str,  # noqa: ANN001
           done, timeout_s: float = 90.0) -> tuple[Controller, SpectuneEngine]:  # noqa: ANN001
    client = SpectuneEngine(engine.url, admin_token=ADMIN)
    controller = Controller(client, Estimator(build_estimator(policy, cost)), db, stabiliser=Stabiliser(FAST))
    stop = threading.Event()
    senders = [_traffic(engine.url, workload, prompt, stop) for _ in range(2)]
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not done(controller):
            controller.tick()
            time.sleep(0.3)
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=60)
    return controller, client


def test_converges_to_ngram_where_the_output_repeats_the_prompt(engine, db, cost_model) -> None:  # noqa: ANN001
    def settled(c: Controller) -> bool:
        return c.current("code").method == "ngram" and c.stabiliser.pending("code") is None

    controller, client = _steer(engine, db, cost_model, "goodput", "code", REPEATING, settled)
    config = controller.current("code")
    assert config.method == "ngram", controller.evidence("code", controller.recommend("code", 1, 64))
    assert client.spec_configs()["workloads"]["code"] == config.model_dump(mode="json")
    with db.session() as s:
        trail = list_decisions(s, "code")
    applied = [d for d in trail if d.kind == "apply"]
    assert applied and applied[0].to_config == config
    acceptance = applied[0].evidence["traffic"]["acceptance_per_position"]
    assert applied[0].evidence["traffic"]["steps"] >= FAST.min_samples and isinstance(acceptance, dict)
    rec = controller.recommend("code", 1, 64)
    assert rec.config.method == "ngram" and rec.gain_over_off > FAST.tolerance


def test_turns_speculation_off_where_the_random_draft_is_never_accepted(engine, db, cost_model) -> None:  # noqa: ANN001
    stale = SpecConfig(method="draft", k=4)
    SpectuneEngine(engine.url, admin_token=ADMIN).apply("chat", stale)  # e.g. a profile tuned on another draft

    def settled(c: Controller) -> bool:
        return c.epoch is not None and not c.current("chat").speculative and c.stabiliser.pending("chat") is None

    controller, client = _steer(engine, db, cost_model, "goodput:methods=draft", "chat",
                                "Tell me a story about the sea. ", settled)
    assert not controller.current("chat").speculative
    assert client.spec_configs()["workloads"]["chat"]["method"] == "off"
    assert controller.estimator.policy.acceptance("chat", "draft")[0] < 0.2
    with db.session() as s:
        change = list_decisions(s, "chat", kind="apply")[-1]
    assert change.from_config == stale and not change.to_config.speculative
    traffic = change.evidence["traffic"]
    assert traffic["drafting_steps"]["draft"] >= 1 and traffic["acceptance_per_position"]["draft"][0] < 0.2


def _recommends_ngram(body: dict) -> bool:
    return body["config"]["method"] == "ngram" and body["predicted"]["gain_over_off"] > FAST.tolerance


@contextmanager
def _sidecar_process(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``spectune sidecar ARGS`` as a subprocess on a free port; yields its URL once healthy."""
    port = free_port()
    spectune = Path(sys.executable).with_name("spectune")
    log_path = tmp_path / f"sidecar-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(spectune), "sidecar", *args, "--port", str(port), "--log-level", "info"],
                                stdout=log, stderr=subprocess.STDOUT, env=os.environ | ENV | (env or {}))
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
            yield url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=30)


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    """An API-only sidecar on a fresh database."""
    db_url = f"sqlite:///{tmp_path / 'sidecar.db'}"
    with Database(db_url) as database:
        migrate.upgrade(database)
    with _sidecar_process(["--db", db_url], tmp_path) as url:
        yield url


def test_sidecar_process_steers_the_engine_and_the_engine_outlives_it(engine, cost_model, tmp_path) -> None:  # noqa: ANN001
    db_url = f"sqlite:///{tmp_path / 'steer.db'}"
    with Database(db_url) as database:
        migrate.upgrade(database)
    cost_path = tmp_path / "cost.json"
    cost_path.write_text(cost_model.to_json())
    auth = {"Authorization": f"Bearer {API}"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    stop = threading.Event()
    senders = [_traffic(engine.url, "steered", REPEATING, stop) for _ in range(2)]
    try:
        with _sidecar_process(["--engine-url", engine.url, "--db", db_url, "--cost-model", str(cost_path),
                               "--poll-interval", "0.3"], tmp_path,
                              {"SPECTUNE_STABILITY": FAST.model_dump_json()}) as url:
            deadline = time.monotonic() + 90
            while True:  # 404 until the workload's first decision is stored
                applied = httpx.get(f"{url}/v1/decisions?workload=steered&kind=apply", headers=auth)
                if applied.status_code == 200 and applied.json():
                    break
                assert time.monotonic() < deadline, "no change applied within 90 s"
                time.sleep(0.5)
            # the first n-gram steps of each request draft from the prompt and miss, so right after the switch the
            # estimate can dip for a poll or two; the recommendation must come back to n-gram with a gain
            deadline = time.monotonic() + 30
            while True:
                rec = httpx.get(f"{url}/v1/recommendation?workload=steered&batch_size=1&context_len=64",
                                headers=auth)
                if rec.status_code != 200 or _recommends_ngram(rec.json()) or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            metrics = httpx.get(f"{url}/metrics").text
            health = httpx.get(f"{url}/health").json()
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=60)
    assert rec.status_code == 200, rec.text
    body = rec.json()
    assert _recommends_ngram(body), body
    assert body["evidence"]["traffic"]["steps"] >= FAST.min_samples and body["evidence"]["cost_model"]["ngram_s"] > 0
    assert 'spectune_sidecar:decisions_total{kind="apply",workload="steered"} 1.0' in metrics
    assert health["engine_reachable"] is True
    # the sidecar is gone: the engine keeps serving on the config it applied
    table = httpx.get(f"{engine.url}/admin/spec-config", headers=admin).json()
    assert table["workloads"]["steered"]["method"] == "ngram"
    answer = httpx.post(f"{engine.url}/v1/completions", json={"prompt": REPEATING, "max_tokens": 8, "temperature": 0,
                                                              "workload": "steered"}, timeout=60)
    assert answer.status_code == 200 and answer.json()["spectune"]["draft_tokens"] > 0


def test_startup_profiles_from_the_sidecar_reach_the_engine(models, sidecar, tmp_path) -> None:  # noqa: ANN001
    url = sidecar
    auth = {"Authorization": f"Bearer {API}"}
    for body in ({"workload": "code", "config": {"method": "ngram", "k": 3}},
                 {"workload": "code", "config": {"method": "ngram", "k": 7}, "identity": {"target": "another-model"}},
                 {"workload": "chat", "config": {"method": "draft", "k": 2}},
                 {"workload": "default", "config": {"method": "ngram", "k": 5}}):
        assert httpx.post(f"{url}/v1/profiles", json=body, headers=auth).status_code == 201
    target, draft = models
    proc = ServerProcess(["--target", str(target), "--draft", str(draft), "--profile-source",
                          f"{url}/v1/engine-profile"], tmp_path / "engine.log", ENV)
    try:
        table = httpx.get(f"{proc.url}/admin/spec-config", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    finally:
        proc.stop()
    assert table["workloads"]["code"]["k"] == 3  # the other model's exact profile does not apply
    assert table["workloads"]["chat"]["method"] == "draft"
    assert table["default"]["k"] == 5 and table["default"]["method"] == "ngram"


def test_engine_serves_on_its_default_when_the_sidecar_is_down(models, tmp_path) -> None:  # noqa: ANN001
    target, _ = models
    proc = ServerProcess(["--target", str(target), "--profile-source", f"http://127.0.0.1:{free_port()}"],
                         tmp_path / "engine.log", ENV)
    try:
        answer = httpx.post(f"{proc.url}/v1/completions", json={"prompt": "hi", "max_tokens": 4, "temperature": 0},
                            timeout=60)
        metrics = httpx.get(f"{proc.url}/metrics").text
    finally:
        proc.stop()
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
    assert 'spectune:profile_source_failures_total{reason="unreachable"} 1.0' in metrics
