"""``spectune profiles export --format llamacpp-presets``: the preset file's content and errors, and a real
llama-server router that loads it and serves each workload's preset with its tuned speculation flags."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from engine.config import SpecConfig
from storage.db import Database
from storage.identity import EngineIdentity
from storage.migrate import upgrade
from storage.profiles import put_profile
from storage.schemas import ProfileCreate, Schedule, ScheduleEntry
from tuner.cli import app
from tuner.engines.llamacpp_install import default_install
from tuner.engines.llamacpp_presets import flags_to_options
from tuner.engines.llamacpp_profiles import llamacpp_identity
from tuner.engines.llamacpp_server import free_port

MODEL = "smollm2-135m"
NGRAM_MOD = SpecConfig(method="ngram", k=16, min_n=8, max_n=8)
NGRAM_SIMPLE = SpecConfig(method="ngram", k=8, min_n=3, max_n=3)


def make_store(path: Path, draft: str | None = None) -> str:
    """Active llama.cpp profiles for SmolLM2 on this CPU: two that map, two that cannot, one for another engine."""
    url = f"sqlite:///{path}"
    db = Database(url)
    upgrade(db)
    here = llamacpp_identity(MODEL, draft)
    with db.session() as session:
        put_profile(session, "code-edit", ProfileCreate(config=NGRAM_MOD, identity=here,
                                                        extensions={"llamacpp": {"spec_type": "ngram-mod"}}))
        put_profile(session, "prose", ProfileCreate(config=NGRAM_SIMPLE, identity=here))
        put_profile(session, "math", ProfileCreate(config=SpecConfig(), identity=here))
        put_profile(session, "chat", ProfileCreate(config=SpecConfig(method="draft", k=3), identity=here))
        put_profile(session, "mixed", ProfileCreate(config=NGRAM_SIMPLE, identity=here, schedule=Schedule(
            [ScheduleEntry(min_batch=4, config=SpecConfig())])))
        put_profile(session, "bf16", ProfileCreate(config=NGRAM_SIMPLE, identity=EngineIdentity(
            target=MODEL, dtype="bfloat16")))
    db.dispose()
    return url


def export(*args: str):
    return CliRunner().invoke(app, ["profiles", "export", *args])


def test_flags_become_preset_keys():
    flags = ["-md", "/m/d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "3"]
    assert flags_to_options(flags) == (("spec-draft-model", "/m/d.gguf"), ("spec-type", "draft-simple"),
                                       ("spec-draft-n-max", "3"))
    with pytest.raises(ValueError, match="^flags: "):
        flags_to_options(["--spec-type"])


def test_export_writes_one_preset_per_runnable_workload(tmp_path):
    gguf = tmp_path / f"{MODEL}.gguf"  # the file only has to exist; its stem is the identity's target
    gguf.write_bytes(b"GGUF")
    url = make_store(tmp_path / "spectune.db")
    out = tmp_path / "presets.ini"
    result = export("--format", "llamacpp-presets", "--out", str(out), "--model", str(gguf), "--db", url)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["code-edit: v1 ngram k=16 chain n=8..8 (ngram-mod)",
                                          "math: v1 off", "prose: v1 ngram k=8 chain n=3..3"]
    assert "skipped chat: profile v1: draft: method draft needs a draft model GGUF" in result.stderr
    assert "skipped mixed: profile v1 switches configs by batch size" in result.stderr
    text = out.read_text()
    sections = [line for line in text.splitlines() if line.startswith("[")]
    assert sections == ["[*]", "[code-edit]", "[math]", "[prose]"]
    assert text.startswith("; llama-server router presets") and "\nversion = 1\n" in text
    code_edit = text.split("[code-edit]\n")[1].split("\n\n")[0].splitlines()
    assert code_edit == [f"model = {gguf}", "spec-type = ngram-mod", "spec-ngram-mod-n-match = 8",
                         "spec-ngram-mod-n-max = 16", "spec-ngram-mod-n-min = 0"]
    assert text.split("[math]\n")[1].split("\n\n")[0].splitlines() == [f"model = {gguf}"]


def test_export_with_a_draft_includes_the_draft_preset(tmp_path):
    gguf, draft = tmp_path / f"{MODEL}.gguf", tmp_path / "qwen2.5-coder-0.5b.gguf"
    for path in (gguf, draft):
        path.write_bytes(b"GGUF")
    url = make_store(tmp_path / "spectune.db", draft="qwen2.5-coder-0.5b")
    out = tmp_path / "presets.ini"
    result = export("--out", str(out), "--model", str(gguf), "--draft", str(draft), "--db", url)
    assert result.exit_code == 0, result.stderr
    chat = out.read_text().split("[chat]\n")[1].split("\n\n")[0].splitlines()
    assert chat == [f"model = {gguf}", f"spec-draft-model = {draft}", "spec-type = draft-simple",
                    "spec-draft-n-max = 3", "spec-draft-n-min = 0", "spec-draft-threads = 2",
                    "spec-draft-threads-batch = 2"]


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "vllm"], "error: --format: expected llamacpp-presets, got 'vllm'"),
    (["--model", "nope.gguf"], "error: --model: 'nope.gguf' is neither a registered model"),
    (["--model", "OTHER"], "error: --model: no workload has a profile llama-server can run"),
])
def test_export_errors_are_one_line_with_exit_2(tmp_path, args, message):
    url = make_store(tmp_path / "spectune.db")
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    base = {"--model": str(tmp_path / f"{MODEL}.gguf"), "--out": str(tmp_path / "p.ini"), "--db": url}
    (tmp_path / f"{MODEL}.gguf").write_bytes(b"GGUF")
    given = dict(zip(args[::2], args[1::2], strict=True))
    if given.get("--model") == "OTHER":
        given["--model"] = str(other)
    argv = [item for key, value in {**base, **given}.items() for item in (key, value)]
    result = export(*argv)
    assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.llamacpp
def test_a_llama_server_router_serves_each_workload_with_its_preset(tmp_path):
    install = default_install()
    if not install.installed:
        pytest.fail(f"llama-server is not built at {install.server}; run: spectune engines install llama.cpp")
    url = make_store(tmp_path / "spectune.db")
    out = tmp_path / "presets.ini"
    result = export("--out", str(out), "--model", MODEL, "--db", url)
    assert result.exit_code == 0, result.stderr
    port = free_port()
    log = (tmp_path / "router.log").open("w")
    router = subprocess.Popen([str(install.server), "--models-preset", str(out), "--host", "127.0.0.1",
                               "--port", str(port), "--no-ui", "--models-max", "1"], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert router.poll() is None and time.monotonic() < deadline, (tmp_path / "router.log").read_text()
            time.sleep(0.3)
        models = {m["id"]: m for m in httpx.get(f"{base}/models", timeout=10).json()["data"]}
        assert {"code-edit", "math", "prose"} <= set(models)
        args = {name: models[name]["status"]["args"] for name in ("code-edit", "math", "prose")}
        assert args["code-edit"][args["code-edit"].index("--spec-type") + 1] == "ngram-mod"
        assert args["prose"][args["prose"].index("--spec-ngram-simple-size-n") + 1] == "3"
        assert "--spec-type" not in args["math"]
        for name in ("code-edit", "math", "prose"):
            response = httpx.post(f"{base}/v1/chat/completions", timeout=300, json={
                "model": name, "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 6,
                "temperature": 0.0})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["model"] == name and body["usage"]["completion_tokens"] > 0
    finally:
        router.terminate()
        router.wait(timeout=60)
        log.close()
