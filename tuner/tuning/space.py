"""The search space: method, k, tree shape, n-gram window and match order, and a batch-size split with its own config
above it.

A candidate is one config up to ``split`` (every batch size when ``split`` is None) and another above it (``off``
allowed). Choices are fixed per study: they depend only on whether the traces carry draft ranks, their rank cap and the
batch-size mix, so every worker of a study proposes from the same space.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

import optuna

from engine.config import OFF, NgramMatch, SpecConfig, TreeShape
from storage.schemas import Schedule, ScheduleEntry
from tuner.replay.oracle import DRAFT_TREES, NGRAM_WINDOWS

NGRAM_MATCHES: tuple[str, ...] = get_args(NgramMatch)

MAX_K = 16
NO_SPLIT = 0
BASELINE_KS = (4, 2, 8)  # k=4 first: where a study has few trials, it keeps those


@dataclass(frozen=True)
class Candidate:
    """What one trial proposes: ``low`` up to batch size ``split`` (everywhere without a split), ``high`` above it."""

    low: SpecConfig
    high: SpecConfig | None = None
    split: int | None = None

    def at(self, batch_size: int) -> SpecConfig:
        if self.split is not None and batch_size > self.split:
            return (self.high or OFF).at_batch_size(batch_size)
        return self.low.at_batch_size(batch_size)

    def profile(self) -> tuple[SpecConfig, Schedule | None]:
        """The profile's config and schedule: ``max_batch_size`` when speculation just stops above the split."""
        if self.split is None or self.high is None:
            return self.low, None
        if not self.high.speculative:
            return (self.low.model_copy(update={"max_batch_size": self.split}) if self.low.speculative else OFF), None
        return self.low, Schedule([ScheduleEntry(min_batch=1, max_batch=self.split, config=self.low),
                                   ScheduleEntry(min_batch=self.split + 1, config=self.high)])

    def label(self) -> str:
        if self.split is None or self.high is None:
            return self.low.label()
        return f"B<={self.split}: {self.low.label()}; B>{self.split}: {self.high.label()}"

    def to_json(self) -> str:
        return json.dumps({"low": self.low.model_dump(mode="json"),
                           "high": self.high.model_dump(mode="json") if self.high is not None else None,
                           "split": self.split})

    @classmethod
    def from_json(cls, text: str) -> Candidate:
        data = json.loads(text)
        high = SpecConfig.model_validate(data["high"]) if data["high"] is not None else None
        return cls(SpecConfig.model_validate(data["low"]), high, data["split"])


@dataclass(frozen=True)
class SearchSpace:
    methods: tuple[str, ...]
    trees: tuple[str, ...]
    windows: tuple[str, ...]
    splits: tuple[int, ...]  # batch sizes a split may sit at (0 = no split)

    @classmethod
    def build(cls, has_draft: bool, rank_cap: int, batch_sizes: Sequence[int]) -> SearchSpace:
        trees = ("chain", *(",".join(map(str, b)) for b in DRAFT_TREES if max(b) <= rank_cap))
        sizes = sorted(set(batch_sizes))
        return cls(methods=("off", "ngram", "draft") if has_draft else ("off", "ngram"), trees=trees,
                   windows=tuple(f"{lo}-{hi}" for lo, hi in NGRAM_WINDOWS), splits=(NO_SPLIT, *sizes[:-1]))

    def _config(self, trial: optuna.Trial, segment: str) -> SpecConfig:
        method = trial.suggest_categorical(f"{segment}.method", self.methods)
        if method == "off":
            return OFF
        k = trial.suggest_int(f"{segment}.k", 1, MAX_K, log=True)  # small k matter most; 16 vs 15 barely differs
        if method == "draft":
            tree = TreeShape.parse(trial.suggest_categorical(f"{segment}.tree", self.trees))
            return SpecConfig(method="draft", k=k, tree=tree)
        lo, hi = (int(n) for n in trial.suggest_categorical(f"{segment}.window", self.windows).split("-"))
        match = trial.suggest_categorical(f"{segment}.match", NGRAM_MATCHES)
        return SpecConfig(method="ngram", k=k, min_n=lo, max_n=hi, ngram_match=match)

    def suggest(self, trial: optuna.Trial) -> Candidate:
        split = trial.suggest_categorical("split", self.splits) if len(self.splits) > 1 else NO_SPLIT
        low = self._config(trial, "low")
        if split == NO_SPLIT:
            return Candidate(low)
        high = self._config(trial, "high")
        return Candidate(low) if high == low else Candidate(low, high, int(split))


    def baselines(self) -> list[dict[str, Any]]:
        """Params of the first trials of a new study: off, then each method at k=4, then at k=2 and k=8, at every
        batch size. Random start-up trials rarely hit these, and TPE learns from them what each region is worth;
        ``split_baseline`` then joins two of them at a batch size where their buckets say a split pays."""
        params: list[dict[str, Any]] = [{"low.method": "off"}]
        for k in BASELINE_KS:
            for method in self.methods[1:]:
                extra = {"tree": "chain"} if method == "draft" else {"window": "1-4", "match": "recent"}
                params.append({"low.method": method, "low.k": k, **{f"low.{key}": v for key, v in extra.items()}})
        return [{"split": NO_SPLIT, **p} for p in params] if len(self.splits) > 1 else params

    @staticmethod
    def split_baseline(low: dict[str, Any], high: dict[str, Any], split: int) -> dict[str, Any]:
        """Baseline ``low``'s config up to batch size ``split``, baseline ``high``'s above it."""
        above = {f"high.{key.removeprefix('low.')}": v for key, v in high.items() if key.startswith("low.")}
        return {**low, "split": split, **above}


def candidate_of(trial: optuna.trial.FrozenTrial) -> Candidate:
    return Candidate.from_json(trial.user_attrs["candidate"])


def describe(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """A finished trial as plain JSON: number, values, candidate label and its profile config."""
    candidate = candidate_of(trial)
    config, schedule = candidate.profile()
    return {"trial": trial.number, "values": trial.values, "label": candidate.label(),
            "config": config.model_dump(mode="json"),
            "schedule": schedule.model_dump(mode="json") if schedule is not None else None}
