"""What the controller knows about each workload's traffic: lengths, acceptance per position, batch sizes, step costs
and measured goodput, kept over a bounded recent history."""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from engine.stats import StepStats

HISTORY = 4096  # steps kept per workload for measured goodput
REQUESTS = 512  # request summaries kept per workload


@dataclass(frozen=True, slots=True)
class _Step:
    at: float  # controller clock when observed
    method: str
    emitted: int
    seconds: float  # draft + verify of the step (what this request waited for it)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class WorkloadStats:
    """One workload's recent traffic. Acceptance per position counts, per method, the drafting steps that reached a
    depth and those accepted there (a chain accepts depth d only when depths 1..d-1 were)."""

    steps_seen: int = 0
    requests_seen: int = 0
    steps: deque[_Step] = field(default_factory=lambda: deque(maxlen=HISTORY))
    requests: deque[dict[str, float]] = field(default_factory=lambda: deque(maxlen=REQUESTS))
    batch_sizes: Counter[int] = field(default_factory=Counter)
    context_lens: deque[int] = field(default_factory=lambda: deque(maxlen=HISTORY))
    drafted: dict[str, list[int]] = field(default_factory=dict)  # method -> steps that drafted depth d
    accepted: dict[str, list[int]] = field(default_factory=dict)  # method -> steps that accepted depth d
    verify_s_by_batch: dict[int, list[float]] = field(default_factory=dict)  # batch size -> [sum s, count]

    def observe_step(self, step: StepStats, now: float) -> None:
        self.steps_seen += 1
        self.steps.append(_Step(now, step.method, step.emitted_tokens, step.draft_s + step.verify_s))
        self.batch_sizes[step.batch_size] += 1
        self.context_lens.append(step.context_len)
        cost = self.verify_s_by_batch.setdefault(step.batch_size, [0.0, 0])
        cost[0] += step.verify_s
        cost[1] += 1
        if step.draft_tokens > 0:
            drafted = self.drafted.setdefault(step.method, [])
            accepted = self.accepted.setdefault(step.method, [])
            depth = max(step.k, len(step.accepted_per_position))
            if len(drafted) < depth:
                drafted.extend([0] * (depth - len(drafted)))
                accepted.extend([0] * (depth - len(accepted)))
            for d in range(depth):
                drafted[d] += 1
            for d, hit in enumerate(step.accepted_per_position):
                accepted[d] += hit

    def observe_request(self, summary: dict[str, Any]) -> None:
        self.requests_seen += 1
        drafts = summary.get("draft_tokens", 0) or 0
        self.requests.append({
            "prompt_len": float(summary.get("prompt_len", 0)),
            "output_len": float(summary.get("output_len", 0)),
            "acceptance": (summary.get("accepted_tokens", 0) or 0) / drafts if drafts else math.nan,
        })

    # -- reading ----------------------------------------------------------------------------------------------------
    def goodput(self, since: float, until: float = math.inf) -> tuple[float | None, int]:
        """Measured tokens per second of one request (emitted tokens over the step time it waited) for steps observed
        in ``[since, until)``, and the number of steps behind it."""
        chosen = [s for s in self.steps if since <= s.at < until]
        seconds = sum(s.seconds for s in chosen)
        return (sum(s.emitted for s in chosen) / seconds if seconds > 0 else None), len(chosen)

    def acceptance_per_position(self, method: str) -> list[float]:
        """Share of drafting steps accepted at each depth (1-based positions in order)."""
        drafted, accepted = self.drafted.get(method, []), self.accepted.get(method, [])
        return [a / d if d else 0.0 for a, d in zip(accepted, drafted, strict=True)]

    def typical_batch_size(self) -> int:
        return self.batch_sizes.most_common(1)[0][0] if self.batch_sizes else 1

    def typical_context_len(self) -> int:
        ordered = sorted(self.context_lens)
        return ordered[len(ordered) // 2] if ordered else 0

    def recent_requests(self, count: int) -> list[dict[str, float]]:
        return list(self.requests)[-count:]

    def evidence(self) -> dict[str, Any]:
        """JSON-ready summary: sample counts, length means, batch sizes, acceptance per position, step costs."""
        recent = list(self.requests)
        return {
            "steps": self.steps_seen,
            "requests": self.requests_seen,
            "mean_prompt_len": _mean([r["prompt_len"] for r in recent]),
            "mean_output_len": _mean([r["output_len"] for r in recent]),
            "batch_sizes": {str(b): n for b, n in sorted(self.batch_sizes.items())},
            "acceptance_per_position": {m: [round(a, 4) for a in self.acceptance_per_position(m)]
                                        for m in sorted(self.drafted)},
            "drafting_steps": {m: (d[0] if d else 0) for m, d in sorted(self.drafted.items())},
            "verify_s_by_batch": {str(b): round(s / n, 6) for b, (s, n) in sorted(self.verify_s_by_batch.items())},
        }
