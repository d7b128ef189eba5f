"""The engine interface contract, checked against every implementation (llama.cpp now; spectune's server joins here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from engine.config import SpecConfig, TreeShape
from engine.stats import StepStats
from tuner.engines.base import EngineAdapter, EngineStats, UnsupportedConfigError
from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf
from tuner.engines.llamacpp_install import default_install
from tuner.engines.llamacpp_server import ServerOptions
from tuner.engines.spectune import step_from_json


def _llamacpp() -> EngineAdapter:
    install = default_install()
    if not install.installed:
        pytest.fail(f"llama-server is not built at {install.server}; run: spectune engines install llama.cpp")
    return LlamaCppEngine(ServerOptions(model=resolve_gguf("smollm2-135m"), threads=2, ctx_size=2048),
                          binary=install.server)


ENGINES: dict[str, tuple[Callable[[], EngineAdapter], tuple[pytest.MarkDecorator, ...]]] = {
    "llama.cpp": (_llamacpp, (pytest.mark.llamacpp,)),
}


@pytest.fixture(params=[pytest.param(name, marks=marks) for name, (_, marks) in ENGINES.items()])
def engine(request: pytest.FixtureRequest) -> Iterator[EngineAdapter]:
    adapter = ENGINES[request.param][0]()
    with adapter:
        yield adapter


class TestEngineContract:
    def test_start_makes_it_healthy_and_stop_is_idempotent(self, engine: EngineAdapter):
        assert engine.health()
        assert engine.base_url.startswith("http://")
        engine.stop()
        assert not engine.health()
        engine.stop()
        engine.start()
        assert engine.health()

    def test_capabilities_are_consistent(self, engine: EngineAdapter):
        caps = engine.capabilities
        assert engine.supports_live_config == caps.live_config
        assert "off" in caps.methods and caps.methods <= {"off", "draft", "ngram"}

    def test_a_config_outside_the_capabilities_is_refused_naming_the_field(self, engine: EngineAdapter):
        if engine.capabilities.trees:
            pytest.skip("this engine runs trees")
        tree = SpecConfig(method="ngram", k=4, min_n=2, max_n=2, tree=TreeShape(branching=(2,)))
        with pytest.raises(UnsupportedConfigError) as info:
            engine.apply("w", tree)
        assert info.value.field == "tree"
        assert engine.health()

    def test_complete_reports_a_timing_and_read_stats_pages_by_cursor(self, engine: EngineAdapter):
        engine.apply("w", SpecConfig())
        first = engine.read_stats()
        completion = engine.complete("Name three colours.", workload="w", max_tokens=8)
        assert completion.text and completion.timing.workload == "w"
        assert 0 < completion.timing.output_tokens <= 8
        assert completion.timing.tokens_per_s > 0
        second = engine.read_stats(since=first.cursor)
        assert isinstance(second, EngineStats)
        assert second.requests == (completion.timing,) and second.cursor == first.cursor + 1
        off = second.counters[""] if "" in second.counters else second.counters["w"]
        assert off.num_draft_tokens == 0


def test_spectune_step_stats_round_trip_and_an_older_servers_page_still_parses():
    stats = StepStats(3, "r", "w", 2, 40, "draft", 2, 2, 1, (1, 0), 2, 3, 6, 0.01, 0.02, 5.0, True)
    assert step_from_json(stats.to_dict()) == stats
    older = {k: v for k, v in stats.to_dict().items() if k != "finished"}
    assert step_from_json(older).finished is False
