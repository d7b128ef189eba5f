"""Optuna searches on synthetic traces with a synthetic cost model: known-best configs, profiles with provenance,
the Pareto front, resume, and several workers sharing one study (SQLite; PostgreSQL with SPECTUNE_TEST_PG_URL)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from engine.config import SpecConfig
from policies.cost_model import uniform_grid
from policies.static import StaticPolicy
from storage.db import Database
from storage.profiles import list_active
from storage.runs import list_runs
from tests.policies.synthetic import BATCHES, CONTEXTS, TOKENS, linear_cost, make_trace
from tests.tuner.tune_helpers import copy_traces, fresh_traces, migrated_postgres, migrated_sqlite, mixed_traces
from tuner.cli import app
from tuner.replay import oracle_cell, replay_cell
from tuner.traces import write_traces
from tuner.tuning.progress import finished_trials
from tuner.tuning.scoring import Bucket, ReplayScorer, Score
from tuner.tuning.space import Candidate, SearchSpace, candidate_of
from tuner.tuning.study import TuneError, _best_splits, optuna_storage, tune

ROOT = Path(__file__).resolve().parents[2]
TRACES = copy_traces() + fresh_traces()


def test_replay_search_finds_ngram_on_copy_heavy_trace(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    cost = linear_cost()
    result = tune("copy", 40, storage_url=url, traces=TRACES, cost=cost, seed=3, progress=False)

    oracle, _ = oracle_cell([t for t in TRACES if t.workload == "copy"], cost, 1)
    best = result.profile
    assert best is not None and best.config.method == "ngram"
    assert best.measurements is not None
    bucket = best.measurements.buckets[0]
    assert bucket.tokens_per_s >= 0.95 * oracle.tokens_per_s
    assert bucket.tokens_per_s > 3 * (bucket.tokens_per_s_off or 0)
    assert best.provenance.kind == "optuna" and best.provenance.study == "copy-replay-throughput"
    assert best.provenance.trial == result.best[0]["trial"]
    with Database(url) as db, db.session() as s:
        active = list_active(s, "copy")
        runs = list_runs(s, "copy")
    assert [p.version for p in active] == [best.version]
    assert runs[0].status == "succeeded" and runs[0].study_name == "copy-replay-throughput"
    assert runs[0].result is not None and runs[0].result["trials_done"] == 40
    assert runs[0].finished_at is not None


def test_replay_search_turns_speculation_off_where_nothing_is_accepted(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    result = tune("fresh", 30, storage_url=url, traces=TRACES, cost=linear_cost(), seed=5, progress=False,
                  batch_mix={1: 0.5, 4: 0.5})
    assert result.profile is not None
    assert not result.profile.config.speculative
    assert result.profile.schedule is None
    assert [b.batch_size for b in result.profile.measurements.buckets] == [1, 4]


@pytest.mark.parametrize(("workload", "speculates"), [("copy", True), ("fresh", False)])
def test_latency_objective_minimises_p99_inter_token_latency(tmp_path: Path, workload: str,
                                                             speculates: bool) -> None:
    # Long outputs: a request's first step (nothing to look up yet) is under 1% of its tokens, so p99 sees the rest.
    traces = copy_traces(repeats=4) + fresh_traces()
    url = migrated_sqlite(tmp_path)
    cost = linear_cost()
    result = tune(workload, 25, objective="latency", storage_url=url, traces=traces, cost=cost, seed=7,
                  progress=False)
    assert result.study_name == f"{workload}-replay-latency"
    assert result.profile is not None and result.profile.config.speculative == speculates
    scorer = ReplayScorer([t for t in traces if t.workload == workload], cost, None)
    off = scorer.score(Candidate(SpecConfig()))
    best = result.best[0]["values"][0]
    assert best == pytest.approx(result.profile.measurements.buckets[0].latency_p99_ms)
    assert (best < 0.9 * off.p99_ms) if speculates else best == pytest.approx(off.p99_ms)


def test_search_finds_a_batch_size_split(tmp_path: Path) -> None:
    """Verify cost that grows with the batch's tokens: a cheap draft pays at batch 1 and not at 16, so the best
    candidate speculates up to batch 1 only and beats every static config."""
    url = migrated_sqlite(tmp_path)
    cost = linear_cost(base=0.02, per_token=0.006, draft_base=0.001)
    mix = {1: 0.5, 16: 0.5}
    result = tune("mixed", 50, storage_url=url, traces=mixed_traces(), cost=cost, batch_mix=mix, seed=11,
                  progress=False)
    scorer = ReplayScorer(mixed_traces(), cost, mix)
    drafts = [SpecConfig(method="draft", k=k) for k in range(1, 17)]
    best_static = max(scorer.score(Candidate(c)).tokens_per_s for c in [SpecConfig(), *drafts])
    best_split = max(scorer.score(Candidate(c, SpecConfig(), 1)).tokens_per_s for c in drafts)
    found = result.best[0]["values"][0]
    assert found > 1.02 * best_static
    assert found >= 0.99 * best_split
    profile = result.profile
    assert profile is not None and profile.config.method == "draft"
    at_16 = (profile.schedule.config_at(16) if profile.schedule else None) or profile.config.at_batch_size(16)
    assert at_16.method != "draft"
    assert [b.batch_size for b in profile.measurements.buckets] == [1, 16]


def test_a_batch_size_above_the_recorded_requests_is_scored_at_that_batch_size() -> None:
    mine = [t for t in TRACES if t.workload == "copy"]
    off = Candidate(SpecConfig())
    at = {b: ReplayScorer(mine, linear_cost(), {b: 1.0}).score(off).tokens_per_s for b in (len(mine), 16)}
    assert at[16] > 2 * at[len(mine)]  # 16 rows share each step, not the few recorded requests


def test_baselines_split_each_method_where_its_buckets_beat_off(tmp_path: Path) -> None:
    """Here a draft model pays up to batch size 8 at k=2 and loses above: the first trials, off and each method at
    k=4, 2 and 8 everywhere, put the draft model's split at 8 at once, where a split guessed at the smallest batch
    size would be at 1."""
    cost = linear_cost(base=0.02, per_token=0.002, draft_base=0.001)
    mix = dict.fromkeys((1, 2, 4, 8, 16), 1.0)
    result = tune("mixed", 8, storage_url=migrated_sqlite(tmp_path), traces=mixed_traces(), cost=cost, batch_mix=mix,
                  seed=3, progress=False)
    assert result.best[0]["label"] == "B<=8: draft k=2 chain; B>8: off"
    assert result.best[0]["trial"] == 7  # the first trial after the seven unsplit baselines


def test_baselines_split_between_two_speculative_configs() -> None:
    """A split baseline's upper half is whichever baseline its buckets favour there, not only off: n-gram k=4 below
    and n-gram k=2 above, each the best there."""
    space = SearchSpace.build(has_draft=False, rank_cap=1, batch_sizes=[1, 16])
    baselines = space.baselines()
    scores = {1: (10.0, 14.0, 12.0, 13.0), 16: (100.0, 105.0, 110.0, 90.0)}  # off, ngram k=4, k=2, k=8
    scored = [(params, Score(tuple(Bucket(b, scores[b][i], None, (1.0, 1.0, 1.0), 1) for b in scores),
                             tokens_per_s=(scores[1][i] + scores[16][i]) / 2, p99_ms=1.0))
              for i, params in enumerate(baselines)]
    best = _best_splits(space, scored, {1: 0.5, 16: 0.5}, "throughput")
    assert best == [space.split_baseline(baselines[1], baselines[2], 1)]


def test_replay_latency_is_each_full_batch_steps_whole_cost_per_token() -> None:
    """Inter-token latency counts the engine's per-step overhead, as the step's price does, and only the steps at
    the cell's batch size, which its tokens/s counts (the drain's steps run fewer rows)."""
    mine = [t for t in TRACES if t.workload == "copy"]
    plain = linear_cost()
    overhead = plain.model_copy(update={"step_overhead_s": (0.05,) * len(plain.target.batch_sizes)})
    for batch in (1, 4):
        without = ReplayScorer(mine, plain, {batch: 1.0}).score(Candidate(SpecConfig())).buckets[0]
        with_overhead = ReplayScorer(mine, overhead, {batch: 1.0}).score(Candidate(SpecConfig())).buckets[0]
        assert with_overhead.latency_ms == pytest.approx(tuple(ms + 50.0 for ms in without.latency_ms))
    # a forward of a second below 4 rows: only the drain at the end of a batch-4 cell runs one
    slow_drain = plain.model_copy(update={"target": uniform_grid(BATCHES, TOKENS, CONTEXTS,
                                                                 lambda b, t, c: 0.02 if b >= 4 else 1.0)})
    uneven = [make_trace(range(n), prompt=tuple(range(100, 170)), request_id=str(n)) for n in (10, 30, 50, 70)]
    scorer = ReplayScorer(uneven, slow_drain, {4: 1.0})
    cell = replay_cell(scorer.cells[4], StaticPolicy(SpecConfig()), slow_drain, 4, "off")
    assert cell.seconds > cell.emitted_tokens / cell.tokens_per_s + 1.0  # the cell has a drain
    assert scorer.score(Candidate(SpecConfig())).buckets[0].latency_ms[2] < 100.0


def test_batch_mix_weights_the_buckets() -> None:
    cost = linear_cost()
    mine = [t for t in TRACES if t.workload == "copy"]
    ngram = Candidate(SpecConfig(method="ngram", k=8, min_n=1, max_n=2))
    one = ReplayScorer(mine, cost, {1: 1.0}).score(ngram)
    four = ReplayScorer(mine, cost, {4: 1.0}).score(ngram)
    mixed = ReplayScorer(mine, cost, {1: 3, 4: 1}).score(ngram)
    assert mixed.tokens_per_s == pytest.approx(0.75 * one.tokens_per_s + 0.25 * four.tokens_per_s)
    split = Candidate(SpecConfig(method="ngram", k=8, min_n=1, max_n=2), SpecConfig(), split=1)
    config, schedule = split.profile()
    assert config.max_batch_size == 1 and schedule is None
    assert ReplayScorer(mine, cost, {4: 1.0}).score(split).buckets[0].mean_acceptance_length == 1.0


def test_both_objectives_store_a_pareto_front(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    result = tune("copy", 24, objective="both", storage_url=url, traces=TRACES, cost=linear_cost(), seed=2,
                  progress=False)
    study = optuna.load_study(study_name="copy-replay-both", storage=optuna_storage(url))
    front = study.best_trials
    assert front and len(study.directions) == 2
    assert {e["trial"] for e in result.best} == {t.number for t in front}
    for a in front:  # nobody on the front is dominated by another finished trial
        for b in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
            assert not (b.values[0] > a.values[0] and b.values[1] < a.values[1])
    assert result.profile is not None
    assert result.profile.provenance.trial == max(front, key=lambda t: t.values[0]).number


def test_resume_runs_up_to_the_trial_target(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    first = tune("copy", 5, storage_url=url, traces=TRACES, cost=linear_cost(), study_name="s", progress=False)
    second = tune("copy", 9, storage_url=url, traces=TRACES, cost=linear_cost(), study_name="s", progress=False)
    assert (first.trials_done, second.trials_done) == (5, 9)
    again = tune("copy", 9, storage_url=url, traces=TRACES, cost=linear_cost(), study_name="s", progress=False)
    assert again.trials_done == 9
    with pytest.raises(TuneError, match="objective"):
        tune("copy", 9, objective="latency", storage_url=url, traces=TRACES, cost=linear_cost(), study_name="s")
    with pytest.raises(TuneError, match="join: no study"):
        tune("copy", 3, storage_url=url, traces=TRACES, cost=linear_cost(), study_name="nope", join=True)


def _cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _shared_study(url: str, tmp_path: Path) -> None:
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    write_traces(traces_dir / "all.jsonl", TRACES)
    cost_file = tmp_path / "cost.json"
    cost_file.write_text(linear_cost().to_json())
    # Create the study with its trial target and no trials (a stopped start), so both workers share that target.
    stopped = threading.Event()
    stopped.set()
    tune("copy", 40, storage_url=url, traces=TRACES, cost=linear_cost(), study_name="shared", stop=stopped,
         progress=False)
    common = ["--traces", str(traces_dir), "--cost-model", str(cost_file), "--db", url, "--no-progress"]
    owner = [sys.executable, "-m", "tuner.cli", "tune", "copy", "--trials", "40", "--study", "shared", *common]
    joiner = [sys.executable, "-m", "tuner.cli", "tune", "copy", "--join", "shared", *common]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=_cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for cmd in (owner, joiner)]
    deadline = time.monotonic() + 240
    outs = [p.communicate(timeout=max(1, deadline - time.monotonic())) for p in procs]
    for p, (_out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert "saved copy version" in outs[0][0]
    assert "joined worker" in outs[1][0]
    study = optuna.load_study(study_name="shared", storage=optuna_storage(url))
    done = finished_trials(study)
    assert 40 <= done <= 41  # a worker may finish the trial it started when the other reached the target
    workers = {t.user_attrs["worker"] for t in study.trials}
    assert len(workers) == 2
    assert all(candidate_of(t) for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    with Database(url) as db, db.session() as s:
        runs = list_runs(s, "copy")
    assert sorted(r.status for r in runs) == ["cancelled", "succeeded", "succeeded"]


def test_two_processes_share_a_study_on_sqlite(tmp_path: Path) -> None:
    _shared_study(migrated_sqlite(tmp_path), tmp_path)


@pytest.mark.postgres
def test_two_processes_share_a_study_on_postgres(tmp_path: Path) -> None:
    if not os.environ.get("SPECTUNE_TEST_PG_URL", "").strip():
        pytest.skip("SPECTUNE_TEST_PG_URL is unset; run: export SPECTUNE_TEST_PG_URL=$(scripts/postgres.sh start)")
    with migrated_postgres() as url:
        _shared_study(url, tmp_path)


@pytest.mark.parametrize(("args", "message"), [
    (["--trials", "0"], "trials: must be at least 1"),
    (["--objective", "speed"], "objective: expected one of throughput, latency, both"),
    (["--source", "magic"], "source: expected one of replay, live"),
    (["--batch-mix", "1-0.5"], "--batch-mix: '1-0.5' is not BATCH:WEIGHT"),
    (["--cost-model", "/nonexistent.json"], "--cost-model: /nonexistent.json: no such file"),
    (["--engine-url", "http://127.0.0.1:9"], "--engine-url: spectune engine at http://127.0.0.1:9 not healthy"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    url = migrated_sqlite(tmp_path)
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    write_traces(traces_dir / "all.jsonl", TRACES)
    cost_file = tmp_path / "cost.json"
    cost_file.write_text(linear_cost().to_json())
    base = {"--traces": str(traces_dir), "--cost-model": str(cost_file), "--db": url}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [x for kv in base.items() for x in kv]
    result = CliRunner().invoke(app, ["tune", "copy", "--no-progress", *flat])
    assert result.exit_code == 2, result.output
    assert f"error: {message}" in result.output
    assert "Traceback" not in result.output


def test_cli_replay_search_saves_the_profile(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    write_traces(traces_dir / "all.jsonl", TRACES)
    cost_file = tmp_path / "cost.json"
    cost_file.write_text(linear_cost().to_json())
    result = CliRunner().invoke(app, ["tune", "fresh", "--trials", "12", "--traces", str(traces_dir), "--cost-model",
                                      str(cost_file), "--db", url, "--no-progress", "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "saved fresh version 1 (active): off" in result.output


def test_a_terminated_search_is_cancelled_and_resumes(tmp_path: Path) -> None:
    url = migrated_sqlite(tmp_path)
    traces_dir = tmp_path / "traces"
    traces_dir.mkdir()
    write_traces(traces_dir / "all.jsonl", TRACES)
    cost_file = tmp_path / "cost.json"
    cost_file.write_text(linear_cost().to_json())
    cmd = [sys.executable, "-m", "tuner.cli", "tune", "copy", "--study", "long", "--traces", str(traces_dir),
           "--cost-model", str(cost_file), "--db", url, "--no-progress"]
    proc = subprocess.Popen([*cmd, "--trials", "5000"], cwd=ROOT, env=_cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    storage = optuna_storage(url)
    deadline = time.monotonic() + 120
    while "long" not in optuna.get_all_study_names(storage) or finished_trials(
            optuna.load_study(study_name="long", storage=storage)) < 3:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "run the same command to resume" in err, err[-3000:]
    done = finished_trials(optuna.load_study(study_name="long", storage=storage))
    with Database(url) as db, db.session() as s:
        assert list_runs(s, "copy")[0].status == "cancelled"
    resumed = subprocess.run([*cmd, "--trials", str(done + 2)], cwd=ROOT, env=_cli_env(), capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"study long: {done + 2} trials" in resumed.stdout
