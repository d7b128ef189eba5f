"""Replay recorded requests through a policy with continuous batching, step by step, priced by a cost model.

One cell = one workload at one batch size B: B requests run concurrently; when one finishes, the workload's next trace
joins at the next step (the target's prefill is not priced: tokens/s is decode throughput; the draft model's cache
starts empty and is filled by a request's first draft pass, as in the engine). Callers fill a cell with ``filled``:
at least ``WAVES`` x B requests, the recorded ones repeated, so that B requests really decode together. Every step
does what the engine does:

1. for every running request, in admission order, ``policy.decide(DecisionContext(...))`` with ``batch_size`` = the
   running requests, ``context_len`` = prompt_len + p - 1 (the tokens in its KV cache: the root, the last emitted
   token, is not yet in it), ``output_len`` = p, ``request_step`` = its steps so far, ``last`` = its previous
   ``StepStats``, ``suffix_match`` of the true tokens so far (if the policy reads it, as in the engine) and the
   trace's ``max_new_tokens``; the config then goes through ``at_batch_size`` as in the engine;
2. each request's outcome comes from ``ReplayTrace.step`` (exact for chains, static trees and n-gram);
3. the step costs ``draft_s + verify_s``: per method in use, ``cost.draft_s`` at the deepest proposal of that method
   (the draft model's forward runs over all B rows, padded, and its first forward feeds each drafting row the tokens
   its cache has not seen: 1 after a draft step, more after steps with another method, and a row missing more than
   ``engine.drafters.catch_up.ALONE_AFTER`` is first fed alone; n-gram lookups are priced per request that ran
   one), plus ``cost.verify_s(B, B * max(1 + nodes_i), max context, sum(1 + nodes_i))`` (the batch is padded to its
   widest row and attends over the longest cache; the LM head runs over the real nodes only), plus the engine's
   per-step overhead ``cost.overhead_s(B)``;
4. ``policy.observe(StepStats(...))`` per request, in the same order, with the step's shared times, the simulated
   clock as timestamp and ``finished`` on the request's last step.

A cell's ``tokens_per_s`` is the throughput at its batch size: tokens over seconds of the steps that ran all B rows.
Once the queue is empty the batch drains through steps of fewer rows, which a server under steady load would fill
with new requests; how long that drain lasts depends on how unevenly the last requests end, not on what a config
does at batch size B (every recorded output runs to the token limit, so off ends each batch of requests together and
a speculating policy does not). ``seconds`` and ``emitted_tokens`` cover every step, the drain included: what a live
run of the same requests takes.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.config import OFF, SpecConfig
from engine.drafters.catch_up import catches_up_alone
from engine.policy import DecisionContext, SpecPolicy, reads_suffix_match
from engine.stats import StepStats
from policies.cost_model import CostModel
from tuner.replay.outcome import Outcome, ReplayError, ReplayTrace
from tuner.traces import Trace

# batches' worth of requests a cell replays at least (``filled``)
WAVES = 8


@dataclass
class CellResult:
    """Throughput of one policy on one workload at one batch size."""

    workload: str
    batch_size: int
    policy: str
    config: str  # the config used, or the mix of configs an adaptive policy used (share of request steps)
    tokens_per_s: float  # over the steps with all batch_size rows (every step if none had)
    mean_acceptance_length: float  # 1 + accepted / drafts
    steps: int  # batched decode steps (target forwards)
    requests: int
    emitted_tokens: int
    accepted_tokens: int
    drafts: int  # request steps that proposed at least one draft token
    draft_tokens: int
    seconds: float  # every step's, the drain included
    configs: dict[str, int] = field(default_factory=dict)  # config label -> request steps

    @property
    def job_tokens_per_s(self) -> float:
        """Tokens over every step's seconds, the drain included: what a live run of the same requests measures."""
        return self.emitted_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Running:
    __slots__ = ("trace", "p", "steps", "last", "drafted_to")

    def __init__(self, trace: ReplayTrace) -> None:
        self.trace = trace
        self.p = 0
        self.steps = 0
        self.last: StepStats | None = None
        self.drafted_to = 0  # tokens in the draft model's cache: it is filled when the request first drafts


