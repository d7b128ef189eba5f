"""Measure one engine's forward times and fit its cost model (``policies.cost_model.CostModel``).

What is timed is what the engine runs each step, through the same code (``engine.kv.BatchKV``):

- target: a forward of ``tokens`` new chain nodes per row for ``batch`` rows whose caches hold ``context`` tokens and
  the commit that compacts the cache afterwards;
- the target's LM head and argmax over ``rows`` hidden states, apart: the engine computes logits only at real nodes,
  not at a short row's padding;
- draft: the same for the draft model (one forward per drafted depth; its head runs at the nodes expanded next, not at
  the tokens a catch-up feeds);
- n-gram: one ``ngram_candidates`` lookup over a ``context``-token sequence;
- the step overhead: an engine step (``SpecEngine.step``, speculation off) minus the target forward step above at the
  same batch size, in pairs timed back to back (median of the pairs' differences), fitted to be non-decreasing in the
  batch size as the forwards are (a difference of two noisy times is noisier still: the first calibration on the
  bf16 host read 2.1 ms at batch 1 and 0.6 ms at batch 2). It is what the engine spends outside its forwards:
  choosing configs, building the tree mask, accepting, emitting, statistics.

Timings on a shared CPU drift by 10-30% within minutes, and a grid timed point after point (all repeats of one
point, then the next) lets that drift masquerade as cost structure: we measured a 1-token verify dearer than a
4-token one. So the grid is timed in rounds: after ``warmup`` untimed rounds, each of ``repeats`` rounds times every
point once, in a rotated order, and a point's time is the median of its rounds. Forward time never falls when the
batch or the context grow, so the medians are then fitted to the closest grid that is monotone along those axes
(``policies.cost_model.ForwardGrid.monotone``). Along the tokens per row it can fall: in float32 on an AVX2 CPU a
3-token forward took 24% longer than a 4-token one, and 7 tokens 10% longer than 8 (benchmarks/width_cost.py). So
the target's tokens axis holds every width a chain of the goodput policy's depths verifies (1 + k), and the tokens
axes keep their medians as measured: interpolated from 1, 2, 4, 8 and 16 fitted monotone, a 3-token verify was
priced at 0.79x its time. The model is that grid read by piecewise-linear interpolation (see
``policies.cost_model``), stored with the engine identity.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.drafters.ngram import ngram_candidates
from engine.kv import BatchKV, Nodes
from engine.models import hardware_fingerprint, model_identity
from engine.models.loaded import LoadedModel
from policies.cost_model import CostModel, EngineIdentity, ForwardGrid, isotonic, uniform_grid
from policies.goodput import GoodputOptions

# tokens per row of the target's forwards: off's 1, and 1 + k for every depth the goodput policy considers
CHAIN_WIDTHS = tuple(sorted({1, *(1 + k for k in GoodputOptions().ks)}))
FITTED_AXES = (0, 2)  # batch and context: see the module docstring for why not the tokens per row


@dataclass(frozen=True)
class Grid:
    """Which points to time and how often."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    tokens: tuple[int, ...] = CHAIN_WIDTHS
    draft_tokens: tuple[int, ...] = (1, 2, 4, 16)  # 16: catch-ups and prompt fills extend the 4 -> 16 slope
    context_lens: tuple[int, ...] = (128, 512)
    head_rows: tuple[int, ...] = (1, 4, 8, 16, 32, 64, 128, 256)
    warmup: int = 1
    repeats: int = 5
    overhead_pairs: int = 12  # engine step / forward step pairs per batch size


FULL = Grid()
QUICK = Grid(batch_sizes=(1, 2), tokens=(1, 2), draft_tokens=(1,), context_lens=(16, 32), head_rows=(1, 2), warmup=1,
             repeats=1, overhead_pairs=2)
OVERHEAD_CONTEXT = 16  # prompt tokens of the overhead runs: cheap to prefill at batch 16; the overhead barely grows


