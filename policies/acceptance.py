"""Online estimate of how many draft tokens a config gets accepted, from the steps observed so far.

For each method and branching width the table keeps an EWMA of the *conditional* acceptance alpha(d) at every depth:
the chance that the draft token at depth d is accepted given that depths 1..d-1 were. A static tree with b children
per node accepts at depth d whenever the true token is among the draft's top b_d, so widths are tracked apart, and a
wider node is credited with at least what a narrower one achieves. A config of depth k then accepts

    E[a] = sum_{d<=k} prod_{j<=d} alpha(j, b_j)

tokens per step. Depths never observed borrow the deepest observed estimate above them (acceptance changes slowly with
depth), so a workload running k=2 still prices k=8 from what it has seen. The EWMA starts as a running mean with the
prior counting as one observation, then settles at weight ``decay`` so the estimate follows phase changes.
"""

from __future__ import annotations

from itertools import accumulate
from operator import mul

from engine.config import TreeShape

MAX_DEPTH = 32


class AcceptanceTable:
    __slots__ = ("prior", "decay", "widths", "depth", "alpha", "seen", "fill", "fill_seen", "_chains", "_effective",
                 "_by_depth", "_deepest")

    def __init__(self, methods: tuple[str, ...], widths: list[int], prior: float, decay: float,
                 depth: int = MAX_DEPTH) -> None:
        self.depth = depth  # deepest depth priced; observations reach MAX_DEPTH
        self.prior = prior
        self.decay = decay
        self.widths = sorted(widths)
        self.alpha = {(m, w): [prior] * MAX_DEPTH for m in methods for w in self.widths}
        self.seen = {(m, w): [0] * MAX_DEPTH for m in methods for w in self.widths}
        self.fill = 1.0  # n-gram: share of the asked depth the lookup actually proposed
        self.fill_seen = 0
        self._chains = {m: (self.alpha[(m, 1)], self.seen[(m, 1)]) for m in methods if 1 in self.widths}
        # What ``conditional`` and ``accepted_by_depth`` read, per method, rebuilt lazily after that method's updates
        # (a policy prices every candidate after each step, so most lookups hit).
        self._effective: dict[str, dict[int, list[float]]] = {}
        self._by_depth: dict[str, dict[tuple[tuple[int, ...] | None, int], list[float]]] = {}
        self._deepest = dict.fromkeys(methods, 0)  # deepest depth observed per method

    def conditional(self, method: str, width: int, depth: int) -> float:
        """alpha at ``depth`` (1-based) for nodes with ``width`` children."""
        return self._effective_for(method, width)[depth - 1]

    def accepted_by_depth(self, method: str, tree: TreeShape, k: int, cache: bool = True) -> list[float]:
        """E[a] for every depth 0..k (with ``cache``, a shared list: do not modify it; without, computed afresh,
        for a read that will not recur before the next update)."""
        if not cache:
            return self._accepted_by_depth(method, tree, k)
        cached = self._by_depth.setdefault(method, {})
        key = (None if tree.is_chain else tree.branching, k)
        out = cached.get(key)
        if out is None:
            out = cached[key] = self._accepted_by_depth(method, tree, k)
        return out

    def _accepted_by_depth(self, method: str, tree: TreeShape, k: int) -> list[float]:
        branched = () if tree.is_chain else (tree.branching or ())[:k]  # depths past the branching are chained
        alphas = [self._effective_for(method, width)[d] for d, width in enumerate(branched)]
        alphas += self._effective_for(method, 1)[len(branched):k]
        return list(accumulate(accumulate(alphas, mul), initial=0.0))

    def _effective_for(self, method: str, width: int) -> list[float]:
        cached = self._effective.setdefault(method, {})
        effective = cached.get(width)
        if effective is None:
            for w in self.widths:
                if w > width:
                    break
                borrowed = self._borrowed(self.alpha[(method, w)], self.seen[(method, w)])
                # a wider node is credited with at least what a narrower one achieves
                effective = borrowed if effective is None else list(map(max, effective, borrowed))
            cached[width] = effective = effective or [0.0] * self.depth
        return effective

    def _borrowed(self, alpha: list[float], seen: list[int]) -> list[float]:
        """``alpha`` at depths 1..``depth``, a depth never observed borrowing the deepest observed one above it
        (the prior above the first observed)."""
        depth = self.depth
        try:
            observed = seen.index(0, 0, depth)
        except ValueError:
            return alpha[:depth]
        if not any(seen[observed:depth]):  # the usual case: observed depths 1..observed (a walk passes each one)
            return alpha[:observed] + [alpha[observed - 1] if observed else self.prior] * (depth - observed)
        out, value = [], self.prior
        for d in range(depth):
            if seen[d]:
                value = alpha[d]
            out.append(value)
        return out

    def walks(self, method: str) -> int:
        """Steps observed for ``method`` (each one observes depth 1, at some width)."""
        return sum(self.seen[(method, w)][0] for w in self.widths)

    def observed_depth(self, method: str) -> int:
        """The deepest depth observed for ``method`` at any width (0 if none)."""
        return self._deepest.get(method, 0)

    def observe_walk(self, method: str, tree: TreeShape, accepted: int, window: int, stopped: bool) -> None:
        """One step: depths 1..accepted were accepted and, unless the walk ended at a stop token or at the end of
        the ``window`` it was allowed, depth accepted + 1 was a miss."""
        accepted = min(max(accepted, 0), MAX_DEPTH)
        walked = accepted + (accepted < min(window, MAX_DEPTH) and not stopped)
        chain = self._chains.get(method) if tree.is_chain else None
        if chain is not None:  # the common case, without a call per depth
            alpha, seen = chain
            decay = self.decay
            for d in range(walked):
                weight = 1.0 / (seen[d] + 2)
                alpha[d] += (weight if weight > decay else decay) * ((d < accepted) - alpha[d])
                seen[d] += 1
            if walked:
                self._touched(method, walked)
            return
        for depth in range(1, accepted + 1):
            self.update(method, tree.branching_at(depth), depth, 1.0)
        if walked > accepted:
            self.update(method, tree.branching_at(walked), walked, 0.0)

    def update(self, method: str, width: int, depth: int, hit: float) -> None:
        key = (method, width)
        if key not in self.alpha or not 1 <= depth <= MAX_DEPTH:
            return
        seen, alpha = self.seen[key], self.alpha[key]
        alpha[depth - 1] += self._weight(seen[depth - 1]) * (hit - alpha[depth - 1])
        seen[depth - 1] += 1
        self._touched(method, depth)

    def _touched(self, method: str, depth: int) -> None:
        if depth > self._deepest[method]:
            self._deepest[method] = depth
        self._effective.pop(method, None)
        self._by_depth.pop(method, None)

    def observe_fill(self, fill: float) -> None:
        weight = 1.0 / (self.fill_seen + 2)
        self.fill += (weight if weight > self.decay else self.decay) * (min(max(fill, 0.0), 1.0) - self.fill)
        self.fill_seen += 1

    def _weight(self, seen: int) -> float:
        return max(self.decay, 1.0 / (seen + 2))

    def estimates(self, method: str, width: int = 1) -> list[float]:
        """The conditional acceptance now assumed at depths 1..``depth``."""
        return list(self._effective_for(method, width))
