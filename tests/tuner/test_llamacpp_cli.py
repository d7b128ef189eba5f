"""``spectune engine launch llama.cpp``: config parsing, errors, and a real launch interrupted with Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from engine.config import SpecConfig
from tests.tuner.launch_helpers import interrupt_and_check_server_gone
from tuner.cli import app
from tuner.engines.llamacpp_install import default_install


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"  # --dry-run only needs the file to exist
    path.write_bytes(b"GGUF")
    return path


@pytest.fixture
def gguf_named(tmp_path: Path) -> Path:
    """A .gguf whose stem is a registry name, so the stored identity matches as it would for the real file."""
    path = tmp_path / "smollm2-135m.gguf"
    path.write_bytes(b"GGUF")
    return path


def launch(*args: str):
    return CliRunner().invoke(app, ["engine", "launch", "llama.cpp", *args])


def test_dry_run_prints_the_server_command(gguf):
    config = {"method": "ngram", "k": 16, "min_n": 16, "max_n": 16, "llamacpp": {"spec_type": "ngram-mod"}}
    result = launch("--model", str(gguf), "--config", json.dumps(config), "--port", "8111", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == (
        f"{default_install().server} -m {gguf} -t 2 -tb 2 -c 4096 -np 1 --metrics --no-ui --jinja "
        "--host 127.0.0.1 --port 8111 --spec-type ngram-mod --spec-ngram-mod-n-match 16 "
        "--spec-ngram-mod-n-max 16 --spec-ngram-mod-n-min 0")


@pytest.mark.parametrize(("config", "message"), [
    ("{method: ngram}", "error: --config: not valid JSON"),
    ("[1]", "error: --config: expected a JSON object"),
    ('{"method": "beam"}', "error: method: Input should be 'off', 'draft' or 'ngram'"),
    ('{"method": "ngram", "k": 4}', "error: min_n: llama.cpp ngram-simple looks up one fixed n-gram length"),
    ('{"method": "draft", "k": 4}', "error: draft: method draft needs a draft model GGUF (--draft)"),
    ('{"method": "ngram", "k": 4, "min_n": 4, "max_n": 4, "llamacpp": 3}', "error: llamacpp: expected a JSON object"),
    ('{"method": "ngram", "k": 4, "min_n": 4, "max_n": 4, "llamacpp": {"spec_type": "eagle"}}',
     "error: llamacpp.spec_type: Input should be"),
])
def test_bad_configs_are_one_line_errors_with_exit_2(gguf, config, message):
    result = launch("--model", str(gguf), "--config", config, "--dry-run")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith(message)


def test_an_unknown_model_is_named(tmp_path):
    result = launch("--model", str(tmp_path / "missing.gguf"), "--dry-run")
    assert result.exit_code == 2 and result.stderr.startswith("error: --model: ")


@pytest.mark.llamacpp
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_launch_serves_until_interrupted_and_leaves_no_process(signum):
    spectune = Path(sys.executable).parent / "spectune"
    proc = subprocess.Popen([str(spectune), "engine", "launch", "llama.cpp", "--model", "smollm2-135m",
                             "--config", '{"method": "ngram", "k": 8, "min_n": 3, "max_n": 3}'],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = proc.stderr.readline()
        assert ready.startswith("llama-server ready at http://127.0.0.1:"), ready + proc.stderr.read()
        url = ready.split()[3]
        server_pid = int(ready.split("(pid ")[1].split(")")[0])
        command = proc.stderr.readline()
        assert "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8" in command
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        interrupt_and_check_server_gone(proc, server_pid, timeout_s=30, signum=signum)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A migrated SQLite store with llama.cpp profiles for smollm2-135m on this CPU, plus a portable one."""
    from storage.db import Database
    from storage.identity import EngineIdentity
    from storage.migrate import upgrade
    from storage.profiles import put_profile
    from storage.schemas import ProfileCreate, Schedule, ScheduleEntry
    from tuner.engines.llamacpp_profiles import llamacpp_identity

    url = f"sqlite:///{tmp_path / 'spectune.db'}"
    db = Database(url)
    upgrade(db)
    here = llamacpp_identity("smollm2-135m", None)
    ngram = SpecConfig(method="ngram", k=12, min_n=3, max_n=3)
    with db.session() as session:
        put_profile(session, "code", ProfileCreate(config=ngram, identity=here))
        put_profile(session, "code", ProfileCreate(config=SpecConfig(method="draft", k=3)))  # portable, less specific
        put_profile(session, "chat", ProfileCreate(config=SpecConfig(method="draft", k=3)))
        put_profile(session, "mixed", ProfileCreate(config=ngram, identity=here, schedule=Schedule(
            [ScheduleEntry(min_batch=4, config=SpecConfig())])))
        put_profile(session, "bf16", ProfileCreate(config=ngram, identity=EngineIdentity(
            target="smollm2-135m", dtype="bfloat16")))
    db.dispose()
    return url


def test_workload_launch_uses_the_active_profile_for_this_engine(store, gguf_named):
    result = launch("--model", str(gguf_named), "--workload", "code", "--db", store, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().endswith(
        "--spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 12")


@pytest.mark.parametrize(("workload", "message"), [
    ("chat", "error: draft: method draft needs a draft model GGUF (--draft)"),
    ("mixed", "error: schedule: version 1 of 'mixed' switches configs"),
    ("bf16", "error: workload: 'bf16' has no active profile for target=smollm2-135m dtype=gguf"),
    ("nope", "error: unknown workload 'nope'"),
])
def test_workload_launch_errors(store, gguf_named, workload, message):
    result = launch("--model", str(gguf_named), "--workload", workload, "--db", store, "--dry-run")
    assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr


def test_config_and_workload_together_are_refused(gguf):
    result = launch("--model", str(gguf), "--workload", "code", "--config", "{}", "--dry-run")
    assert result.exit_code == 2 and result.stderr.startswith("error: --config and --workload")
