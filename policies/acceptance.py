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

from engine.config import TreeShape

MAX_DEPTH = 32


class AcceptanceTable:
    __slots__ = ("prior", "decay", "widths", "depth", "alpha", "seen", "fill", "fill_seen", "_effective", "_by_depth",
                 "_deepest")

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
        # What ``conditional`` and ``accepted_by_depth`` read, per method, rebuilt lazily after that method's updates
        # (a policy prices every candidate after each step, so most lookups hit).
        self._effective: dict[str, dict[int, list[float]]] = {}
        self._by_depth: dict[str, dict[tuple[tuple[int, ...] | None, int], list[float]]] = {}
        self._deepest = dict.fromkeys(methods, 0)  # deepest depth observed per method

    def conditional(self, method: str, width: int, depth: int) -> float:
        """alpha at ``depth`` (1-based) for nodes with ``width`` children."""
        return self._effective_for(method, width)[depth - 1]

    def accepted_by_depth(self, method: str, tree: TreeShape, k: int) -> list[float]:
        """E[a] for every depth 0..k (a shared list: do not modify it)."""
        cached = self._by_depth.setdefault(method, {})
        key = (None if tree.is_chain else tree.branching, k)
        out = cached.get(key)
        if out is None:
            out = cached[key] = self._accepted_by_depth(method, tree, k)
        return out

    def _accepted_by_depth(self, method: str, tree: TreeShape, k: int) -> list[float]:
        out, accepted, run = [0.0], 0.0, 1.0
        chain = self._effective_for(method, 1) if tree.is_chain else None
        for depth in range(1, k + 1):
            run *= chain[depth - 1] if chain is not None else self.conditional(method, tree.branching_at(depth), depth)
            accepted += run
            out.append(accepted)
        return out

    def _effective_for(self, method: str, width: int) -> list[float]:
        cached = self._effective.setdefault(method, {})
        effective = cached.get(width)
        if effective is None:
            effective = [0.0] * self.depth
            for w in self.widths:
                if w > width:
                    break
                alpha, seen = self.alpha[(method, w)], self.seen[(method, w)]
                value = self.prior  # depths never observed borrow the deepest observed one above them
                for d in range(self.depth):
                    if seen[d]:
                        value = alpha[d]
                    if value > effective[d]:
                        effective[d] = value
            cached[width] = effective
        return effective

    def observed_depth(self, method: str) -> int:
        """The deepest depth observed for ``method`` at any width (0 if none)."""
        return self._deepest.get(method, 0)

    def observe_walk(self, method: str, tree: TreeShape, accepted: int, window: int, stopped: bool) -> None:
        """One step: depths 1..accepted were accepted and, unless the walk ended at a stop token or at the end of
        the ``window`` it was allowed, depth accepted + 1 was a miss."""
        accepted = min(max(accepted, 0), MAX_DEPTH)
        missed = accepted < min(window, MAX_DEPTH) and not stopped
        if tree.is_chain and (method, 1) in self.alpha:  # the common case, without a call per depth
            seen, alpha, decay = self.seen[(method, 1)], self.alpha[(method, 1)], self.decay
            for d in range(accepted + missed):
                weight = 1.0 / (seen[d] + 2)
                alpha[d] += (weight if weight > decay else decay) * ((d < accepted) - alpha[d])
                seen[d] += 1
            if accepted + missed:
                self._touched(method, accepted + missed)
            return
        for depth in range(1, accepted + 1):
            self.update(method, tree.branching_at(depth), depth, 1.0)
        if missed:
            self.update(method, tree.branching_at(accepted + 1), accepted + 1, 0.0)

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
        self.fill += self._weight(self.fill_seen) * (min(max(fill, 0.0), 1.0) - self.fill)
        self.fill_seen += 1

    def _weight(self, seen: int) -> float:
        return max(self.decay, 1.0 / (seen + 2))

    def estimates(self, method: str, width: int = 1) -> list[float]:
        """The conditional acceptance now assumed at depths 1..``depth``."""
        return list(self._effective_for(method, width))
