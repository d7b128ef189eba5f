"""The llama.cpp adapter against a real llama-server running SmolLM2-135M (built by ``spectune engines install``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest

from engine.config import SpecConfig
from tuner.engines.base import EngineError, UnsupportedConfigError
from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf
from tuner.engines.llamacpp_install import default_install
from tuner.engines.llamacpp_server import ServerOptions
from tuner.engines.prometheus import SpecDecodeCounters

pytestmark = pytest.mark.llamacpp

MODEL = "smollm2-135m"
# Greedy SmolLM2 copies this back, so n-gram lookup finds drafts and a self-draft gets them accepted.
REPEAT_PROMPT = ("Repeat the following list exactly, twice:\n"
                 "apple, banana, cherry, date, elderberry, fig, grape, honeydew, kiwi, lemon, mango, nectarine")
NGRAM = SpecConfig(method="ngram", k=8, min_n=2, max_n=2)
SELF_DRAFT = SpecConfig(method="draft", k=4)


def make_engine(with_draft: bool = False, port: int | None = None) -> LlamaCppEngine:
    install = default_install()
    if not install.installed:
        pytest.fail(f"llama-server is not built at {install.server}; run: spectune engines install llama.cpp")
    gguf = resolve_gguf(MODEL)
    # SmolLM2 drafting for itself: its draft tokens are exactly what greedy decoding picks next.
    return LlamaCppEngine(ServerOptions(model=gguf, threads=2, ctx_size=2048, port=port),
                          draft_model=gguf if with_draft else None, binary=install.server)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie is gone for our purposes only if it was reaped; stop() waits, so it must not be one
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_launch_is_healthy_and_stop_leaves_no_process():
    engine = make_engine()
    engine.start()
    process = engine.process
    assert process is not None and engine.health()
    url, pid = engine.base_url, process.pid
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    assert url.startswith("http://127.0.0.1:")
    engine.stop()
    assert gone(pid) and not engine.health()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
    engine.stop()  # twice is fine


def test_apply_launches_with_the_mapped_flags_and_the_server_reports_them():
    with make_engine() as engine:
        engine.apply("code", NGRAM)
        argv = cmdline(engine.process.pid)
        assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
        assert argv[argv.index("--spec-ngram-simple-size-n") + 1] == "2"
        assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "8"
        engine.complete("Say hi.", workload="code", max_tokens=4)
        # /props shows the per-request defaults ("none"); a slot that has served a request shows the server's types
        slot = httpx.get(f"{engine.base_url}/slots").json()[0]
        assert slot["speculative"] is True
        assert slot["params"]["speculative.types"] == "none,ngram-simple"
        assert engine.props()["model_path"].endswith(".gguf")


def test_same_config_reuses_the_server_and_a_new_one_relaunches_it():
    with make_engine() as engine:
        engine.apply("code", NGRAM)
        first = engine.process.pid
        engine.apply("edit", NGRAM)
        assert engine.process.pid == first
        engine.complete("Say hi.", workload="edit", max_tokens=4)
        engine.apply("chat", SpecConfig())
        assert engine.process.pid != first and gone(first)
        assert "--spec-type" not in cmdline(engine.process.pid)
        with pytest.raises(EngineError, match="apply\\(\\) its config first"):
            engine.complete("Say hi.", workload="code", max_tokens=4)


def test_an_unsupported_config_fails_before_touching_the_running_server():
    with make_engine() as engine:
        engine.apply("code", NGRAM)
        pid = engine.process.pid
        with pytest.raises(UnsupportedConfigError) as info:
            engine.apply("code", SpecConfig(method="draft", k=4))  # no draft model given
        assert info.value.field == "draft"
        with pytest.raises(UnsupportedConfigError, match="llamacpp.spec_type"):
            engine.apply("code", NGRAM, {"spec_type": "draft-simple"})
        assert engine.process.pid == pid and engine.health()


@pytest.mark.parametrize(("config", "with_draft"), [(NGRAM, False), (SELF_DRAFT, True)],
                         ids=["ngram-simple", "draft-simple"])
def test_metrics_equal_the_per_response_timings_summed(config, with_draft):
    with make_engine(with_draft=with_draft) as engine:
        engine.apply("repeat", config)
        before = engine.read_stats()
        assert before.counters[""] == SpecDecodeCounters() and before.cursor == 0
        texts = [engine.complete(prompt, workload="repeat", max_tokens=48).text
                 for prompt in (REPEAT_PROMPT, "Count from 1 to 30, separated by commas.")]
        after = engine.read_stats(since=before.cursor)
        assert after.instance == before.instance and len(after.requests) == 2 and all(texts)
        delta = after.counters[""] - before.counters[""]
        assert delta.num_draft_tokens == sum(r.draft_tokens for r in after.requests)
        assert delta.num_accepted_tokens == sum(r.accepted_tokens for r in after.requests)
        assert delta.num_draft_tokens > 0 and delta.num_accepted_tokens > 0 and delta.num_drafts > 0
        assert sum(delta.accepted_per_position) == delta.num_accepted_tokens
        for timing in after.requests:
            assert timing.output_tokens > 0 and timing.decode_s > 0 and timing.prompt_tokens > 0
            assert 0 < timing.decode_s < timing.wall_s
        assert engine.read_stats(since=after.cursor).requests == ()


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        engine = make_engine(port=busy.getsockname()[1])
        with pytest.raises(EngineError, match="exited with code"):
            engine.start()
        assert engine.process is None