def check_identity(traces: Iterable[Trace], cost: CostModel) -> None:
    """Refuse traces recorded on another target, dtype or draft than the cost model was measured on."""
    engine = cost.engine
    for trace in traces:
        where = f"workload {trace.workload!r} request {trace.request_id!r}"
        if trace.target != engine.target:
            raise ReplayError(f"{where}: target {trace.target!r} differs from the cost model's {engine.target!r}")
        if trace.dtype != engine.dtype:
            raise ReplayError(f"{where}: dtype {trace.dtype!r} differs from the cost model's {engine.dtype!r}")
        if trace.draft is not None and engine.draft is not None and trace.draft != engine.draft:
            raise ReplayError(f"{where}: draft {trace.draft!r} differs from the cost model's {engine.draft!r}")


def summarize_configs(configs: Counter[str]) -> str:
    """``ngram k=4 chain n=1..4`` for one config, else the three most used with their share of request steps."""
    total = sum(configs.values())
    if len(configs) == 1:
        return next(iter(configs))
    top = configs.most_common(3)
    text = ", ".join(f"{label} {100 * count / total:.0f}%" for label, count in top)
    return text + (f", +{len(configs) - 3} more" if len(configs) > 3 else "")


def _draft_seconds(cost: CostModel, batch: int, context: int, running: list[_Running], configs: list[SpecConfig],
                   outcomes: list[Outcome]) -> float:
    """Drafting time of one step: the draft model's forwards run over all rows at once to the batch's deepest (and
    widest) proposal, computing logits only in the drafting rows to each one's depth, and the first feeds each
    drafting row the tokens its cache has not seen (a row far behind catches up alone first); each n-gram lookup is
    priced on its own."""
    total = 0.0
    drafted = [(r, cfg, out) for r, cfg, out in zip(running, configs, outcomes) if cfg.method == "draft" and out.asked]
    if drafted:
        deepest = max(out.depth for _, _, out in drafted)
        widest = max(drafted, key=lambda row: row[2].nodes)[1].tree
        missing = [r.trace.prompt_len + r.p - r.drafted_to for r, _, _ in drafted]
        alone = [m for m in missing if catches_up_alone(batch, m)]
        catch_up = max((m for m in missing if not catches_up_alone(batch, m)), default=1)
        total += cost.draft_s(batch, deepest, context, "draft", widest, catch_up,
                              depths=[out.depth for _, _, out in drafted])
        total += sum(cost.catch_up_alone_s(m, context) for m in alone)
    lookups = sum(1 for cfg, out in zip(configs, outcomes) if cfg.method == "ngram" and out.asked)
    if lookups:
        total += cost.draft_s(lookups, 1, context, "ngram")
    return total


def prepare(traces: Iterable[Trace | ReplayTrace]) -> list[ReplayTrace]:
    """Traces ready for stepping; prepare once and pass the result to many cells to share n-gram lookups."""
    return [t if isinstance(t, ReplayTrace) else ReplayTrace(t) for t in traces]


def repeated(traces: Sequence[Trace | ReplayTrace], count: int, workload: str | None = None) -> list[ReplayTrace]:
    """``count`` requests cycling through ``traces`` in order, the n-th pass's copies renamed ``<id>#<n>`` (and
    relabelled ``workload`` if given)."""
    prepared = prepare(traces)
    return [(t := prepared[i % len(prepared)]).renamed(f"{t.trace.request_id}#{i // len(prepared)}", workload)
            for i in range(count)]


def filled(traces: Sequence[Trace | ReplayTrace], batch_size: int, waves: int = WAVES) -> list[ReplayTrace]:
    """The requests a cell at ``batch_size`` replays: the recorded ones, repeated in order up to ``waves`` batches'
    worth where there are fewer. With fewer than B requests a cell would never run at batch size B, and with about
    B its full-batch steps would be one wave, ended by the first request to finish, before any request joins."""
    if len(traces) >= waves * batch_size:
        return prepare(traces)
    return repeated(traces, waves * batch_size)


