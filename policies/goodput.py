"""``goodput``: pick the config with the highest expected tokens per second from measured acceptance and cost.

Per workload and method the policy keeps an EWMA of the *conditional* acceptance at each depth d (the chance that the
draft token at depth d is accepted given that depths 1..d-1 were), separately per branching width, since a static tree
with b children per node accepts whenever the true token is among the draft's top b. A config with depth k then
accepts E[a] = sum_{d<=k} prod_{j<=d} alpha(j, b_j) tokens per step and emits 1 + E[a], and with the measured cost model

    tokens/s = (1 + E[a]) / (draft_s(B, k, ctx) + verify_s(B, B * (1 + nodes), ctx))

assuming, for the choice, that the batch's other requests run the same config. Off scores 1 / verify_s(B, B, ctx); the
best config must beat it by ``margin``. So acceptance near 0 or a steep verify curve turns speculation off (k = 0).

While off no acceptance is observed, so after ``probe_every`` engine steps in which a workload ran off, its
requests speculate for ``probe_len`` steps with the best speculative candidate, refreshing the estimates. N-gram
acceptance counts steps where the lookup found nothing (or fewer tokens than asked) as misses, so the estimate prices
lookups that come up short.
Choices are cached per (workload, batch size, context bucket) and re-evaluated every ``refresh_every`` observations.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from engine.config import SpecConfig, TreeShape
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.base import IntList, MethodList, Policy, PolicyOptions, TreeList, remember
from policies.cost_model import CostModel

MAX_DEPTH = 32
CONTEXT_BUCKET = 64
CHAIN = TreeShape()


class GoodputOptions(PolicyOptions):
    methods: MethodList = ("draft", "ngram")
    ks: IntList = (1, 2, 3, 4, 6, 8)
    trees: TreeList = (CHAIN,)  # shapes tried with the draft model; n-gram candidates are chains
    min_n: int = 1
    max_n: int = 4
    prior: float = Field(default=0.6, ge=0.0, le=1.0)  # conditional acceptance assumed before any observation
    decay: float = Field(default=0.05, gt=0.0, le=1.0)  # weight of a new observation once warmed up
    probe_every: int = Field(default=48, ge=1)  # engine steps a workload runs off before it probes
    probe_len: int = Field(default=2, ge=1)  # engine steps a probe speculates
    refresh_every: int = Field(default=16, ge=1)  # observations between re-evaluations of a cached choice
    margin: float = Field(default=0.02, ge=0.0)  # speculation must beat off by this fraction
    max_batch_size: int | None = None

    @field_validator("methods")
    @classmethod
    def _speculative_methods(cls, methods: tuple[str, ...]) -> tuple[str, ...]:
        if not methods or "off" in methods:
            raise ValueError("list draft and/or ngram (off is always a candidate)")
        return methods

    @field_validator("ks")
    @classmethod
    def _ks_in_range(cls, ks: tuple[int, ...]) -> tuple[int, ...]:
        if not ks or any(k < 1 or k > MAX_DEPTH for k in ks):
            raise ValueError(f"every k must be between 1 and {MAX_DEPTH}")
        return tuple(sorted(set(ks)))

    @field_validator("trees")
    @classmethod
    def _static_trees(cls, trees: tuple[TreeShape, ...]) -> tuple[TreeShape, ...]:
        if not trees or any(t.top_k is not None for t in trees):
            raise ValueError("give static shapes (chain, 2x2, ...); dynamic top_k trees have no acceptance model")
        return trees


class _Estimates:
    """What the policy has learned about one workload."""

    __slots__ = ("alpha", "seen", "fill", "fill_seen", "off_steps", "spec_steps", "last_off", "last_spec",
                 "observations", "choices")

    def __init__(self, keys: list[tuple[str, int]], prior: float) -> None:
        self.alpha = {key: [prior] * MAX_DEPTH for key in keys}  # (method, width) -> alpha at depth d (index d-1)
        self.seen = {key: [0] * MAX_DEPTH for key in keys}
        self.fill = 1.0  # n-gram: EWMA share of the asked depth the lookup proposed
        self.fill_seen = 0
        self.off_steps = 0  # engine steps run off since speculation last ran for probe_len steps
        self.spec_steps = 0  # consecutive engine steps that speculated
        self.last_off = -1  # engine step counters, so a batch step counts once
        self.last_spec = -1
        self.observations = 0
        self.choices: dict[tuple[int, int], tuple[int, SpecConfig, SpecConfig | None]] = {}


class _Group:
    """Candidates sharing a method and tree shape: they differ only in depth, so one pass prices them all."""

    __slots__ = ("method", "tree", "ks", "max_k", "nodes", "configs")

    def __init__(self, method: str, tree: TreeShape, ks: tuple[int, ...], options: GoodputOptions) -> None:
        self.method = method
        self.tree = tree
        self.ks = ks
        self.max_k = max(ks)
        self.nodes = {k: tree.max_nodes(k) for k in ks}
        self.configs = {k: SpecConfig(method=method, k=k, tree=tree, min_n=options.min_n, max_n=options.max_n,
                                      max_batch_size=options.max_batch_size) for k in ks}


class GoodputPolicy(Policy):
    name = "goodput"
    Options = GoodputOptions
    needs_cost_model = True

    def __init__(self, cost_model: CostModel, options: GoodputOptions | None = None) -> None:
        self.cost = cost_model
        self.options = opts = options or GoodputOptions()
        self.off = SpecConfig(max_batch_size=opts.max_batch_size)
        self.groups = [_Group(method, tree, opts.ks, opts) for method in opts.methods
                       for tree in (opts.trees if method == "draft" else (CHAIN,))]
        widths = sorted({1} | {b for t in opts.trees for b in (t.branching or ())})
        self._widths = widths
        self._keys = [(m, w) for m in opts.methods for w in widths]
        self._workloads: dict[str, _Estimates] = {}
        self._pending: dict[str, SpecConfig] = {}
        self._draft_cost: dict[tuple[int, int, int], list[float]] = {}  # (batch, bucket, group) -> by depth
        self._verify_cost: dict[tuple[int, int, float], float] = {}

    @classmethod
    def from_options(cls, options: GoodputOptions, cost_model: CostModel) -> GoodputPolicy:
        return cls(cost_model, options)

    # -- deciding ---------------------------------------------------------------------------------------------------
    def decide(self, ctx: DecisionContext) -> SpecConfig:
        config = super().decide(ctx)
        remember(self._pending, ctx.request_id, config)
        return config

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        est = self._estimates(ctx.workload)
        bucket = max(ctx.context_len, 0) // CONTEXT_BUCKET
        epoch = est.observations // self.options.refresh_every
        cached = est.choices.get((ctx.batch_size, bucket))
        if cached is None or cached[0] != epoch:
            best, best_spec = self._evaluate(est, max(ctx.batch_size, 1), bucket)
            cached = (epoch, best, best_spec)
            est.choices[(ctx.batch_size, bucket)] = cached
        _, best, best_spec = cached
        if not best.speculative and best_spec is not None and est.off_steps >= self.options.probe_every:
            return best_spec
        return best

    def expected_tokens_per_s(self, workload: str, config: SpecConfig, batch_size: int, context_len: int) -> float:
        """The score ``choose`` ranks configs by (tokens per second of one request at this batch size)."""
        est = self._estimates(workload)
        bucket = max(context_len, 0) // CONTEXT_BUCKET
        if not config.speculative:
            return 1.0 / self._verify(batch_size, bucket, 0.0)
        accepted = self._accepted_by_depth(est, config.method, config.tree, config.k)[config.k]
        nodes = config.tree.max_nodes(config.k) * (est.fill if config.method == "ngram" else 1.0)
        seconds = self.cost.draft_s(batch_size, config.k, (bucket + 0.5) * CONTEXT_BUCKET, config.method,
                                    config.tree) + self._verify(batch_size, bucket, nodes)
        return (1.0 + accepted) / seconds

    def _evaluate(self, est: _Estimates, batch: int, bucket: int) -> tuple[SpecConfig, SpecConfig | None]:
        off_score = 1.0 / self._verify(batch, bucket, 0.0)
        best_spec, best_score = None, 0.0
        for index, group in enumerate(self.groups):
            accepted = self._accepted_by_depth(est, group.method, group.tree, group.max_k)
            drafting = self._draft(batch, bucket, index)
            fill = est.fill if group.method == "ngram" else 1.0
            for k in group.ks:
                score = (1.0 + accepted[k]) / (drafting[k] + self._verify(batch, bucket, group.nodes[k] * fill))
                if score > best_score:
                    best_spec, best_score = group.configs[k], score
        if best_spec is not None and best_score > off_score * (1.0 + self.options.margin):
            return best_spec, best_spec
        return self.off, best_spec

    def _accepted_by_depth(self, est: _Estimates, method: str, tree: TreeShape, k: int) -> list[float]:
        """Expected accepted tokens E[a] for every depth 0..k."""
        out, accepted, run = [0.0], 0.0, 1.0
        for depth in range(1, k + 1):
            run *= self._alpha(est, method, tree.branching_at(depth), depth)
            accepted += run
            out.append(accepted)
        return out

    def _alpha(self, est: _Estimates, method: str, width: int, depth: int) -> float:
        """Conditional acceptance at ``depth`` with ``width`` children; a wider node accepts at least what a narrower
        one does, so take the best estimate among the widths that fit."""
        best = 0.0
        for w in self._widths:
            if w > width:
                break
            value = est.alpha[(method, w)][depth - 1]
            if value > best:
                best = value
        return best

    def _draft(self, batch: int, bucket: int, index: int) -> list[float]:
        key = (batch, bucket, index)
        value = self._draft_cost.get(key)
        if value is None:
            group = self.groups[index]
            value = self.cost.draft_s_by_depth(batch, group.max_k, (bucket + 0.5) * CONTEXT_BUCKET, group.method,
                                               group.tree)
            self._draft_cost[key] = value
        return value

    def _verify(self, batch: int, bucket: int, nodes: float) -> float:
        nodes = round(nodes * 4) / 4  # quarter-token steps keep the cache small
        key = (batch, bucket, nodes)
        value = self._verify_cost.get(key)
        if value is None:
            value = self.cost.verify_s(batch, batch * (1.0 + nodes), (bucket + 0.5) * CONTEXT_BUCKET)
            self._verify_cost[key] = value
        return value

    # -- observing --------------------------------------------------------------------------------------------------
    def observe(self, stats: StepStats) -> None:
        decided = self._pending.pop(stats.request_id, None)
        est = self._estimates(stats.workload)
        est.observations += 1
        if stats.draft_tokens <= 0:
            # The engine reports a step whose drafter proposed nothing as "off"; only the decision tells them apart.
            asked = stats.method if stats.method != "off" else (decided.method if decided is not None else "off")
            if asked in self.options.methods:
                self._update(est, asked, 1, 1, 0.0)  # asked to speculate, proposed nothing: a miss
                if asked == "ngram":
                    self._update_fill(est, 0.0)
                self._count_step(est, stats.step, speculated=True)
            else:
                self._count_step(est, stats.step, speculated=False)
            return
        self._count_step(est, stats.step, speculated=True)
        method = stats.method
        if method not in self.options.methods:
            return
        tree = self._tree_of(stats, decided)
        if tree is None:
            return
        accepted = min(max(stats.accepted_tokens, 0), MAX_DEPTH)
        window = stats.k
        if method == "ngram" and decided is not None and decided.method == "ngram":
            window = decided.k  # a lookup that came up short missed the depths it did not propose
            self._update_fill(est, min(stats.draft_tokens / max(window, 1), 1.0))
        for depth in range(1, accepted + 1):
            self._update(est, method, tree.branching_at(depth), depth, 1.0)
        stopped = stats.emitted_tokens == stats.accepted_tokens  # an accepted stop token ends the walk
        if accepted < min(window, MAX_DEPTH) and not stopped:
            self._update(est, method, tree.branching_at(accepted + 1), accepted + 1, 0.0)

    def _count_step(self, est: _Estimates, step: int, speculated: bool) -> None:
        if speculated:
            if step != est.last_spec:
                est.spec_steps += 1
                est.last_spec = step
            if est.spec_steps >= self.options.probe_len:
                est.off_steps = 0
        else:
            if step != est.last_off:
                est.off_steps += 1
                est.last_off = step
            est.spec_steps = 0

    def overridden(self, request_id: str, config: SpecConfig) -> None:
        if request_id in self._pending:
            self._pending[request_id] = config

    def _tree_of(self, stats: StepStats, decided: SpecConfig | None) -> TreeShape | None:
        """The shape the step ran: the decided one if the stats fit it, a chain if they look like one."""
        if decided is not None and decided.method == stats.method and decided.tree.top_k is None \
                and decided.tree.max_nodes(stats.k) == stats.draft_tokens:
            return decided.tree
        if stats.draft_tokens <= stats.k:  # a chain (an n-gram chain may propose fewer tokens than asked)
            return CHAIN
        return None

    def _update(self, est: _Estimates, method: str, width: int, depth: int, hit: float) -> None:
        key = (method, width)
        if key not in est.alpha or not 1 <= depth <= MAX_DEPTH:
            return
        seen = est.seen[key]
        alpha = est.alpha[key]
        alpha[depth - 1] += self._weight(seen[depth - 1]) * (hit - alpha[depth - 1])
        seen[depth - 1] += 1

    def _update_fill(self, est: _Estimates, fill: float) -> None:
        est.fill += self._weight(est.fill_seen) * (fill - est.fill)
        est.fill_seen += 1

    def _weight(self, seen: int) -> float:
        """EWMA weight: a running mean (the prior counting as one observation) until it drops to ``decay``."""
        return max(self.options.decay, 1.0 / (seen + 2))

    def _estimates(self, workload: str) -> _Estimates:
        est = self._workloads.get(workload)
        if est is None:
            est = _Estimates(self._keys, self.options.prior)
            self._workloads[workload] = est
        return est

    def acceptance(self, workload: str, method: str, width: int = 1) -> list[float]:
        """Current conditional acceptance estimates at depths 1..32 (for inspection and tests)."""
        return list(self._estimates(workload).alpha[(method, width)])
