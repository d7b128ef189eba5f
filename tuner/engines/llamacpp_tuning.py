"""A live Optuna search over llama-server's launch-time speculation settings, for one workload.

llama.cpp fixes speculation per server process, so each trial applies a launch config (the engine relaunches the
server unless the flags repeat), replays the workload's prompts and scores end-to-end tokens/s (output tokens over
client wall time, prefill included: a draft model also slows prefill). The space covers what llama.cpp offers:
off, ``ngram-simple`` (N, k), ``ngram-mod`` (lookup length N, draft cap k; via the ``llamacpp`` extension) and, with
a draft model, ``draft-simple`` (k). The first trials are llama.cpp's own defaults, so short searches still compare
them. The shared ``tuner.tuning.tune`` cannot run this space: its n-gram windows (min_n < max_n) and trees do not
map to llama.cpp and it has no extension settings.

Before storing, the best few candidates and ``off`` are measured again on fresh servers, interleaved over ``rounds``;
the winner must beat off's median by ``min_gain`` or off is stored, so the profile is never slower than off beyond
noise. The default gain, 10%, is above the noise measured here: the same off config on fresh servers measured 9% apart
between a search's confirmation and a later benchmark on this shared 2-core host. The profile goes in as the
workload's active one for the given identity, provenance ``optuna``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from engine.config import OFF, SpecConfig
from storage.db import Database
from storage.identity import EngineIdentity
from storage.profiles import put_profile
from storage.runs import fail_run, finish_run, start_run
from storage.schemas import BucketMeasurement, Measurements, ProfileCreate, ProfileRecord, Provenance
from tuner.engines.base import EngineAdapter, RequestTiming
from tuner.workloads import prompt_texts, shipped_prompts

NGRAM_SIMPLE_N = (2, 3, 4, 6)
NGRAM_SIMPLE_K = (6, 8, 12, 16)  # >= every N: ngram-simple never drafts when the m-gram is shorter than the n-gram
NGRAM_MOD_N = (4, 8, 12, 16)
NGRAM_MOD_K = (8, 16, 32)
DRAFT_K = (1, 2, 3, 4, 6, 8)
MIN_GAIN = 0.10  # a speculative winner must beat off's median by this much (see the module doc)
WARMUP_PROMPT = "Say hello."


@dataclass(frozen=True)
class LaunchConfig:
    """One point of the llama.cpp space: a SpecConfig plus the ``llamacpp`` extension it needs (if any)."""

    config: SpecConfig
    extension: Mapping[str, Any] | None = None

    def label(self) -> str:
        spec_type = (self.extension or {}).get("spec_type")
        if spec_type == "ngram-mod":
            return f"ngram-mod k={self.config.k} n={self.config.max_n}"
        if self.config.method == "ngram":
            return f"ngram-simple k={self.config.k} n={self.config.max_n}"
        if self.config.method == "draft":
            return f"draft k={self.config.k}"
        return "off"


OFF_LAUNCH = LaunchConfig(OFF)
# llama.cpp's defaults in this version: ngram-simple 12/48 is out of SpecConfig's bounds (n <= 16, k <= 32), so the
# nearest in-bounds point stands in; ngram-mod 24/64 likewise.
DEFAULT_POINTS: tuple[dict[str, Any], ...] = (
    {"mode": "off"},
    {"mode": "ngram-mod", "ngram_mod.n": 16, "ngram_mod.k": 32},
    {"mode": "ngram-simple", "ngram_simple.n": 4, "ngram_simple.k": 16},
    {"mode": "draft-simple", "draft.k": 3},
)


def suggest(trial: optuna.Trial, has_draft: bool) -> LaunchConfig:
    modes = ("off", "ngram-simple", "ngram-mod", *(("draft-simple",) if has_draft else ()))
    mode = trial.suggest_categorical("mode", modes)
    if mode == "ngram-simple":
        n = trial.suggest_categorical("ngram_simple.n", NGRAM_SIMPLE_N)
        k = trial.suggest_categorical("ngram_simple.k", NGRAM_SIMPLE_K)
        return LaunchConfig(SpecConfig(method="ngram", k=k, min_n=n, max_n=n))
    if mode == "ngram-mod":
        n = trial.suggest_categorical("ngram_mod.n", NGRAM_MOD_N)
        k = trial.suggest_categorical("ngram_mod.k", NGRAM_MOD_K)
        return LaunchConfig(SpecConfig(method="ngram", k=k, min_n=n, max_n=n), {"spec_type": "ngram-mod"})
    if mode == "draft-simple":
        return LaunchConfig(SpecConfig(method="draft", k=trial.suggest_categorical("draft.k", DRAFT_K)))
    return OFF_LAUNCH


@dataclass(frozen=True)
class LiveScore:
    """One pass of a workload's prompts on one launch config."""

    tokens_per_s: float  # output tokens / client wall time, prefill included
    decode_tokens_per_s: float
    latency_ms: tuple[float, float, float]  # p50, p90, p99 of per-request decode ms per token
    mean_acceptance_length: float | None  # tokens per verify step, when anything was drafted
    requests: int

    @classmethod
    def of(cls, timings: Sequence[RequestTiming]) -> LiveScore:
        tokens = sum(t.output_tokens for t in timings)
        wall = sum(t.wall_s for t in timings)
        decode = sum(t.decode_s for t in timings)
        per_token = [1000 * t.decode_s / t.output_tokens for t in timings if t.output_tokens]
        p50, p90, p99 = (float(v) for v in np.percentile(per_token, [50, 90, 99])) if per_token else (0.0,) * 3
        drafted = sum(t.draft_tokens for t in timings)
        accepted = sum(t.accepted_tokens for t in timings)
        steps = tokens - accepted
        return cls(tokens / wall if wall > 0 else 0.0, tokens / decode if decode > 0 else 0.0, (p50, p90, p99),
                   tokens / steps if drafted and steps > 0 else None, len(timings))


