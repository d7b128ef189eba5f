"""The speculative engine: continuous batching of requests, each step = propose -> verify in one target forward ->
accept -> emit, with per-request speculation configs chosen by a policy every step."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from engine.accept import Acceptance, accept_greedy, accept_sampled
from engine.config import SpecConfig
from engine.drafters.base import Drafter, DraftInput
from engine.drafters.draft_model import DraftModelDrafter
from engine.drafters.ngram import suffix_match_len
from engine.drafters.ngram_drafter import NgramDrafter
from engine.kv import BatchKV, Nodes
from engine.models.loaded import LoadedModel
from engine.models.loading import check_target_dtype
from engine.policy import DecisionContext, RequestedConfig, SpecPolicy, reads_suffix_match
from engine.sampling import SamplingParams
from engine.stats import RequestSummary, StepStats
from engine.tree import DraftTree


class EngineInputError(ValueError):
    """A request the engine cannot serve (empty prompt, too long, a method without its drafter, ...)."""


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    config: SpecConfig = field(default_factory=SpecConfig)
    workload: str = "default"


@dataclass
class _Running:
    request: Request
    tokens: list[int]  # prompt + output; the last token is not yet in the target's KV cache
    summary: RequestSummary
    stop_ids: frozenset[int]
    generator: torch.Generator | None
    started: float
    last: StepStats | None = None

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.request.prompt_ids):]


@dataclass
class RequestOutput:
    """What one step produced for one request."""

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop" | "length" | "abort"
    stats: StepStats | None
    summary: RequestSummary | None = None  # set when finished


class SpecEngine:
    """Owns the models, the batch and the caches. ``add``/``abort`` are thread-safe; ``step`` must be called from one
    thread at a time."""

    def __init__(self, target: LoadedModel, draft: LoadedModel | None = None, policy: SpecPolicy | None = None,
                 max_batch: int = 8) -> None:
        check_target_dtype(target.precision)
        self.target = target
        self.policy: SpecPolicy = policy or RequestedConfig()
        self.max_batch = max_batch
        self.kv = BatchKV(target.model, decoder=target.decoder)
        self.drafters: dict[str, Drafter] = {"ngram": NgramDrafter()}
        if draft is not None:
            self.drafters["draft"] = DraftModelDrafter(draft.model, draft.decoder)
        self._running: list[_Running] = []
        self._waiting: deque[Request] = deque()
        self._aborted: set[str] = set()
        self._lock = threading.Lock()
        self.step_count = 0

    # -- request intake ---------------------------------------------------------------------------------------------
    def validate(self, request: Request) -> None:
        """Raise ``EngineInputError`` naming what is wrong with ``request``."""
        if not request.prompt_ids:
            raise EngineInputError("prompt: must not be empty")
        vocab = self.target.vocab_size
        if any(t < 0 or t >= vocab for t in request.prompt_ids):
            raise EngineInputError(f"prompt: token ids must be in [0, {vocab})")
        total = len(request.prompt_ids) + request.params.max_new_tokens
        if total > self.target.max_context:
            raise EngineInputError(f"prompt: {len(request.prompt_ids)} prompt tokens + max_new_tokens "
                                   f"{request.params.max_new_tokens} exceed the model context of "
                                   f"{self.target.max_context} tokens")
        if request.config.method == "draft" and "draft" not in self.drafters:
            raise EngineInputError("config.method: 'draft' needs a draft model, and none is loaded")

    def add(self, request: Request) -> None:
        self.validate(request)
        with self._lock:
            self._waiting.append(request)

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborted.add(request_id)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    # -- stepping ---------------------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Admit waiting requests, then run one decode step for the whole batch."""
        outputs = self._drop_aborted()
        self._admit()
        if self._running:
            outputs += self._decode()
        return outputs

    def _drop_aborted(self) -> list[RequestOutput]:
        with self._lock:
            aborted, self._aborted = self._aborted, set()
            self._waiting = deque(r for r in self._waiting if r.request_id not in aborted)
        gone = [r for r in self._running if r.request.request_id in aborted]
        if not gone:
            return []
        for r in gone:
            r.summary.finish_reason = "abort"
            r.summary.wall_s = time.perf_counter() - r.started
        self._retain([r for r in self._running if r.request.request_id not in aborted])
        return [RequestOutput(r.request.request_id, [], True, "abort", None, r.summary) for r in gone]

    def _admit(self) -> None:
        with self._lock:
            new = []
            while self._waiting and len(self._running) + len(new) < self.max_batch:
                new.append(self._waiting.popleft())
        if not new:
            return
        started = time.perf_counter()
        prompts = [r.prompt_ids for r in new]
        self.kv.prefill([p[:-1] for p in prompts])
        for drafter in self.drafters.values():
            drafter.admit(prompts)
        prefill_s = time.perf_counter() - started
        for r in new:
            gen = None
            if r.params.seed is not None:
                gen = torch.Generator(device="cpu").manual_seed(r.params.seed)
            stop = r.params.stop_token_ids if r.params.stop_token_ids is not None else self.target.eos_token_ids
            summary = RequestSummary(r.request_id, r.workload, len(r.prompt_ids), prefill_s=prefill_s)
            self._running.append(_Running(r, list(r.prompt_ids), summary,
                                          frozenset() if r.params.ignore_eos else frozenset(stop), gen, started))

    def _decode(self) -> list[RequestOutput]:
        batch = len(self._running)
        self.step_count += 1
        contexts = self.kv.lengths.tolist()
        longest = max(contexts)
        suffix = reads_suffix_match(self.policy)
        configs = [self._decide(r, batch, contexts[b], longest, suffix) for b, r in enumerate(self._running)]
        depths = [self._depth(r, cfg) for r, cfg in zip(self._running, configs)]

        t0 = time.perf_counter()
        trees = self._propose(configs, depths)
        t1 = time.perf_counter()
        rows = [([r.tokens[-1]] + tree.tokens, [-1] + [p + 1 for p in tree.parents])
                for r, tree in zip(self._running, trees)]
        nodes = Nodes.trees(rows, self.kv.device)
        hidden = self.kv.forward(nodes)  # [batch, 1 + max nodes, hidden]
        logits = self.kv.logits(hidden[nodes.valid])  # [all nodes, vocab]: none for the padding of short rows
        verdicts = self._accept(trees, logits)
        t2 = time.perf_counter()

        self.kv.commit([[0] + [1 + n for n in v.path] for v in verdicts])
        for method, drafter in self.drafters.items():
            accepted = {b: v.path for b, (v, cfg) in enumerate(zip(verdicts, configs)) if cfg.method == method}
            if any(cfg.method == method for cfg in configs):
                drafter.commit(accepted)

        outputs, keep = [], []
        now = time.time()
        verify_tokens = sum(len(t) for t, _ in rows)
        for b, (r, cfg, tree, verdict) in enumerate(zip(self._running, configs, trees, verdicts)):
            emitted, reason = self._emit(r, tree, verdict)
            hits = [1 if d < len(verdict.path) else 0 for d in range(tree.depth)]
            stats = StepStats(self.step_count, r.request.request_id, r.request.workload, batch, contexts[b],
                              cfg.method if len(tree) else "off", tree.depth, len(tree), len(verdict.path),
                              tuple(hits), len(emitted), 1 + len(tree), verify_tokens, t1 - t0, t2 - t1, now,
                              reason is not None, len(r.request.prompt_ids), len(r.output) - len(emitted),
                              r.request.params.max_new_tokens)
            r.summary.observe_step(stats)
            r.last = stats
            self.policy.observe(stats)
            if reason is not None:
                r.summary.finish_reason = reason
                r.summary.wall_s = time.perf_counter() - r.started
            else:
                keep.append(r)
            outputs.append(RequestOutput(r.request.request_id, emitted, reason is not None, reason, stats,
                                         r.summary if reason is not None else None))
        if len(keep) != batch:
            self._retain(keep)
        return outputs

    def _decide(self, r: _Running, batch: int, context: int, longest: int, suffix: bool) -> SpecConfig:
        ctx = DecisionContext(r.request.request_id, r.request.workload, batch, context, len(r.request.prompt_ids),
                              len(r.output), r.summary.steps, r.request.config, r.last, longest,
                              suffix_match_len(r.tokens) if suffix else 0, r.request.params.max_new_tokens)
        cfg = self.policy.decide(ctx).at_batch_size(batch)
        if cfg.method == "draft" and "draft" not in self.drafters:
            return SpecConfig()
        return cfg

    @staticmethod
    def _depth(r: _Running, cfg: SpecConfig) -> int:
        remaining = r.request.params.max_new_tokens - len(r.output)
        return min(cfg.k, remaining - 1) if cfg.speculative else 0

    def _propose(self, configs: list[SpecConfig], depths: list[int]) -> list[DraftTree]:
        trees = [DraftTree() for _ in configs]
        for method, drafter in self.drafters.items():
            jobs = [DraftInput(b, r.tokens, cfg, depth, r.request.params, r.generator)
                    for b, (r, cfg, depth) in enumerate(zip(self._running, configs, depths))
                    if cfg.method == method and depth > 0]
            if jobs:
                for job, tree in zip(jobs, drafter.propose(jobs)):
                    trees[job.row] = tree
        return trees

    def _accept(self, trees: list[DraftTree], logits: torch.Tensor) -> list[Acceptance]:
        """``logits``: the target's at every row's root and tree nodes, row after row."""
        greedy_choice = logits.argmax(-1).tolist()
        verdicts, start = [], 0
        for r, tree in zip(self._running, trees):
            end = start + 1 + len(tree)
            if r.request.params.greedy:
                verdict = accept_greedy(tree, greedy_choice[start:end])
            else:
                verdict = accept_sampled(tree, logits[start:end], r.request.params, r.generator)
            start = end
            stop_at = next((i for i, n in enumerate(verdict.path) if tree.tokens[n] in r.stop_ids), None)
            if stop_at is not None:  # nothing after an accepted stop token counts
                verdict.path = verdict.path[: stop_at + 1]
            verdicts.append(verdict)
        return verdicts

    @staticmethod
    def _emit(r: _Running, tree: DraftTree, verdict: Acceptance) -> tuple[list[int], str | None]:
        """Append accepted tokens and the bonus, stopping at a stop token or the length limit."""
        limit = r.request.params.max_new_tokens - len(r.output)
        emitted: list[int] = []
        for token in [tree.tokens[n] for n in verdict.path] + [verdict.bonus]:
            emitted.append(token)
            if token in r.stop_ids:
                r.tokens += emitted
                return emitted, "stop"
            if len(emitted) == limit:
                break
        r.tokens += emitted
        return emitted, "length" if len(r.output) >= r.request.params.max_new_tokens else None

    def _retain(self, keep: list[_Running]) -> None:
        index = {id(r): b for b, r in enumerate(self._running)}
        rows = [index[id(r)] for r in keep]
        self.kv.select(rows)
        for drafter in self.drafters.values():
            drafter.retain(rows)
        self._running = keep

    # -- convenience ------------------------------------------------------------------------------------------------
    def run(self, requests: list[Request]) -> dict[str, tuple[list[int], RequestSummary]]:
        """Serve ``requests`` to completion; returns output ids and summary per request id."""
        for r in requests:
            self.add(r)
        out: dict[str, tuple[list[int], RequestSummary]] = {}
        tokens: dict[str, list[int]] = {r.request_id: [] for r in requests}
        while self.has_work():
            for o in self.step():
                tokens[o.request_id] += o.new_token_ids
                if o.finished:
                    out[o.request_id] = (tokens[o.request_id], o.summary)
        return out
