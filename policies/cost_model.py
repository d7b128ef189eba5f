"""Measured forward-time model of one engine: what a verify forward and a draft pass cost.

Each forward is a table of measured seconds on a rectilinear grid of (batch size, tokens per request, context length),
read by *piecewise-linear* (trilinear) interpolation: find the grid cell around the point on each axis and blend its 8
corners linearly. Outside the measured range the edge segment of each axis is extended linearly (an axis with one point
is constant), and the result never drops below the smallest measured time, so a query is always positive and finite.
That is all the "fitting" there is: the model goes exactly through every measured point and assumes nothing between
them beyond linearity, which is what forward times on a fixed kernel set look like once the grid is dense enough.

The LM head is timed apart (``target_head``, ``draft_head``: seconds by rows of hidden states, read the same way): the
engine computes logits only where it needs them, at every proposed node of a verify but not at the padding of a row
shorter than the batch's widest, and in a draft pass at the nodes it expands next (in the rows that draft, to each
row's own depth) but not at the tokens a catch-up feeds. On Qwen2.5-Coder-1.5B (bf16,
benchmarks/results/policies_cost_model.json) the head over one row takes 10.6 ms beside a 47 ms one-token forward, and
184 ms over 256 rows; the 0.5B draft's, 4.2 and 135 ms. Priced inside the forwards, a verify at batch 4 whose lookups
mostly came up short was dearer than the live engine ran it (live code-edit at n-gram k=8 made 1.11x the replay's
tokens/s; 1.02x with the head apart), and a draft model filling a 300-token prompt came out about half again dearer
than it is. A model without them (``target_head`` None: files calibrated before heads were timed apart) prices the head
inside ``target`` and ``draft``, over every token fed.

An engine step also costs time outside the forwards (choosing configs, building the tree mask, accepting, emitting,
statistics): ``step_overhead_s`` holds it per batch size of the target grid, measured on the engine itself, and every
step pays it whatever it speculates (linear between batch sizes, constant beyond).

The model is stored as JSON together with the identity of the engine it was measured on (target, draft, dtype,
device); a replay refuses to score traces from another target with it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.config import TreeShape

COST_MODEL_VERSION = 1
MONOTONE_SWEEPS = 4


class EngineIdentity(BaseModel):
    """Which engine a cost model describes; names as ``engine.models.identity`` gives them (model identity,
    ``hardware_fingerprint()`` for the device), and a trace's target, draft and dtype must match."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str
    draft: str | None = None
    dtype: str
    device: str = "cpu"


