"""The live llama.cpp search: its space maps to llama-server flags, its scores add up, and against a real server
(SmolLM2-135M) a short search completes, stores the active profile, and ``engine launch --workload`` applies it."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from storage.db import Database
from storage.migrate import upgrade
from storage.profiles import list_active
from storage.runs import list_runs
from tests.tuner.launch_helpers import interrupt_and_check_server_gone
from tuner.engines.base import RequestTiming
from tuner.engines.llamacpp import LlamaCppEngine, resolve_gguf
from tuner.engines.llamacpp_config import LlamaCppExtension, spec_flags
from tuner.engines.llamacpp_install import default_install
from tuner.engines.llamacpp_profiles import llamacpp_identity
from tuner.engines.llamacpp_server import ServerOptions
from tuner.engines.llamacpp_tuning import (
    DEFAULT_POINTS,
    DRAFT_K,
    MIN_GAIN,
    NGRAM_MOD_K,
    NGRAM_MOD_N,
    NGRAM_SIMPLE_K,
    NGRAM_SIMPLE_N,
    LiveScore,
    suggest,
    tune_llamacpp,
    workload_prompts,
)
from tuner.workloads import SHIPPED

MODEL = "smollm2-135m"


def every_point() -> list[dict[str, object]]:
    points: list[dict[str, object]] = [{"mode": "off"}]
    points += [{"mode": "ngram-simple", "ngram_simple.n": n, "ngram_simple.k": k}
               for n, k in itertools.product(NGRAM_SIMPLE_N, NGRAM_SIMPLE_K)]
    points += [{"mode": "ngram-mod", "ngram_mod.n": n, "ngram_mod.k": k}
               for n, k in itertools.product(NGRAM_MOD_N, NGRAM_MOD_K)]
    points += [{"mode": "draft-simple", "draft.k": k} for k in DRAFT_K]
    return points


@pytest.mark.parametrize("point", every_point(), ids=lambda p: "-".join(str(v) for v in p.values()))
def test_every_point_of_the_space_maps_to_llama_server_flags(point):
    launch = suggest(optuna.trial.FixedTrial(point), has_draft=True)
    draft = "draft.gguf" if launch.config.method == "draft" else None
    flags = spec_flags(launch.config, LlamaCppExtension.parse(launch.extension), draft_model=draft, threads=2)
    expected = {"off": None, "ngram-simple": "ngram-simple", "ngram-mod": "ngram-mod", "draft-simple": "draft-simple"}
    spec_type = flags[flags.index("--spec-type") + 1] if flags else None
    assert spec_type == expected[point["mode"]]
    assert launch.label().startswith(point["mode"].removesuffix("-simple") if point["mode"] != "ngram-simple"
                                     else "ngram-simple")


def test_the_first_trials_are_llama_cpps_defaults_and_draft_needs_a_draft_model():
    assert [p["mode"] for p in DEFAULT_POINTS] == ["off", "ngram-mod", "ngram-simple", "draft-simple"]
    with pytest.raises(ValueError, match="draft-simple"):
        suggest(optuna.trial.FixedTrial({"mode": "draft-simple", "draft.k": 3}), has_draft=False)


def timing(output: int, wall: float, decode: float, drafted: int = 0, accepted: int = 0) -> RequestTiming:
    return RequestTiming(workload="w", prompt_tokens=10, output_tokens=output, prompt_s=wall - decode,
                         decode_s=decode, draft_tokens=drafted, accepted_tokens=accepted, wall_s=wall)


def test_live_score_sums_over_requests():
    score = LiveScore.of([timing(40, 4.0, 2.0, drafted=30, accepted=20), timing(60, 6.0, 4.0)])
    assert score.tokens_per_s == pytest.approx(100 / 10)
    assert score.decode_tokens_per_s == pytest.approx(100 / 6)
    assert score.mean_acceptance_length == pytest.approx(100 / 80)  # 100 tokens in 80 verify steps
    assert score.latency_ms[0] == pytest.approx((50 + 200 / 3) / 2)  # median of 50 and 66.7 ms per token
    assert LiveScore.of([timing(40, 4.0, 2.0)]).mean_acceptance_length is None


@pytest.mark.parametrize("workload", SHIPPED)
def test_shipped_workloads_give_user_texts(workload):
    texts = workload_prompts(workload, limit=2)
    assert len(texts) == 2 and all(isinstance(t, str) and t.strip() for t in texts)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="^trials: "):
        tune_llamacpp(None, "w", ["p"], storage_url=f"sqlite:///{tmp_path}/x.db",  # type: ignore[arg-type]
                      identity=llamacpp_identity(MODEL, None), trials=0, has_draft=False)
    with pytest.raises(ValueError, match="^prompts: "):
        tune_llamacpp(None, "w", [], storage_url=f"sqlite:///{tmp_path}/x.db",  # type: ignore[arg-type]
                      identity=llamacpp_identity(MODEL, None), trials=1, has_draft=False)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[str, object]:
    """One short live search on SmolLM2-135M (drafting for itself, so the engine carries a draft model)."""
    install = default_install()
    if not install.installed:
        pytest.fail(f"llama-server is not built at {install.server}; run: spectune engines install llama.cpp")
    url = f"sqlite:///{tmp_path_factory.mktemp('tune') / 'spectune.db'}"
    db = Database(url)
    upgrade(db)
    db.dispose()
    gguf = resolve_gguf(MODEL)
    engine = LlamaCppEngine(ServerOptions(model=gguf, threads=2, ctx_size=2048), draft_model=gguf,
                            binary=install.server)
    try:
        result = tune_llamacpp(engine, "prose", workload_prompts("prose", 1), storage_url=url,
                               identity=llamacpp_identity(MODEL, MODEL), trials=3, has_draft=True, max_tokens=12,
                               confirm_top=1, rounds=1)
    finally:
        engine.stop()
    return url, result


@pytest.mark.llamacpp
def test_a_short_live_search_completes_and_stores_the_active_profile(searched):
    url, result = searched
    assert [t["label"] for t in result.trials] == ["off", "ngram-mod k=32 n=16", "ngram-simple k=16 n=4"]
    assert all(t["tokens_per_s"] > 0 for t in result.trials)
    best_speculative = max((t for t in result.trials if t["label"] != "off"), key=lambda t: t["tokens_per_s"])
    assert set(result.confirmed) == {"off", best_speculative["label"]}  # off and the top candidate, re-measured
    with Database(url) as db, db.session(readonly=True) as session:
        (profile,) = list_active(session, "prose")
        (run,) = list_runs(session, "prose")
    assert profile.identity == llamacpp_identity(MODEL, MODEL)
    assert profile.config == result.chosen.config
    assert profile.extensions == ({"llamacpp": dict(result.chosen.extension)} if result.chosen.extension else {})
    assert profile.provenance.kind == "optuna" and profile.provenance.study == "prose-llamacpp-live"
    (bucket,) = profile.measurements.buckets
    assert bucket.batch_size == 1 and bucket.tokens_per_s > 0 and bucket.tokens_per_s_off > 0
    if result.chosen.config.speculative:  # kept only when it beat off by the margin
        assert bucket.tokens_per_s >= (1 + MIN_GAIN) * bucket.tokens_per_s_off
    assert run.status == "succeeded" and run.result["chosen"] == result.chosen.label()


@pytest.mark.llamacpp
def test_engine_launch_with_the_workload_runs_the_stored_profile(searched):
    url, result = searched
    expected = LlamaCppEngine(ServerOptions(model=resolve_gguf(MODEL)), draft_model=resolve_gguf(MODEL)).flags_for(
        result.chosen.config, result.chosen.extension)
    spectune = Path(sys.executable).parent / "spectune"
    proc = subprocess.Popen([str(spectune), "engine", "launch", "llama.cpp", "--model", MODEL, "--draft", MODEL,
                             "--workload", "prose", "--db", url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = proc.stderr.readline()
        assert ready.startswith("llama-server ready at http://127.0.0.1:"), ready + proc.stderr.read()
        server_pid = int(ready.split("(pid ")[1].split(")")[0])
        printed = proc.stderr.readline().split()
        argv = Path(f"/proc/{server_pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        if expected:
            assert printed[-len(expected):] == expected
        else:
            assert "--spec-type" not in printed
        assert argv == printed
        interrupt_and_check_server_gone(proc, server_pid, timeout_s=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    spectune = Path(sys.executable).parent / "spectune"
    return subprocess.run([str(spectune), "engine", "tune", "llama.cpp", *args], capture_output=True, text=True,
                          timeout=300)


def test_engine_tune_cli_names_bad_arguments(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with Database(url) as db:
        upgrade(db)
    unknown = run_cli("--model", MODEL, "--workload", "nope", "--db", url)
    assert unknown.returncode == 2 and "--workload: no shipped prompt set named 'nope'" in unknown.stderr
    missing = run_cli("--model", str(tmp_path / "missing.gguf"), "--workload", "prose", "--db", url)
    assert missing.returncode == 2 and "--model" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.llamacpp
def test_engine_tune_cli_stores_the_workloads_profile(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Database(url) as db:
        upgrade(db)
    done = run_cli("--model", MODEL, "--workload", "math", "--prompts", "1", "--trials", "1", "--max-tokens", "4",
                   "--rounds", "1", "--confirm-top", "1", "--db", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("math: off (profile version 1, study math-llamacpp-live)")
    with Database(url) as db, db.session(readonly=True) as session:
        (profile,) = list_active(session, "math")
    assert profile.identity == llamacpp_identity(MODEL, None) and not profile.config.speculative