def workload_prompts(workload: str, limit: int | None = None) -> list[str]:
    """A shipped workload's prompts as user-message text (llama-server applies the GGUF's chat template)."""
    texts = prompt_texts(shipped_prompts(workload))
    return texts[:limit] if limit is not None else texts


def measure(engine: EngineAdapter, workload: str, launch: LaunchConfig, prompts: Sequence[str], max_tokens: int,
            *, fresh: bool = False) -> LiveScore:
    """Apply ``launch`` (a fresh server when ``fresh``), warm it with one tiny request, then send every prompt once."""
    if fresh:
        engine.stop()
    engine.apply(workload, launch.config, launch.extension)
    engine.complete(WARMUP_PROMPT, workload=workload, max_tokens=4)
    return LiveScore.of([engine.complete(p, workload=workload, max_tokens=max_tokens).timing for p in prompts])


@dataclass
class LlamaCppTuneResult:
    study_name: str
    trials: list[dict[str, Any]]
    confirmed: dict[str, list[float]]  # label -> end-to-end tokens/s per confirmation round
    chosen: LaunchConfig
    profile: ProfileRecord


def tune_llamacpp(engine: EngineAdapter, workload: str, prompts: Sequence[str], *, storage_url: str,
                  identity: EngineIdentity, trials: int, has_draft: bool, max_tokens: int = 96,
                  study_name: str | None = None, confirm_top: int = 2, rounds: int = 2, min_gain: float = MIN_GAIN,
                  seed: int | None = 0, log: Callable[[str], None] = lambda _: None) -> LlamaCppTuneResult:
    """Search, confirm against off, and store the winner as ``workload``'s active profile (see the module doc)."""
    if trials < 1:
        raise ValueError(f"trials: must be at least 1, got {trials}")
    if not prompts:
        raise ValueError("prompts: the live search needs the workload's prompts")
    if rounds < 1:
        raise ValueError(f"rounds: must be at least 1, got {rounds}")
    from tuner.tuning.study import optuna_storage

    name = study_name or f"{workload}-llamacpp-live"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=optuna_storage(storage_url), direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed), load_if_exists=True)
    if not study.trials:
        for point in DEFAULT_POINTS:
            if has_draft or point["mode"] != "draft-simple":
                study.enqueue_trial(point)
    launches: dict[str, LaunchConfig] = {}

    def objective(trial: optuna.Trial) -> float:
        launch = suggest(trial, has_draft)
        launches[launch.label()] = launch
        score = measure(engine, workload, launch, prompts, max_tokens)
        trial.set_user_attr("label", launch.label())
        trial.set_user_attr("decode_tokens_per_s", score.decode_tokens_per_s)
        trial.set_user_attr("p99_ms", score.latency_ms[2])
        log(f"trial {trial.number}: {launch.label():<26} {score.tokens_per_s:6.2f} tok/s e2e "
            f"({score.decode_tokens_per_s:.2f} decode)")
        return score.tokens_per_s

    with Database(storage_url) as db:
        with db.session() as s:
            run = start_run(s, workload, "live", study_name=name)
        try:
            study.optimize(objective, n_trials=trials, catch=())
            result = _confirm_and_store(db, study, engine, workload, prompts, launches, identity=identity,
                                        max_tokens=max_tokens, confirm_top=confirm_top, rounds=rounds,
                                        min_gain=min_gain, has_draft=has_draft, log=log)
        except BaseException as exc:
            with db.session() as s:
                fail_run(s, run.id, exc)
            raise
        with db.session() as s:
            finish_run(s, run.id, "succeeded", result={"study": name, "chosen": result.chosen.label(),
                                                      "confirmed": result.confirmed,
                                                      "profile_version": result.profile.version})
    return result


