"""Workload identification for unnamed (``default``) traffic: the nearest named workload by request features.

Features per finished request: log prompt length, log output length and acceptance rate (for n-gram speculation the
acceptance rate is the prompt/output n-gram overlap the lookup found). Each named workload keeps running feature means;
a request goes to the workload at the smallest scaled distance, and its confidence is that workload's share of
``exp(-distance)`` over all of them (1.0 when only one is known and close, lower as others get as close).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# scale per feature: a factor e in length, or 0.25 in acceptance, counts as distance 1
_SCALES = (1.0, 1.0, 0.25)


def features(summary: dict[str, float]) -> tuple[float, float, float | None]:
    acceptance = summary["acceptance"]
    return (math.log1p(summary["prompt_len"]), math.log1p(summary["output_len"]),
            None if math.isnan(acceptance) else acceptance)


@dataclass
class _Centroid:
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])

    def add(self, point: tuple[float, float, float | None]) -> None:
        for i, value in enumerate(point):
            if value is not None:
                self.sums[i] += value
                self.counts[i] += 1

    def distance(self, point: tuple[float, float, float | None]) -> float:
        total = 0.0
        for i, value in enumerate(point):
            if value is not None and self.counts[i]:
                total += ((value - self.sums[i] / self.counts[i]) / _SCALES[i]) ** 2
        return math.sqrt(total)


@dataclass(frozen=True)
class Assignment:
    workload: str
    confidence: float
    distance: float


class Identifier:
    def __init__(self) -> None:
        self._centroids: dict[str, _Centroid] = {}
        self.assigned: dict[str, list[float]] = {}  # workload -> confidences of default requests assigned to it

    def learn(self, workload: str, summary: dict[str, float]) -> None:
        self._centroids.setdefault(workload, _Centroid()).add(features(summary))

    def assign(self, summary: dict[str, float]) -> Assignment | None:
        """The named workload this request looks like, or ``None`` before any named traffic was seen."""
        if not self._centroids:
            return None
        point = features(summary)
        distances = {name: c.distance(point) for name, c in self._centroids.items()}
        best = min(distances, key=lambda name: distances[name])
        weights = {name: math.exp(-d) for name, d in distances.items()}
        # one known workload: confidence is how close the request is to it
        confidence = weights[best] / sum(weights.values()) if len(weights) > 1 else weights[best]
        self.assigned.setdefault(best, []).append(confidence)
        return Assignment(best, confidence, distances[best])

    def summary(self) -> dict[str, dict[str, float]]:
        return {name: {"requests": len(c), "mean_confidence": sum(c) / len(c)}
                for name, c in sorted(self.assigned.items())}