def replay_cell(traces: Sequence[Trace | ReplayTrace], policy: SpecPolicy, cost: CostModel, batch_size: int,
                policy_name: str, requested: SpecConfig = OFF) -> CellResult:
    """Replay one workload's ``traces`` (in order) at ``batch_size`` through a fresh ``policy``."""
    if batch_size < 1:
        raise ReplayError(f"batch size must be at least 1, got {batch_size}")
    if not traces:
        raise ReplayError("no traces to replay")
    queue = deque(prepare(traces))
    workload = queue[0].trace.workload
    running: list[_Running] = []
    suffix = reads_suffix_match(policy)
    step = 0
    clock = full_clock = 0.0  # every step's seconds; those of the steps with all batch_size rows
    full_emitted = 0
    emitted_total = accepted_total = drafts = draft_tokens = 0
    used: Counter[str] = Counter()
    while queue or running:
        while queue and len(running) < batch_size:
            running.append(_Running(queue.popleft()))
        step += 1
        batch = len(running)
        contexts = [r.trace.prompt_len + r.p - 1 for r in running]
        longest = max(contexts)
        configs = []
        for r, context in zip(running, contexts):
            trace = r.trace.trace
            ctx = DecisionContext(trace.request_id, trace.workload, batch, context, r.trace.prompt_len, r.p,
                                  r.steps, requested, r.last, longest, r.trace.suffix_match(r.p) if suffix else 0,
                                  trace.max_new_tokens)
            config = policy.decide(ctx).at_batch_size(batch)
            configs.append(config)
            used[config.label()] += 1
        outcomes = [r.trace.step(r.p, config) for r, config in zip(running, configs)]
        draft_s = _draft_seconds(cost, batch, longest, running, configs, outcomes)
        batch_verify = sum(1 + out.nodes for out in outcomes)
        verify_s = cost.verify_s(batch, batch * max(1 + out.nodes for out in outcomes), longest, batch_verify)
        step_s = draft_s + verify_s + cost.overhead_s(batch)
        clock += step_s
        full = batch == batch_size
        if full:
            full_clock += step_s
        keep = []
        for r, context, config, out in zip(running, contexts, configs, outcomes):
            trace = r.trace.trace
            hits = tuple(1 if d < out.accepted else 0 for d in range(out.depth))
            stats = StepStats(step, trace.request_id, trace.workload, batch, context, out.method, out.depth,
                              out.nodes, out.accepted, hits, out.emitted, 1 + out.nodes, batch_verify, draft_s,
                              verify_s, clock, r.p + out.emitted >= r.trace.length, r.trace.prompt_len, r.p,
                              trace.max_new_tokens)
            policy.observe(stats)
            if config.method == "draft" and out.asked:
                # the draft's cache now holds the tokens so far and the accepted nodes it was fed (all but the deepest)
                r.drafted_to = r.trace.prompt_len + r.p + min(out.accepted, out.depth - 1)
            r.p += out.emitted
            r.steps += 1
            r.last = stats
            emitted_total += out.emitted
            if full:
                full_emitted += out.emitted
            if out.nodes:
                drafts += 1
                draft_tokens += out.nodes
                accepted_total += out.accepted
            if r.p < r.trace.length:
                keep.append(r)
        running = keep
    return CellResult(
        workload=workload, batch_size=batch_size, policy=policy_name, config=summarize_configs(used),
        tokens_per_s=full_emitted / full_clock if full_clock > 0 else emitted_total / clock if clock > 0 else 0.0,
        mean_acceptance_length=1.0 + accepted_total / drafts if drafts else 1.0, steps=step, requests=len(traces),
        emitted_tokens=emitted_total, accepted_tokens=accepted_total, drafts=drafts, draft_tokens=draft_tokens,
        seconds=clock, configs=dict(used))