def _ranked(study: optuna.Study, has_draft: bool, launches: dict[str, LaunchConfig]) -> list[LaunchConfig]:
    """Distinct speculative candidates, best trial first (trials of an earlier run are rebuilt from their params)."""
    done = sorted(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)),
                  key=lambda t: t.values[0], reverse=True)
    seen: dict[str, LaunchConfig] = {}
    for trial in done:
        launch = launches.get(trial.user_attrs.get("label", "")) or suggest(optuna.trial.FixedTrial(trial.params),
                                                                            has_draft)
        if launch.config.speculative:
            seen.setdefault(launch.label(), launch)
    return list(seen.values())


def _confirm_and_store(db: Database, study: optuna.Study, engine: EngineAdapter, workload: str,
                       prompts: Sequence[str], launches: dict[str, LaunchConfig], *, identity: EngineIdentity,
                       max_tokens: int, confirm_top: int, rounds: int, min_gain: float, has_draft: bool,
                       log: Callable[[str], None]) -> LlamaCppTuneResult:
    candidates = [OFF_LAUNCH, *_ranked(study, has_draft, launches)[:confirm_top]]
    scores: dict[str, list[LiveScore]] = {c.label(): [] for c in candidates}
    for round_ in range(rounds):
        order = candidates if round_ % 2 == 0 else candidates[::-1]  # alternate to spread host drift evenly
        for launch in order:
            scores[launch.label()].append(measure(engine, workload, launch, prompts, max_tokens, fresh=True))
    medians = {label: statistics.median(s.tokens_per_s for s in runs) for label, runs in scores.items()}
    off_median = medians["off"]
    best = max(candidates[1:], key=lambda c: medians[c.label()], default=OFF_LAUNCH)
    chosen = best if medians[best.label()] >= off_median * (1 + min_gain) else OFF_LAUNCH
    summary = ", ".join(f"{label} {m:.2f}" for label, m in medians.items())
    log(f"confirmed over {rounds} round(s), median tok/s: {summary} -> {chosen.label()}")
    runs = scores[chosen.label()]
    pick = min(runs, key=lambda s: abs(s.tokens_per_s - medians[chosen.label()]))
    complete = sorted(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)),
                      key=lambda t: t.number)
    best_trial = max((t for t in complete if t.user_attrs.get("label") == chosen.label()),
                     key=lambda t: t.values[0], default=None)
    note = (f"llama-server live search ({len(study.trials)} trials); confirmed on fresh servers over {rounds} "
            f"interleaved round(s) of {len(prompts)} prompts x {max_tokens} tokens, median end-to-end tok/s: "
            f"{summary}; "
            f"kept only if >= {1 + min_gain:.2f}x off")
    create = ProfileCreate(
        config=chosen.config, identity=identity,
        measurements=Measurements(buckets=[BucketMeasurement(
            batch_size=1, tokens_per_s=medians[chosen.label()], tokens_per_s_off=off_median,
            mean_acceptance_length=pick.mean_acceptance_length, latency_p50_ms=pick.latency_ms[0],
            latency_p90_ms=pick.latency_ms[1], latency_p99_ms=pick.latency_ms[2],
            samples=sum(s.requests for s in runs))]),
        provenance=Provenance(kind="optuna", study=study.study_name,
                              trial=best_trial.number if best_trial is not None else None, note=note[:2000]),
        extensions={"llamacpp": dict(chosen.extension)} if chosen.extension else {})
    with db.session() as s:
        record = put_profile(s, workload, create, activate=True)
    trials = [{"trial": t.number, "label": t.user_attrs.get("label"), "tokens_per_s": t.values[0]} for t in complete]
    return LlamaCppTuneResult(study.study_name, trials, {k: [s.tokens_per_s for s in v] for k, v in scores.items()},
                              chosen, record)