def isotonic(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit of a sequence (pool adjacent violators, equal weights)."""
    sums: list[float] = []
    counts: list[int] = []
    for v in values:
        sums.append(float(v))
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] > sums[-1] / counts[-1]:
            total, count = sums.pop(), counts.pop()
            sums[-1] += total
            counts[-1] += count
    return np.repeat(np.array(sums) / np.array(counts), counts)


def _segment(axis: tuple[float, ...], x: float) -> tuple[int, int, float]:
    """Indices ``i, j`` and weight ``w`` with ``x = (1 - w) * axis[i] + w * axis[j]``; ``w`` outside [0, 1]
    extrapolates from the edge segment.

    >>> _segment((1.0, 2.0, 4.0), 3.0)
    (1, 2, 0.5)
    """
    if len(axis) == 1:
        return 0, 0, 0.0
    i = min(max(bisect_right(axis, x) - 1, 0), len(axis) - 2)
    return i, i + 1, (x - axis[i]) / (axis[i + 1] - axis[i])


class ForwardGrid(BaseModel):
    """Measured seconds of one model's forward; ``seconds[b][t][c]`` at ``batch_sizes[b]``, ``tokens[t]`` new tokens
    per request and ``context_lens[c]`` tokens already in each request's KV cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_sizes: tuple[float, ...] = Field(min_length=1)
    tokens: tuple[float, ...] = Field(min_length=1)
    context_lens: tuple[float, ...] = Field(min_length=1)
    seconds: tuple[tuple[tuple[float, ...], ...], ...]

    @model_validator(mode="after")
    def _check(self) -> ForwardGrid:
        for name in ("batch_sizes", "tokens", "context_lens"):
            axis = getattr(self, name)
            if any(b <= a for a, b in zip(axis, axis[1:], strict=False)):
                raise ValueError(f"{name}: grid points must be strictly increasing, got {list(axis)}")
            if axis[0] < 0:
                raise ValueError(f"{name}: grid points must not be negative")
        shape = (len(self.batch_sizes), len(self.tokens), len(self.context_lens))
        if len(self.seconds) != shape[0] or any(len(row) != shape[1] for row in self.seconds) or any(
            len(col) != shape[2] for row in self.seconds for col in row
        ):
            raise ValueError(f"seconds: expected shape {shape} (batch_sizes x tokens x context_lens)")
        if any(s <= 0 for row in self.seconds for col in row for s in col):
            raise ValueError("seconds: every measured time must be positive")
        return self

    def monotone(self, axes: tuple[int, ...] = (0, 1, 2)) -> ForwardGrid:
        """The grid fitted to be non-decreasing along ``axes`` (0 batch, 1 tokens, 2 context; by default every axis:
        more rows, tokens or context never cost less).

        Isotonic regression (pool adjacent violators) along one axis at a time, for a few sweeps, moves each noisy
        point as little as the ordering allows; a running maximum along each axis then guarantees the order (it
        keeps the other axes' order, being a maximum of ordered lines)."""
        values = np.array(self.seconds, dtype=float)
        for _ in range(MONOTONE_SWEEPS):
            for axis in axes:
                values = np.apply_along_axis(isotonic, axis, values)
        for axis in axes:
            values = np.maximum.accumulate(values, axis=axis)
        return self.model_copy(update={"seconds": tuple(tuple(tuple(float(x) for x in col) for col in row)
                                                        for row in values)})

    @cached_property
    def floor(self) -> float:
        """The smallest measured time: no query answers less."""
        return min(s for row in self.seconds for col in row for s in col)

    def __call__(self, batch_size: float, tokens: float, context_len: float) -> float:
        """Interpolated seconds of one forward at this point (see the module docstring)."""
        b0, b1, wb = _segment(self.batch_sizes, batch_size)
        t0, t1, wt = _segment(self.tokens, tokens)
        c0, c1, wc = _segment(self.context_lens, context_len)
        s = self.seconds
        total = 0.0
        for bi, bw in ((b0, 1.0 - wb), (b1, wb)):
            if bw == 0.0:
                continue
            row = s[bi]
            for ti, tw in ((t0, 1.0 - wt), (t1, wt)):
                if tw == 0.0:
                    continue
                col = row[ti]
                total += bw * tw * ((1.0 - wc) * col[c0] + wc * col[c1])
        return max(total, self.floor)


class CostModel(BaseModel):
    """Forward times of one engine: the target's verify forward, the draft model's forward and the n-gram lookup."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = COST_MODEL_VERSION
    engine: EngineIdentity
    target: ForwardGrid
    draft: ForwardGrid | None = None
    # the LM head (logits and argmax) over ``tokens`` rows, at batch size 1 and context 0: ``tokens`` is the only axis
    target_head: ForwardGrid | None = None
    draft_head: ForwardGrid | None = None
    ngram_s: float = Field(default=0.0, ge=0.0, description="n-gram lookup seconds per request per step")
    step_overhead_s: tuple[float, ...] = Field(default=(), description=(
        "engine seconds per step outside the forwards, at each of target.batch_sizes (empty: none measured)"))

    @model_validator(mode="after")
    def _check_version(self) -> CostModel:
        if self.version != COST_MODEL_VERSION:
            raise ValueError(f"version: cost model version {self.version} is not supported (expected "
                             f"{COST_MODEL_VERSION})")
        if self.step_overhead_s and len(self.step_overhead_s) != len(self.target.batch_sizes):
            raise ValueError(f"step_overhead_s: expected one value per target batch size "
                             f"({len(self.target.batch_sizes)}), got {len(self.step_overhead_s)}")
        if any(s < 0 for s in self.step_overhead_s):
            raise ValueError("step_overhead_s: must not be negative")
        return self

    def overhead_s(self, batch_size: float) -> float:
        """Seconds an engine step at ``batch_size`` spends outside its forwards."""
        if not self.step_overhead_s:
            return 0.0
        return float(np.interp(batch_size, self.target.batch_sizes, self.step_overhead_s))

    def verify_s(self, batch_size: int, total_tokens: float, context_len: float, logits: float | None = None) -> float:
        """Seconds of one target forward over ``total_tokens`` new tokens spread across ``batch_size`` requests (the
        batch padded to its widest row), with the LM head over ``logits`` of them (all of them if None: the real
        nodes, the padding of shorter rows aside)."""
        forward = self.target(batch_size, total_tokens / batch_size, context_len)
        if self.target_head is None:
            return forward
        return forward + self.target_head(1, total_tokens if logits is None else logits, 0)

    def draft_s(self, batch_size: int, k: int, context_len: float, method: str, tree: TreeShape | None = None,
                catch_up: int = 1, depths: Sequence[int] | None = None) -> float:
        """Seconds to propose depth-``k`` drafts for ``batch_size`` requests with ``method``.

        ``draft``: one draft forward per depth over every row of the batch; forward ``d`` feeds each request the
        nodes of depth ``d - 1``, and the first feeds the tokens the draft's cache has not seen yet, ``catch_up`` at
        most per request (1, the root, for a request that drafted last step; more after steps with another method),
        so a chain costs ``k`` one-token forwards when every request drafted last step. The head of forward ``d``
        computes logits only for the rows that draft to depth ``d`` or deeper: ``depths`` lists each drafting row's
        depth (None: every row, to ``k``). ``ngram``: a measured constant per request. ``off``: 0.
        """
        return self.draft_s_by_depth(batch_size, k, context_len, method, tree, catch_up, depths)[-1] if k > 0 else 0.0

    def draft_s_by_depth(self, batch_size: int, k: int, context_len: float, method: str,
                         tree: TreeShape | None = None, catch_up: int = 1,
                         depths: Sequence[int] | None = None) -> list[float]:
        """``draft_s`` for every depth 0..k at once (what a policy comparing depths needs): entry ``d`` prices a pass
        of depth ``d`` in which the rows of ``depths`` draft as deep as it goes or as they ask, whichever is less."""
        if method == "off" or k <= 0 or batch_size <= 0:
            return [0.0] * (max(k, 0) + 1)
        if method == "ngram":
            return [0.0] + [self.ngram_s * batch_size] * k
        if method != "draft":
            raise ValueError(f"method: unknown speculation method {method!r}")
        if self.draft is None:
            raise ValueError("cost model has no draft-model grid (calibrate with --draft to price method=draft)")
        shape = tree or TreeShape()
        head = self.draft_head
        depths = (k,) * batch_size if depths is None else depths
        out, total, nodes = [0.0], 0.0, 1  # nodes: the tree's nodes at the depth fed next
        for depth in range(1, k + 1):
            total += self.draft(batch_size, max(catch_up, 1) if depth == 1 else nodes, context_len)
            rows = sum(1 for d in depths if d >= depth)
            if head is not None and rows:
                total += head(1, rows * nodes, 0)
            out.append(total)
            nodes *= shape.branching_at(depth)
        return out

    def catch_up_alone_s(self, missing: int, context_len: float) -> float:
        """Seconds of the draft forward that feeds one request, on its own, the ``missing - 1`` tokens before the
        root that its draft cache lacks (``engine.drafters.catch_up``); its root then joins the batch's pass. It
        computes no logits."""
        if self.draft is None:
            raise ValueError("cost model has no draft-model grid (calibrate with --draft to price method=draft)")
        return self.draft(1, missing - 1, context_len)

    @classmethod
    def from_json(cls, text: str | bytes) -> CostModel:
        return cls.model_validate_json(text)

    def to_json(self) -> str:
        return self.model_dump_json(indent=1)


def uniform_grid(batch_sizes: Sequence[float], tokens: Sequence[float], context_lens: Sequence[float],
                 seconds_at: Callable[[float, float, float], float]) -> ForwardGrid:
    """A grid filled by ``seconds_at(batch, tokens, context)``: how calibration and tests build one."""
    return ForwardGrid(
        batch_sizes=tuple(batch_sizes), tokens=tuple(tokens), context_lens=tuple(context_lens),
        seconds=tuple(tuple(tuple(float(seconds_at(b, t, c)) for c in context_lens) for t in tokens)
                      for b in batch_sizes),
    )
