"""``tune``: one Optuna search for a workload, from study to saved profile.

The study lives in the storage database (Optuna's RDB storage on the same URL). A study keeps its settings (workload,
source, objective, trial target) as user attributes: running ``tune`` again with the same name resumes it up to the
trial target, and ``join=True`` adds a worker to an existing study, on its settings, sharing the target. The worker
that did not join saves the profile: the best few candidates (the Pareto front for ``both``), confirmed on the live
engine when one is given, then ``put_profile`` + activate with provenance ``optuna``/study/trial and the measurements.
Every call records a ``tuning_runs`` row.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import optuna
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from engine.config import OFF
from policies.cost_model import CostModel
from storage.db import Database
from storage.identity import PORTABLE, EngineIdentity
from storage.profiles import put_profile
from storage.runs import fail_run, finish_run, start_run
from storage.schemas import ProfileCreate, ProfileRecord, Provenance, check_workload_name
from tuner.engines.base import EngineAdapter, UnsupportedConfigError
from tuner.traces import Trace
from tuner.tuning.progress import TrialProgress, finished_trials
from tuner.tuning.scoring import ReplayScorer, Score, measure_live, normalize_mix, spliced
from tuner.tuning.space import Candidate, SearchSpace, candidate_of, describe

Source = Literal["replay", "live"]
Objective = Literal["throughput", "latency", "both"]
SOURCES: tuple[str, ...] = ("replay", "live")
OBJECTIVES: tuple[str, ...] = ("throughput", "latency", "both")
DIRECTIONS: dict[str, list[str]] = {"throughput": ["maximize"], "latency": ["minimize"],
                                    "both": ["maximize", "minimize"]}


class TuneError(ValueError):
    """Bad tuning input; the message names the argument at fault."""


@dataclass
class TuneResult:
    study_name: str
    run_id: int
    trials_done: int
    best: list[dict[str, Any]]  # the best trial, or the Pareto front for ``both``
    profile: ProfileRecord | None = None
    confirmed: list[dict[str, Any]] = field(default_factory=list)  # live measurements of the confirmed candidates
    stopped: bool = False


def optuna_storage(url: str, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's storage on the spectune database URL (SQLite waits for writers instead of failing)."""
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except (OperationalError, IntegrityError, ProgrammingError):
            # Another worker is creating Optuna's tables in a fresh database right now; they exist once it is done.
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def default_study_name(workload: str, source: str, objective: str) -> str:
    return f"{workload}-{source}-{objective}"


def _values(score: Score, objective: str) -> float | tuple[float, float]:
    if objective == "throughput":
        return score.tokens_per_s
    if objective == "latency":
        return score.p99_ms
    return score.tokens_per_s, score.p99_ms


def _open_study(storage: optuna.storages.RDBStorage, name: str, *, join: bool, workload: str, source: str,
                objective: str, trials: int, seed: int | None) -> optuna.Study:
    sampler = optuna.samplers.TPESampler(seed=seed)
    if join:
        try:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            raise TuneError(f"join: no study named {name!r} in this database") from None
        if study.user_attrs.get("workload") != workload:
            raise TuneError(f"join: study {name!r} tunes workload {study.user_attrs.get('workload')!r}, "
                            f"not {workload!r}")
        return study
    if objective == "both":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    study = optuna.create_study(study_name=name, storage=storage, directions=DIRECTIONS[objective], sampler=sampler,
                                load_if_exists=True)
    attrs = study.user_attrs
    if attrs:
        for key, value in (("workload", workload), ("source", source), ("objective", objective)):
            if attrs.get(key) != value:
                raise TuneError(f"study: {name!r} exists with {key}={attrs.get(key)!r}; resume it with the same "
                                f"{key} ({value!r} given) or pick another --study name")
    else:
        for key, value in (("workload", workload), ("source", source), ("objective", objective)):
            study.set_user_attr(key, value)
    study.set_user_attr("trials", trials)  # the owner sets the target; joined workers share it
    return study


