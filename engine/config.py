"""The speculation config: what to draft, how much, and in which shape.

Shared by the engine, the policies, the tuner and storage (as validated JSON). Every field carries its bounds, so a bad
value dies at the edge with a message naming the field.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TREE_NODES = 256

Method = Literal["off", "draft", "ngram"]
NgramMatch = Literal["recent", "first"]


class TreeShape(BaseModel):
    """Shape of the draft tree below the last emitted token.

    - chain (default): one draft token per depth;
    - ``branching=(b1, b2, ...)``: every node at depth d gets the top ``b_d`` candidates as children (depths past the
      tuple get 1), e.g. ``(2, 2)`` with k=3 drafts 2 + 4 + 4 nodes;
    - ``top_k`` + ``budget``: dynamic tree (EAGLE-2 style): each depth expands the ``top_k`` most probable frontier
      nodes by their ``top_k`` children, then the ``budget`` nodes with the highest path probability are kept.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    branching: tuple[int, ...] | None = Field(default=None, min_length=1, max_length=32)
    top_k: int | None = Field(default=None, ge=1, le=16)
    budget: int | None = Field(default=None, ge=1, le=MAX_TREE_NODES)

    @model_validator(mode="after")
    def _one_kind(self) -> TreeShape:
        if self.branching is not None:
            if self.top_k is not None or self.budget is not None:
                raise ValueError("tree: give either branching or top_k+budget, not both")
            if any(b < 1 or b > 16 for b in self.branching):
                raise ValueError("tree.branching: every entry must be between 1 and 16")
        elif (self.top_k is None) != (self.budget is None):
            raise ValueError("tree: top_k and budget must be given together")
        return self

    @cached_property  # read in every policy decision
    def is_chain(self) -> bool:
        return (self.branching is None or all(b == 1 for b in self.branching)) and self.top_k is None

    def branching_at(self, depth: int) -> int:
        """Children per node at ``depth`` (1-based) for a branching tree or a chain."""
        if self.branching is None or depth > len(self.branching):
            return 1
        return self.branching[depth - 1]

    def max_nodes(self, k: int) -> int:
        """Upper bound on the number of draft nodes for depth ``k``."""
        if self.top_k is not None:
            return min(self.budget or 0, self.top_k * self.top_k * k)
        total, width = 0, 1
        for depth in range(1, k + 1):
            width *= self.branching_at(depth)
            total += width
        return total

    @classmethod
    def parse(cls, spec: str) -> TreeShape:
        """Parse ``chain``, ``2,2,1`` (branching per depth) or ``topk=4,budget=16``."""
        spec = spec.strip().lower()
        if spec in ("", "chain"):
            return cls()
        if "=" in spec:
            fields = dict(part.split("=", 1) for part in spec.split(","))
            unknown = set(fields) - {"topk", "top_k", "budget"}
            if unknown:
                raise ValueError(f"tree: unknown field(s) {sorted(unknown)}; use topk=N,budget=M")
            return cls(top_k=int(fields.get("topk", fields.get("top_k", 0))) or None,
                       budget=int(fields["budget"]) if "budget" in fields else None)
        try:
            return cls(branching=tuple(int(b) for b in spec.replace("x", ",").split(",")))
        except ValueError as exc:
            raise ValueError(f"tree: cannot parse {spec!r}; use chain, 2,2,1 or topk=4,budget=16") from exc

    def __str__(self) -> str:
        if self.top_k is not None:
            return f"topk={self.top_k},budget={self.budget}"
        if self.is_chain:
            return "chain"
        return ",".join(str(b) for b in self.branching or ())


class SpecConfig(BaseModel):
    """One speculation setting. ``method="off"`` decodes one token per step (k and tree are then ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method = "off"
    k: int = Field(default=4, ge=1, le=32, description="speculative tokens per step (depth of the draft tree)")
    tree: TreeShape = Field(default_factory=TreeShape)
    min_n: int = Field(default=1, ge=1, le=16, description="shortest n-gram the lookup matches")
    max_n: int = Field(default=4, ge=1, le=16, description="longest n-gram the lookup tries first")
    ngram_match: NgramMatch = Field(default="recent", description=(
        "which earlier occurrence of the n-gram the lookup continues first: the most recent, or the first (in a "
        "copy-heavy edit the source text in the prompt, as in transformers' prompt lookup)"))
    max_batch_size: int | None = Field(default=None, ge=1, description="speculate only up to this batch size")

    @model_validator(mode="after")
    def _check(self) -> SpecConfig:
        if self.min_n > self.max_n:
            raise ValueError(f"min_n ({self.min_n}) must not exceed max_n ({self.max_n})")
        nodes = self.tree.max_nodes(self.k)
        if nodes > MAX_TREE_NODES:
            raise ValueError(f"tree: {self.tree} with k={self.k} has {nodes} nodes, more than {MAX_TREE_NODES}")
        return self

    @property
    def speculative(self) -> bool:
        return self.method != "off"

    def at_batch_size(self, batch_size: int) -> SpecConfig:
        """The config in force at ``batch_size``: off above ``max_batch_size``."""
        if self.max_batch_size is not None and batch_size > self.max_batch_size and self.speculative:
            return OFF
        return self

    def label(self) -> str:
        """Short human-readable name, e.g. ``draft k=4 chain`` or ``off``."""
        if not self.speculative:
            return "off"
        extra = ""
        if self.method == "ngram":
            extra = f" n={self.min_n}..{self.max_n}" + (" first" if self.ngram_match == "first" else "")
        return f"{self.method} k={self.k} {self.tree}{extra}"


OFF = SpecConfig()