def _median_s(run: Callable[[], None], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def prefill(loaded: LoadedModel, context: int) -> BatchKV:
    """A one-row cache holding ``context`` committed tokens."""
    kv = BatchKV(loaded.model, decoder=loaded.decoder)
    kv.prefill([[(7 * i + 3) % loaded.vocab_size for i in range(context)]])
    return kv


def forward_step(base: BatchKV, batch: int, tokens: int, head: bool = True) -> Callable[[], None]:
    """One engine forward step (forward, then with ``head`` the LM head and argmax over every node, then the commit)
    for ``batch`` copies of ``base``'s row with ``tokens`` new chain nodes each; the cache keeps its context between
    calls."""
    kv = BatchKV(base.model, 0, base.decoder)
    kv.extend(base)
    kv.select([0] * batch)
    nodes = Nodes.chains([[1] * tokens for _ in range(batch)], 0, kv.device)

    def run() -> None:
        hidden = kv.forward(nodes)
        if head:
            kv.logits(hidden).argmax(-1).tolist()
        kv.commit([[] for _ in range(batch)])

    return run


def head_step(base: BatchKV, rows: int) -> Callable[[], None]:
    """The LM head and argmax over ``rows`` hidden states, as the engine runs them on the nodes it keeps logits of."""
    hidden = torch.randn(rows, base.model.config.hidden_size, generator=torch.Generator().manual_seed(rows),
                         dtype=base.model.dtype).to(base.device)

    def run() -> None:
        base.logits(hidden).argmax(-1).tolist()

    return run


def time_forward(base: BatchKV, batch: int, tokens: int, warmup: int, repeats: int) -> float:
    """Median seconds of ``forward_step``."""
    return _median_s(forward_step(base, batch, tokens), warmup, repeats)


def time_ngram(context: int, warmup: int, repeats: int) -> float:
    """Median seconds of one n-gram lookup (default window, k=8) over a ``context``-token sequence."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 1000, size=context)
    return _median_s(lambda: ngram_candidates(tokens, 8, 1, 4), warmup, repeats)


def _slowest_ngram_s(contexts: Sequence[float], grid: Grid) -> float:
    """The n-gram lookup's seconds at the longest of ``contexts`` (a lookup never gets cheaper with more context)."""
    return max(time_ngram(int(c), grid.warmup, max(grid.repeats, 5)) for c in contexts)


def time_step_overhead(target: LoadedModel, batch_sizes: Sequence[int], grid: Grid) -> tuple[float, ...]:
    """Per batch size, seconds an engine step spends outside the target forward (see the module docstring)."""
    from engine.engine import Request, SpecEngine
    from engine.sampling import SamplingParams

    base = prefill(target, OVERHEAD_CONTEXT)
    prompt = [(7 * i + 3) % target.vocab_size for i in range(OVERHEAD_CONTEXT + 1)]
    params = SamplingParams(max_new_tokens=grid.warmup + grid.overhead_pairs + 2, ignore_eos=True)
    out = []
    for batch in batch_sizes:
        engine = SpecEngine(target, max_batch=batch)
        for row in range(batch):
            engine.add(Request(f"overhead-{row}", prompt, params))
        engine.step()  # admission, prefill and the first decode step
        forward = forward_step(base, batch, 1)
        differences = []
        for pair in range(grid.warmup + grid.overhead_pairs):
            start = time.perf_counter()
            engine.step()
            step_s = time.perf_counter() - start
            start = time.perf_counter()
            forward()
            if pair >= grid.warmup:
                differences.append(step_s - (time.perf_counter() - start))
        out.append(max(0.0, statistics.median(differences)))
    return tuple(float(s) for s in isotonic(np.array(out)))


def _time_rounds(steps: dict[tuple[int, int, int], Callable[[], None]], grid: Grid,
                 tick: Callable[[], None]) -> dict[tuple[int, int, int], float]:
    """Median seconds of every step, each timed once per round in a rotated order (see the module docstring);
    ``tick`` after each timed round."""
    points = list(steps)
    times: dict[tuple[int, int, int], list[float]] = {p: [] for p in points}
    rounds = grid.warmup + grid.repeats
    for round_ in range(rounds):
        shift = round_ * len(points) // rounds
        for point in points[shift:] + points[:shift]:
            start = time.perf_counter()
            steps[point]()
            if round_ >= grid.warmup:
                times[point].append(time.perf_counter() - start)
        if round_ >= grid.warmup:
            tick()
    return {p: statistics.median(t) for p, t in times.items()}


def measure_grid(loaded: LoadedModel, batch_sizes: Sequence[int], tokens: Sequence[int], contexts: Sequence[int],
                 grid: Grid, tick: Callable[[], None]) -> ForwardGrid:
    """The forwards without the LM head, every point timed once per round; ``tick`` after each timed round."""
    bases = {c: prefill(loaded, c) for c in contexts}
    steps = {(b, t, c): forward_step(bases[c], b, t, head=False) for b in batch_sizes for t in tokens
             for c in contexts}
    medians = _time_rounds(steps, grid, tick)
    return uniform_grid(batch_sizes, tokens, contexts, lambda b, t, c: medians[(b, t, c)]).monotone(FITTED_AXES)


def measure_head(loaded: LoadedModel, rows: Sequence[int], grid: Grid) -> ForwardGrid:
    """The LM head over each count of ``rows``, on the tokens axis of a one-point batch and context grid."""
    base = prefill(loaded, 1)
    medians = _time_rounds({(1, r, 0): head_step(base, r) for r in rows}, grid, lambda: None)
    return uniform_grid((1,), rows, (0,), lambda b, t, c: medians[(b, t, c)]).monotone()


def retime(cost: CostModel, target: LoadedModel, draft: LoadedModel | None, batch: int,
           grid: Grid = Grid(warmup=1, repeats=3)) -> CostModel:
    """``cost`` with its target and draft grids measured again now, at the grids' batch sizes up to ``batch`` (a
    batch shrinks as its requests finish, and a replay at ``batch`` prices those tail steps at their own size), the
    grids' token counts and context lengths, its heads at their row counts, and the engine's step overhead and the
    n-gram lookup (both run in Python, whose speed is the host's too). A shared CPU's speed drifts by 10-30% within
    an hour, so checking a replay's prediction against a live run needs the engine priced as the host runs it around
    the live run; this is calibration's timing, restricted to what that live run can use. The target is also timed
    at ``grid.tokens`` (the chain widths by default), so that a model calibrated at fewer widths is re-priced at the
    ones its chains verify."""
    def up_to_batch(loaded: LoadedModel, measured: ForwardGrid, widths: Sequence[int] = ()) -> ForwardGrid:
        sizes = [int(b) for b in measured.batch_sizes if b <= batch] or [batch]
        contexts = [int(c) for c in measured.context_lens]
        tokens = sorted({int(t) for t in measured.tokens} | set(widths))
        return measure_grid(loaded, sizes, tokens, contexts, grid, lambda: None)

    with torch.no_grad():
        target_grid = up_to_batch(target, cost.target, grid.tokens)
        draft_grid = up_to_batch(draft, cost.draft) if draft is not None and cost.draft is not None else cost.draft
        heads = {}
        for name, loaded in (("target_head", target), ("draft_head", draft)):
            measured = getattr(cost, name)
            if loaded is not None and measured is not None:
                heads[name] = measure_head(loaded, [int(r) for r in measured.tokens], grid)
        overhead = time_step_overhead(target, [int(b) for b in target_grid.batch_sizes], grid) \
            if cost.step_overhead_s else ()
    ngram_s = _slowest_ngram_s(target_grid.context_lens, grid)
    return cost.model_copy(update={"target": target_grid, "draft": draft_grid, "step_overhead_s": overhead,
                                   "ngram_s": ngram_s, **heads})


def calibrate(target: LoadedModel, draft: LoadedModel | None, grid: Grid = FULL, progress: bool = False,
              device: str = "cpu") -> CostModel:
    """Time the grid on ``target`` (and ``draft``) and return the cost model with the engine identity."""
    from tqdm import tqdm

    with torch.no_grad(), tqdm(total=grid.repeats * (2 if draft else 1), desc="calibrate", unit="round",
                               disable=not progress) as bar:
        target_grid = measure_grid(target, grid.batch_sizes, grid.tokens, grid.context_lens, grid,
                                   lambda: bar.update(1))
        target_head = measure_head(target, grid.head_rows, grid)
        draft_grid = draft_head = None
        if draft is not None:
            draft_grid = measure_grid(draft, grid.batch_sizes, grid.draft_tokens, grid.context_lens, grid,
                                      lambda: bar.update(1))
            draft_head = measure_head(draft, grid.head_rows, grid)
    ngram_s = _slowest_ngram_s(grid.context_lens, grid)
    with torch.no_grad():
        overhead = time_step_overhead(target, grid.batch_sizes, grid)
    identity = EngineIdentity(target=model_identity(target), draft=model_identity(draft) if draft else None,
                              dtype=target.precision, device=hardware_fingerprint(device))
    return CostModel(engine=identity, target=target_grid, draft=draft_grid, target_head=target_head,
                     draft_head=draft_head, ngram_s=ngram_s, step_overhead_s=overhead)