def _ranked(study: optuna.Study, objective: str, top: int) -> list[optuna.trial.FrozenTrial]:
    """Distinct candidates, best first: by the objective, or the Pareto front by throughput for ``both``."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if objective == "both":
        ordered = sorted(study.best_trials, key=lambda t: -t.values[0])
    else:
        ordered = sorted(complete, key=lambda t: t.values[0], reverse=objective == "throughput")
    seen, out = set(), []
    for trial in ordered:
        label = candidate_of(trial).label()
        if label not in seen:
            seen.add(label)
            out.append(trial)
    return out[:top] if objective != "both" else out


def _check(workload: str, trials: int, source: str, objective: str) -> None:
    try:
        check_workload_name(workload)
    except ValueError as exc:
        raise TuneError(f"workload: {exc}") from None
    if trials < 1:
        raise TuneError(f"trials: must be at least 1, got {trials}")
    if source not in SOURCES:
        raise TuneError(f"source: expected one of {', '.join(SOURCES)}, got {source!r}")
    if objective not in OBJECTIVES:
        raise TuneError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")


def tune(workload: str, trials: int, *, source: str = "replay", objective: str = "throughput",
         storage_url: str, study_name: str | None = None, join: bool = False,
         traces: Sequence[Trace] | None = None, cost: CostModel | None = None,
         batch_mix: dict[int, float] | None = None, engine: EngineAdapter | None = None,
         prompts: Sequence[str] = (), max_tokens: int = 64, confirm_top: int = 3,
         identity: EngineIdentity = PORTABLE, seed: int | None = None, progress: bool = True,
         stop: threading.Event | None = None, on_trial: Callable[[optuna.Study], None] | None = None) -> TuneResult:
    """Search speculation configs for ``workload`` and save the best as its active profile (see the module doc).

    ``source="replay"`` needs ``traces`` (this workload's) and ``cost``; ``"live"`` needs ``engine`` and ``prompts``.
    ``stop`` ends the search after the running trial; the run is then recorded as cancelled and nothing is saved.
    """
    _check(workload, trials, source, objective)
    name = study_name or default_study_name(workload, source, objective)
    storage = optuna_storage(storage_url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    evaluate = _evaluator(source, workload, traces, cost, batch_mix, engine, prompts, max_tokens)
    space = _space(source, traces, batch_mix, engine)
    study = _open_study(storage, name, join=join, workload=workload, source=source, objective=objective,
                        trials=trials, seed=seed)
    if (study.user_attrs["source"], study.user_attrs["objective"]) != (source, objective):
        raise TuneError(f"join: study {name!r} searches source={study.user_attrs['source']!r} "
                        f"objective={study.user_attrs['objective']!r}; join it with the same settings")
    target = int(study.user_attrs["trials"])

    def score_trial(trial: optuna.Trial | optuna.trial.FixedTrial) -> Score:
        candidate = space.suggest(trial)
        trial.set_user_attr("candidate", candidate.to_json())
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        try:
            return evaluate(candidate)
        except UnsupportedConfigError as exc:  # e.g. draft on an engine without a draft model: skip, keep searching
            trial.set_user_attr("unsupported", str(exc))
            raise optuna.TrialPruned(str(exc)) from None

    def objective_fn(trial: optuna.Trial) -> float | tuple[float, float]:
        return _values(score_trial(trial), objective)

    def stop_when_done(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        if on_trial is not None:
            on_trial(study)
        if (stop is not None and stop.is_set()) or finished_trials(study) >= target:
            study.stop()

    with Database(storage_url) as db:
        with db.session() as s:
            run = start_run(s, workload, source, study_name=name)
        result = TuneResult(study_name=name, run_id=run.id, trials_done=finished_trials(study), best=[])
        try:
            remaining = target - finished_trials(study)
            if remaining > 0 and not (stop is not None and stop.is_set()):
                with TrialProgress(study, target, enabled=progress) as bar:
                    if not join and not study.trials:
                        _add_baselines(study, space, score_trial, objective, normalize_mix(batch_mix), target,
                                       bar.callback)
                    left = target - finished_trials(study)  # the baselines may have filled the target
                    if left > 0:
                        study.optimize(objective_fn, n_trials=left, callbacks=[stop_when_done, bar.callback],
                                       catch=())
            result.trials_done = finished_trials(study)
            result.stopped = stop is not None and stop.is_set()
            ranked = _ranked(study, objective, confirm_top)
            result.best = [describe(t) for t in ranked]
            if not result.stopped and not join and ranked:
                result.profile, result.confirmed = _save(db, study, ranked, workload, objective, evaluate, engine,
                                                         prompts, max_tokens, identity, source)
        except BaseException as exc:
            with db.session() as s:
                fail_run(s, run.id, exc)
            raise
        with db.session() as s:
            finish_run(s, run.id, "cancelled" if result.stopped else "succeeded", result=_summary(result))
    return result


def _add_baselines(study: optuna.Study, space: SearchSpace,
                   score_trial: Callable[[optuna.trial.FixedTrial], Score], objective: str, mix: dict[int, float],
                   limit: int, callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None]) -> None:
    """Score ``space.baselines()`` and add them as the study's first finished trials; then, for each method, the
    split of two baselines that their buckets say pays most (``_best_splits``). Added, not enqueued: several workers
    popping enqueued trials from SQLite can claim the same one."""

    def add(params: dict[str, Any]) -> Score | None:
        fixed = optuna.trial.FixedTrial(params)
        try:
            score: Score | None = score_trial(fixed)
            state = optuna.trial.TrialState.COMPLETE
        except optuna.TrialPruned:
            score, state = None, optuna.trial.TrialState.PRUNED
        values = None if score is None else _values(score, objective)
        study.add_trial(optuna.trial.create_trial(
            params=fixed.params, distributions=fixed.distributions, state=state, user_attrs=fixed.user_attrs,
            values=None if values is None else list(values) if isinstance(values, tuple) else [values]))
        callback(study, study.trials[-1])
        return score

    scored = [(params, score) for params in space.baselines()[:limit] if (score := add(params)) is not None]
    for params in _best_splits(space, scored, mix, objective):
        if len(study.trials) < limit:
            add(params)


def _best_splits(space: SearchSpace, scored: list[tuple[dict[str, Any], Score]], mix: dict[int, float],
                 objective: str) -> list[dict[str, Any]]:
    """For each method, the split baseline that does best by the scored baselines' buckets: that method's baseline
    up to a batch size, another baseline (off, or any method at any k) above it. Only splits that beat both their
    halves everywhere count; best first."""
    def value(score: Score) -> float:
        return -score.p99_ms if objective == "latency" else score.tokens_per_s

    found: list[tuple[float, dict[str, Any]]] = []
    for method in space.methods[1:]:
        best: tuple[float, dict[str, Any]] | None = None
        for low, low_score in scored:
            if low["low.method"] != method:
                continue
            for high, high_score in scored:
                if high is low:
                    continue
                for split in space.splits[1:]:
                    joined = value(spliced(low_score, high_score, split, mix))
                    if joined > max(value(low_score), value(high_score)) and (best is None or joined > best[0]):
                        best = joined, space.split_baseline(low, high, split)
        if best is not None:
            found.append(best)
    return [params for _, params in sorted(found, key=lambda item: -item[0])]


def _summary(result: TuneResult) -> dict[str, Any]:
    return {"study": result.study_name, "trials_done": result.trials_done, "best": result.best,
            "confirmed": result.confirmed,
            "profile_version": result.profile.version if result.profile is not None else None}


def _space(source: str, traces: Sequence[Trace] | None, batch_mix: dict[int, float] | None,
           engine: EngineAdapter | None) -> SearchSpace:
    if source == "live":
        # Live requests go one at a time (batch size 1): a batch-size split cannot be measured there.
        assert engine is not None
        caps = engine.capabilities
        return SearchSpace.build(has_draft="draft" in caps.methods, rank_cap=16 if caps.trees else 1,
                                 batch_sizes=[1])
    assert traces is not None
    has_draft = all(t.has_draft for t in traces)
    rank_cap = min(t.rank_cap for t in traces) if has_draft else 1
    return SearchSpace.build(has_draft, rank_cap, list(normalize_mix(batch_mix)))


def _evaluator(source: str, workload: str, traces: Sequence[Trace] | None, cost: CostModel | None,
               batch_mix: dict[int, float] | None, engine: EngineAdapter | None, prompts: Sequence[str],
               max_tokens: int) -> Callable[[Candidate], Score]:
    if source == "live":
        if engine is None:
            raise TuneError("engine: source live needs an engine (--engine-url)")
        if not prompts:
            raise TuneError("prompts: source live needs the workload's prompts")
        return lambda c: measure_live(engine, workload, c, prompts, max_tokens)
    if cost is None:
        raise TuneError("cost_model: source replay needs a cost model (spectune calibrate, then --cost-model)")
    mine = [t for t in traces or () if t.workload == workload]
    if not mine:
        raise TuneError(f"traces: no traces of workload {workload!r} (record some with `spectune record`)")
    from tuner.replay import check_identity

    try:
        check_identity(mine, cost)
    except ValueError as exc:
        raise TuneError(f"traces: {exc}") from None
    return ReplayScorer(mine, cost, batch_mix).score


def _save(db: Database, study: optuna.Study, ranked: list[optuna.trial.FrozenTrial], workload: str, objective: str,
          evaluate: Callable[[Candidate], Score], engine: EngineAdapter | None, prompts: Sequence[str],
          max_tokens: int, identity: EngineIdentity, source: str) -> tuple[ProfileRecord, list[dict[str, Any]]]:
    """Confirm the ranked candidates on the engine (if any), keep the best measured one, store and activate it."""
    off = Candidate(low=OFF)
    confirmed: list[dict[str, Any]] = []
    if engine is not None and prompts:
        baseline = measure_live(engine, workload, off, prompts, max_tokens)
        scored = [(t, measure_live(engine, workload, candidate_of(t), prompts, max_tokens)) for t in ranked]
        confirmed = [{"trial": t.number, "label": candidate_of(t).label(), "tokens_per_s": s.tokens_per_s,
                      "p99_ms": s.p99_ms, "tokens_per_s_off": baseline.tokens_per_s} for t, s in scored]
        pick = (min(scored, key=lambda ts: ts[1].p99_ms) if objective == "latency"
                else max(scored, key=lambda ts: ts[1].tokens_per_s))
        trial, score = pick
        note = (f"confirmed live on {len(prompts)} prompts against {len(ranked)} candidates; "
                f"off {baseline.tokens_per_s:.2f} tok/s")
    else:
        trial = ranked[0]
        score, baseline = evaluate(candidate_of(trial)), evaluate(off)
        note = f"scored by {source}; not confirmed on a live engine"
    config, schedule = candidate_of(trial).profile()
    create = ProfileCreate(config=config, schedule=schedule, identity=identity,
                           measurements=score.measurements(baseline),
                           provenance=Provenance(kind="optuna", study=study.study_name, trial=trial.number, note=note))
    with db.session() as s:
        record = put_profile(s, workload, create, activate=True)
    if confirmed:
        assert engine is not None
        engine.apply(workload, config)  # the engine runs what was saved, not the last candidate confirmed
    return record, confirmed
