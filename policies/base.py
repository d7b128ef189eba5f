"""The interface every online policy implements, and the option types their SPEC strings share.

A policy is an ``engine.policy.SpecPolicy``: the engine (and the replay simulator, with exactly the same calls and
types) calls ``decide`` once per running request before each decode step, then ``observe`` with each request's
``StepStats`` after it. Contract for implementations:

- Calls come from one thread; no locking. ``decide`` must not block and should take tens of microseconds.
- Pure: no I/O, no clocks, no unseeded randomness. Two fresh instances fed the same calls make the same decisions, which
  is what lets a replay reproduce a live run. Calling ``decide`` twice with the same context without an ``observe``
  between returns the same config.
- ``observe`` accepts any well-formed ``StepStats`` (unknown request ids, k = 0, zero times, a config the policy did not
  choose, e.g. one held by a wrapper) and never raises.
- State kept per request is bounded (oldest entries dropped), since policies never hear that a request finished.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict

from engine.config import Method, SpecConfig, TreeShape
from engine.policy import DecisionContext
from engine.stats import StepStats

MAX_TRACKED_REQUESTS = 65536


def remember(table: dict[Any, Any], key: Any, value: Any, limit: int = MAX_TRACKED_REQUESTS) -> None:
    """``table[key] = value``, dropping the oldest entry once ``limit`` keys are held."""
    table[key] = value
    if len(table) > limit:
        del table[next(iter(table))]


def _split_plus(value: Any) -> Any:
    """``"1+2+4"`` -> ``["1", "2", "4"]``: lists inside a SPEC string use ``+`` (``,`` separates keys)."""
    if isinstance(value, str):
        return [part for part in value.split("+") if part]
    return value


def _parse_trees(value: Any) -> Any:
    return [TreeShape.parse(v) if isinstance(v, str) else v for v in _split_plus(value)]


def _parse_tree(value: Any) -> Any:
    return TreeShape.parse(value) if isinstance(value, str) else value


IntList = Annotated[tuple[int, ...], BeforeValidator(_split_plus)]
MethodList = Annotated[tuple[Method, ...], BeforeValidator(_split_plus)]
TreeList = Annotated[tuple[TreeShape, ...], BeforeValidator(_parse_trees)]
Tree = Annotated[TreeShape, BeforeValidator(_parse_tree)]
"""A tree in a SPEC string: ``chain`` or branching per depth joined by ``x`` (``2x2x1``)."""


class PolicyOptions(BaseModel):
    """Keys a policy accepts in its SPEC string; values arrive as strings and are validated here."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Policy(ABC):
    """Base class of the shipped policies: ``choose`` picks a config, ``decide`` applies its batch-size cap."""

    name: ClassVar[str]
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    needs_cost_model: ClassVar[bool] = False

    @property
    def reads_suffix_match(self) -> bool:
        """Whether ``choose`` looks at ``DecisionContext.suffix_match`` (see ``engine.policy.reads_suffix_match``)."""
        return False

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        return self.choose(ctx).at_batch_size(ctx.batch_size)

    @abstractmethod
    def choose(self, ctx: DecisionContext) -> SpecConfig:
        """The config for this request's next step, before ``max_batch_size`` is applied."""

    def observe(self, stats: StepStats) -> None:
        return None

    def overridden(self, request_id: str, config: SpecConfig) -> None:
        """A wrapper will run ``config`` for this request's next step instead of what ``decide`` returned, so the
        coming ``observe`` is not the outcome of this policy's choice. Policies that learn from their choices
        re-attribute; the default ignores it."""
        return None


def batch_bucket(batch_size: int) -> int:
    """Smallest power of two >= ``batch_size`` (1, 2, 4, 8, ...): batch sizes that behave alike share statistics."""
    return 1 << max(batch_size - 1, 0).bit_length()
