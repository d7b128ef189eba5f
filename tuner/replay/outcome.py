"""What one decode step of one recorded request does under a given config, exactly as the engine would do it.

Greedy verification makes the emitted text independent of the config, so a step only has to find how many draft
tokens would be accepted at output position ``p``:

- draft model, chain: the draft's token at depth d is its argmax given the true prefix (all earlier depths were
  accepted), so depth d is accepted iff ``draft_rank[p + d - 1] == 0``;
- draft model, static tree with ``b_d`` children per node at depth d: iff ``draft_rank[p + d - 1] < b_d``;
- n-gram: the engine's own lookup (``engine.drafters.ngram``) is rerun on the true tokens so far and its tree walked
  along the true tokens.

Engine rules reproduced: depth = min(k, remaining - 1) with remaining = max_new_tokens - p (no draft when 1 is
left); the walk stops right after an accepted stop token and then no bonus token is emitted; a step that proposes
nothing reports method ``off``. Dynamic draft-model trees (``top_k`` + ``budget``) keep nodes by off-path
probabilities that traces do not hold, so they are refused rather than estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.config import NgramMatch, SpecConfig
from engine.drafters.ngram import max_candidates_for, ngram_candidates, ngram_tree, suffix_match_len
from tuner.traces import Trace

MAX_DEPTH = 32  # SpecConfig's largest k


class ReplayError(ValueError):
    """A config or trace the replay cannot score exactly; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Outcome:
    method: str  # method in force ("off" when nothing was proposed)
    depth: int  # depth of the proposed tree
    nodes: int  # draft nodes proposed
    accepted: int
    emitted: int
    asked: int = 0  # depth the drafter was asked for (k capped by the tokens left); 0 = no drafter ran


NOTHING = Outcome("off", 0, 0, 0, 1)


class ReplayTrace:
    """A trace prepared for stepping: token arrays and, per position, the run of draft argmax hits starting there."""

    __slots__ = ("trace", "prompt_len", "output", "length", "tokens", "rank", "hits_from", "stop_ids", "_lookups",
                 "_suffix_matches")

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.prompt_len = len(trace.prompt_ids)
        self.output = list(trace.output_ids)
        self.length = len(self.output)
        self.tokens = np.asarray(trace.prompt_ids + trace.output_ids, dtype=np.int64)
        self.stop_ids = trace.stop_ids
        self.rank = list(trace.draft_rank) if trace.draft_rank is not None else None
        self.hits_from: list[int] | None = None
        if self.rank is not None:
            hits, run = [0] * self.length, 0
            for j in range(self.length - 1, -1, -1):
                run = run + 1 if self.rank[j] == 0 else 0
                hits[j] = run
            self.hits_from = hits
        self._lookups: dict[tuple[int, int, int], list[list[int]]] = {}
        self._suffix_matches: dict[int, int] = {}

    def renamed(self, request_id: str, workload: str | None = None) -> ReplayTrace:
        """This request again under another id (and workload): a copy that behaves exactly as recorded and shares
        the prepared arrays and the lookups done so far, so repeating a request costs nothing to prepare."""
        update = {"request_id": request_id} | ({"workload": workload} if workload is not None else {})
        copy = object.__new__(ReplayTrace)
        for slot in self.__slots__:
            setattr(copy, slot, getattr(self, slot))
        copy.trace = self.trace.model_copy(update=update)
        return copy

    def suffix_match(self, p: int) -> int:
        """``suffix_match_len`` of the tokens before output position ``p``, as the engine computes it there."""
        found = self._suffix_matches.get(p)
        if found is None:
            found = self._suffix_matches[p] = suffix_match_len(self.tokens[: self.prompt_len + p])
        return found

    def step(self, p: int, config: SpecConfig) -> Outcome:
        """The outcome of a step at output position ``p`` (tokens emitted so far) under ``config``."""
        remaining = self.trace.max_new_tokens - p
        depth = min(config.k, remaining - 1) if config.speculative else 0
        if depth <= 0:
            return NOTHING
        if config.method == "draft":
            return self._draft_step(p, config, depth)
        return self._ngram_step(p, config, depth)

    def _draft_step(self, p: int, config: SpecConfig, depth: int) -> Outcome:
        trace = self.trace
        if self.rank is None or self.hits_from is None:
            raise ReplayError(f"workload {trace.workload!r} request {trace.request_id!r}: the config uses "
                              f"method=draft but the trace has no draft ranks (recorded without a draft model)")
        tree = config.tree
        if tree.top_k is not None:
            raise ReplayError(f"config {config.label()!r}: dynamic draft trees (top_k + budget) depend on draft "
                              f"probabilities off the true path, which traces do not hold; replay cannot score them")
        if tree.is_chain:
            accepted = min(self.hits_from[p], depth)
            nodes = depth
        else:
            widest = max(tree.branching_at(d) for d in range(1, depth + 1))
            if widest > trace.rank_cap:
                raise ReplayError(f"config {config.label()!r}: branching {widest} exceeds the trace's rank_cap "
                                  f"{trace.rank_cap} (request {trace.request_id!r}); record with a larger rank cap")
            accepted = 0
            while accepted < depth and p + accepted < self.length \
                    and self.rank[p + accepted] < tree.branching_at(accepted + 1):
                accepted += 1
            nodes = tree.max_nodes(depth)
        return Outcome("draft", depth, nodes, accepted, self._emitted(p, accepted), depth)

    def _ngram_step(self, p: int, config: SpecConfig, depth: int) -> Outcome:
        context = self.tokens[: self.prompt_len + p]
        wanted = max_candidates_for(config.tree)
        if wanted == 1:
            candidates = self._longest_chain(p, config.min_n, config.max_n, config.ngram_match)
            candidates = [candidates[0][:depth]] if candidates else []
        else:
            candidates = ngram_candidates(context, depth, config.min_n, config.max_n, wanted, config.ngram_match)
        tree = ngram_tree(candidates, config.tree, depth)
        if not len(tree):
            return Outcome("off", 0, 0, 0, 1, depth)
        path = tree.walk(self.output[p: p + depth])
        return Outcome("ngram", tree.depth, len(tree), len(path), self._emitted(p, len(path)), depth)

    def _longest_chain(self, p: int, min_n: int, max_n: int, match: NgramMatch) -> list[list[int]]:
        """The single-candidate lookup at the largest depth. With one candidate the lookup picks the same match
        whatever the depth (a continuation is non-empty for every depth or for none), so depth d's proposal is this
        one's first d tokens; lookups dominate replay time, so each is done once per trace."""
        key = (p, min_n, max_n, match)
        found = self._lookups.get(key)
        if found is None:
            found = ngram_candidates(self.tokens[: self.prompt_len + p], MAX_DEPTH, min_n, max_n, 1, match)
            self._lookups[key] = found
        return found

    def _emitted(self, p: int, accepted: int) -> int:
        # A trace holds no stop token before its end, so the walk can only accept one as the last output token.
        if accepted and self.output[p + accepted - 1] in self.stop_ids:
            return accepted
        return accepted + 1
