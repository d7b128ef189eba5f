"""The seam between the engine and whatever picks a request's speculation config each step.

The engine calls ``decide`` once per running request before every decode step and ``observe`` with that request's
``StepStats`` after it. Implementations live in ``policies/`` (online policies) and in the server (live per-workload
configs); the engine only needs this protocol. Calls come from the engine's single stepping thread, so an
implementation needs no locking unless something else mutates it concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.config import SpecConfig
from engine.stats import StepStats


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """What a policy may look at when choosing the config of one request's next step."""

    request_id: str
    workload: str
    batch_size: int
    context_len: int
    prompt_len: int
    output_len: int
    request_step: int  # decode steps this request has taken so far
    requested: SpecConfig  # the config the request was submitted with
    last: StepStats | None  # this request's previous step, if any
    # The longest context in the batch: every row's forward spans the padded cache, so a step costs what the longest
    # context costs. None (a lone request, or a caller that does not know) means ``context_len``.
    batch_context_len: int | None = None
    # ``engine.drafters.ngram.suffix_match_len`` of the tokens so far (prompt + output): how long a run of the text's
    # end already occurred earlier. Long runs predict well-accepted drafts (copying), 0 a token never seen before.
    # Computed only for a policy that reads it (``reads_suffix_match``); 0 otherwise.
    suffix_match: int = 0
    max_new_tokens: int | None = None  # the request's token limit: its output ends there at the latest

    @property
    def step_context_len(self) -> int:
        """The context length a step of this batch is priced at."""
        return self.context_len if self.batch_context_len is None else max(self.batch_context_len, self.context_len)


@runtime_checkable
class SpecPolicy(Protocol):
    """Consulted every step: ``decide`` for each request of the step in batch order, then the step runs, then
    ``observe`` for each of them. A policy may rely on that order (goodput lets a request propose for free up to the
    width that requests deciding earlier in the same step have already made it span)."""

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        """Config for this request's next step. Must be fast (tens of microseconds) and must not block."""
        ...

    def observe(self, stats: StepStats) -> None:
        """Fold in what the step decided above actually did."""
        ...


def reads_suffix_match(policy: SpecPolicy) -> bool:
    """Whether ``policy`` looks at ``DecisionContext.suffix_match`` (it says so with a true ``reads_suffix_match``
    attribute). Callers compute the value only then: it scans the request's tokens every step."""
    return bool(getattr(policy, "reads_suffix_match", False))


class RequestedConfig:
    """The default policy: every request keeps the config it was submitted with."""

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return ctx.requested

    def observe(self, stats: StepStats) -> None:
        return None
