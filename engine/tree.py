"""A draft tree below the root (the last emitted token). Pure Python so replay can use it without torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DraftTree:
    """Nodes in topological order: ``parents[i]`` is an earlier node or -1 for a child of the root.

    ``probs[i]`` is the distribution node i was *sampled* from (a draft-model chain under sampling); None means the node
    was chosen deterministically (argmax, top-b children, n-gram), i.e. a one-hot proposal.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, prob: Any = None) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        if prob is not None:
            if self.probs is None:
                self.probs = [None] * (len(self.tokens) - 1)
            self.probs.append(prob)
        elif self.probs is not None:
            self.probs.append(None)
        return len(self.tokens) - 1

    def children(self) -> dict[int, list[int]]:
        """Children of every node, keyed by node index (-1 = root), in insertion order."""
        out: dict[int, list[int]] = {-1: []}
        for i, parent in enumerate(self.parents):
            out.setdefault(parent, []).append(i)
            out.setdefault(i, [])
        return out

    def depths(self) -> list[int]:
        """Depth of every node (children of the root have depth 1)."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent < 0 else out[parent] + 1)
        return out

    @property
    def depth(self) -> int:
        return max(self.depths(), default=0)

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to ``node``."""
        out = []
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def walk(self, true_tokens: list[int]) -> list[int]:
        """The nodes a greedy verifier accepts when the target emits ``true_tokens`` (used by replay and tests)."""
        kids = self.children()
        node, accepted = -1, []
        for token in true_tokens:
            nxt = next((c for c in kids[node] if self.tokens[c] == token), None)
            if nxt is None:
                break
            accepted.append(nxt)
            node = nxt
        return accepted
