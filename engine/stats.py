"""Plain statistics the engine yields: one ``StepStats`` per request per decode step, one ``RequestSummary`` per
finished request. Terms as in vLLM: *accepted* tokens are draft tokens the target agreed with; the *bonus* token is the
target's own next token after the last accepted one; *mean acceptance length* = 1 + accepted / drafts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class StepStats:
    """What one decode step did for one request. A step is one target forward shared by the whole batch."""

    step: int  # engine-wide step counter
    request_id: str
    workload: str
    batch_size: int  # requests in this step
    context_len: int  # tokens in the request's KV cache before the step
    method: str  # method in force for this request in this step
    k: int  # draft depth used (0 when not speculating)
    draft_tokens: int  # draft nodes proposed (tree nodes; = k for a chain)
    accepted_tokens: int  # draft tokens accepted (length of the accepted path)
    accepted_per_position: tuple[int, ...]  # 1 if a draft token was accepted at depth d, for d = 1..k
    emitted_tokens: int  # tokens appended to the output (accepted + bonus, fewer at a stop)
    verify_tokens: int  # tokens this request fed to the verify forward (1 + draft nodes)
    batch_verify_tokens: int  # tokens fed to the verify forward by the whole batch
    draft_s: float  # draft time of the whole step (shared by the batch)
    verify_s: float  # verify forward time of the whole step (shared by the batch)
    timestamp: float
    finished: bool = False  # the request ended with this step (a stop token or its token limit)
    # the request's prompt tokens, its output tokens before this step and its token limit, so that an observer that
    # did not decide the step (the tuner's controller) knows what a policy deciding it knew; 0 / None where unknown
    prompt_len: int = 0
    output_len: int = 0
    max_new_tokens: int | None = None

    @property
    def speculated(self) -> bool:
        return self.draft_tokens > 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RequestSummary:
    """Running totals for one request; ``observe_step`` folds in each step."""

    request_id: str
    workload: str
    prompt_len: int
    output_len: int = 0
    steps: int = 0
    drafts: int = 0  # steps that proposed at least one draft token
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0
    wall_s: float = 0.0
    finish_reason: str | None = None

    def observe_step(self, stats: StepStats) -> None:
        self.steps += 1
        self.output_len += stats.emitted_tokens
        self.draft_s += stats.draft_s
        self.verify_s += stats.verify_s
        if stats.speculated:
            self.drafts += 1
            self.draft_tokens += stats.draft_tokens
            self.accepted_tokens += stats.accepted_tokens
            missing = len(stats.accepted_per_position) - len(self.accepted_per_position)
            if missing > 0:
                self.accepted_per_position.extend([0] * missing)
            for depth, hit in enumerate(stats.accepted_per_position):
                self.accepted_per_position[depth] += hit

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else 1.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_len / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mean_acceptance_length"] = self.mean_acceptance_length
        out["tokens_per_s"] = self.tokens_per_s
        return out
