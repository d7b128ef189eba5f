"""``goodput``: pick the config with the highest expected tokens per second from measured acceptance and cost.

Acceptance is estimated online per workload (``policies.acceptance``); a config of depth k with ``nodes`` draft nodes
emits 1 + E[a] tokens per step, so with the measured cost model

    tokens/s = (1 + E[a]) / (draft_s(B, k, ctx) + verify_s(B, B * (1 + nodes), ctx, B * (1 + proposed))
                             + overhead_s(B))

assuming, for the batch's choice, that every request runs the same config. A draft-model pass whose requests all
drafted last step feeds one token per row first, but a request that accepted its whole chain has two to feed (its
deepest draft token, which the draft model proposed but never read, and the target's bonus token), so ``draft_s`` is
priced between the two at the chance that some row of the batch accepted in full, E[a](k) - E[a](k-1) per row. (Priced
at one token and without fills, ``expected_tokens_per_s`` put draft k=2 at math B=4 at 1.10x off where the replay runs
it at 0.95x; now 0.97x: ``benchmarks/goodput_ablation.py --pricing``.) The engine pads a step's verify forward to its
widest row, so ``nodes`` is the widest row's: k for a draft model, and for a lookup k times the chance that at
least one of the B lookups proposes in full; its LM head runs over the nodes proposed, k for a draft model and for a
lookup k times the share it proposes. Off scores
1 / (verify_s(B, B, ctx) + overhead_s(B)) and speculation must beat it by ``margin``, so acceptance near 0 or a steep
verify curve turns speculation off (k = 0).

Requests of one workload are not alike at every step: where the text's end already occurred earlier
(``DecisionContext.suffix_match``, e.g. 9 tokens of a file being copied), a lookup's continuation is accepted far more
often than where the last token is new (code-edit traces: 8.9 of 16 tokens against none, benchmarks/suffix_match.py). So
acceptance is also kept per suffix-match bucket (``match_buckets``: lengths 0, 1, 2-3, 4-7, 8+ by default), and each
request then deviates from the batch's choice when that raises the batch's tokens per second: it gains its bucket's
E[a] and pays only what it adds to the step (a wider verify than the batch's, its lookup, a deeper or extra
draft-model pass, whose forwards span the batch but compute logits in its own row alone, and the tokens its draft cache
lacks after steps without the draft model, which the pass's first
forward feeds padded across the batch, or a forward of its own when many are missing; the other requests keep
theirs). Draft probes pay that catch-up too, so they
wait longer on a request that has not drafted for a while and go to one whose cache is current. A request that never
drafted has an empty draft cache (the engine fills it at the request's first draft pass), so its first draft feeds
the whole prompt. A deviation carries the share of such a fill or catch-up that one step's tokens are of the request's
expected remaining output (what the workload's expected output runs beyond it, and at least what it has emitted: a
request that has run long tends to run longer; never past its token limit), and of that only the share of the
workload's text in suffix-match buckets where a request would draft (elsewhere it copies or stays off, and its cache
falls behind again: spread over all of a code-edit request's output, fills started the draft model in requests that
then drafted a few steps, and code-edit B=1 made 0.89x its oracle instead of 0.97x); a probe carries it whole,
except a group's first probe when the group, fills included, looks at least as good as the choice: the fill buys its
first estimate.
(Charged whole to one step, a catch-up kept a request that had missed a few draft passes off the draft model for good,
behind by more each step.) The batch's choice prices the draft model with the prompt fills its rows have still to
pay: before any step, every row's spread over the workload's expected output, which is what the draft model costs
beyond its passes once every request runs it; after that, the fills of the last step's rows whose caches are still
empty, each spread over that request's own expected remaining output, and a new request's for each row that has ended
or been added since. A paid fill is sunk: counted on, it took a batch off the draft model right after filling every
row's cache whenever lookups priced within the fills' share of it (goodput seeded on the main prompts, held-out
HumanEval at batch 4 started four fills and dropped the draft model two steps later: 0.875x off), and a request
joining near its end would be priced as if it had its whole output ahead. But sunk fills alone would keep a batch on the
draft model for good once requests join it one at a time: each newcomer pays only its own fill beside rows whose fills
are paid, so each joins, and the draft model runs on where, with every request paying its fill, it loses to the rest
(goodput seeded on the main prompts, held-out HumanEval at batch 4: draft k=3 at 1.06x off with every cache filled,
about 0.98x with each request's fill, run in 92% of steps: 0.943x off). So a request whose draft cache is empty starts
the draft model only where it beats the rest (off by the margin) with every row's fill spread over the expected output;
otherwise it takes the best config without it, and the batch leaves the draft model as the rows that filled their caches
end. The expected output is the longest seen so far, and until some request of the workload has ended, at least the
requests' mean token limit (``DecisionContext.max_new_tokens``): a cold policy knowing only the few tokens emitted so
far priced every fill as if requests ended there, so at batch 2 on HumanEval it kept the draft model unprobed for 30
steps.

Requests also ride free on a step widened by others. The verify forward is padded to the step's widest row and the
draft-model pass spans every row to the step's deepest proposal, so once a request deciding earlier in the step has
widened them (with the draft model, or with a lookup in a bucket whose lookups propose in full), a later one may
propose up to that width for the price of a lookup: it takes the config with the most expected accepted tokens (the
draft model only if its cache is current and the step's pass is as deep). Requests decide in the batch's order, so
only those after the widest one ride.

The batch's choice itself is priced with the buckets' estimates weighted by their share of
the text (output tokens, not steps: a deep lookup passes a copied stretch in a few steps), and a lookup's fill with
the share of steps each bucket takes at the config's depth, since the workload-wide estimate is biased once requests
deviate (a draft model ends up observed mostly where lookups fail).

Estimates only move for what runs, so every other (method, tree) group, and speculation itself while off, is probed:
a group's best config runs for one engine step, in one request of the batch, once ``loss / probe_budget`` engine
steps (at least 1) have passed since it last ran, where ``loss`` is the time that step loses, in steps of the
choice: the probing request's tokens fall from the choice's to the probe's, and the whole step waits for the probe's
draft pass and extra verify tokens (a draft-model pass runs over every row of the batch, and at batch 16 one probing
request's lookup can widen the verify enough to take as long as two steps). Probing so costs about ``probe_budget``
of throughput per group, a
group that looks almost as good as the choice is re-checked almost every other step, and one that would slow the
whole batch is checked rarely. A group that has run in fewer than ``WARM_STEPS`` engine steps waits proportionally
less, since a few steps (say, every request's first) are weak evidence, unless even an optimistic reading of that
evidence loses to the choice: each untried share of a config's depth, ``(k - E[a]) / (runs + 1)``, counted as
accepted. (At batch 8-16 a lookup probe that missed once already cannot pay that way; the quicker early re-checks
cost those cells about 1% against off, benchmarks/goodput_ablation.py.) A group that never ran is not the batch's
choice whatever its prior: it is probed first (on the prior alone, every request of a batch would start the draft
model, each filling an empty draft cache). A due probe goes to the first request of the step whose suffix-match bucket
has seen the group's method in no more steps than any other bucket with text, else to the step's last request.
(Taken by whichever request decided first, every lookup probe of held-out code-edit at batch 4, request order 1,
landed in one request writing new text beside three that copied, and the lookups of the 8+ bucket, 46% of the text,
were never observed: 0.95x its oracle.)

Depths never observed borrow the deepest observed estimate, which can be far too kind to a deep config (two depths
seen at 0.99 would price k=16 at 15 accepted tokens), so candidates stop at the first k at least ``REACH`` depths
past the deepest one observed; running them observes the next depths, and k grows step by step while acceptance
holds up.

N-gram acceptance counts lookups that found nothing (or fewer tokens than asked) as misses, so the estimate prices
lookups that come up short; ``nodes`` of an n-gram config is scaled by the measured share proposed. (A draft model
proposes nothing only when the request's token limit left no room, which is no miss.) Choices are cached per
(workload, batch size, context bucket[, suffix-match bucket]) and re-priced every ``refresh_every`` observations (at
each power of two before that: early observations move the estimates most); a request's draft catch-up is priced on
top of its bucket's cached choice, so the cache does not grow with it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from math import log2

from pydantic import Field, field_validator

from engine.config import SpecConfig, TreeShape
from engine.drafters.catch_up import catches_up_alone
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.acceptance import MAX_DEPTH, AcceptanceTable
from policies.base import IntList, MethodList, Policy, PolicyOptions, TreeList, remember
from policies.cost_model import CostModel

CONTEXT_BUCKET = 64
REACH = 2  # depths a candidate may go past the deepest one observed
WARM_STEPS = 16
# a lookup counts as widening its step's verify (see ``_ride``) only where lookups propose in full this often: a
# request riding on a lookup that came up short would widen the step itself
SURE_FILL = 0.9
MIN_RIDE = 0.05  # expected accepted tokens a ride must add: estimates this low are what a run of misses leaves
CHAIN = TreeShape()


class GoodputOptions(PolicyOptions):
    methods: MethodList = ("draft", "ngram")
    ks: IntList = (1, 2, 3, 4, 6, 8, 12, 16)
    trees: TreeList = (CHAIN,)  # shapes tried with the draft model; n-gram candidates are chains
    # a 1-token match is enough: with the LM head priced over the nodes proposed, not the padded width, a lookup
    # that comes up short costs a batch little (2 -> 1: 20 -> 23 of 25 cells at >= 0.97x oracle and lowest against
    # off 0.977 -> 0.986, held out 22 and 0.981 both ways, benchmarks/goodput_ablation.py)
    min_n: int = 1
    max_n: int = 8
    prior: float = Field(default=0.6, ge=0.0, le=1.0)  # conditional acceptance assumed before any observation
    decay: float = Field(default=0.0125, gt=0.0, le=1.0)  # weight of a new observation once warmed up
    probe_budget: float = Field(default=0.005, gt=0.0, le=1.0)  # throughput share spent re-checking each group
    refresh_every: int = Field(default=32, ge=1)  # observations between re-evaluations of a cached choice
    margin: float = Field(default=0.02, ge=0.0)  # speculation must beat off by this fraction
    # Suffix-match lengths at which a separate acceptance estimate starts (``DecisionContext.suffix_match``);
    # empty (``match_buckets=none`` in a SPEC): one estimate per workload.
    match_buckets: IntList = (1, 2, 4, 8)
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

    @field_validator("match_buckets", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return () if isinstance(value, str) and value.lower() == "none" else value

    @field_validator("match_buckets")
    @classmethod
    def _increasing(cls, edges: tuple[int, ...]) -> tuple[int, ...]:
        if any(e < 1 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
            raise ValueError("give strictly increasing suffix-match lengths of at least 1")
        return edges

    @field_validator("trees")
    @classmethod
    def _static_trees(cls, trees: tuple[TreeShape, ...]) -> tuple[TreeShape, ...]:
        if not trees or any(t.top_k is not None for t in trees):
            raise ValueError("give static shapes (chain, 2x2, ...); dynamic top_k trees have no acceptance model")
        return trees


def _widest(fill: float, batch: int) -> float:
    """Expected share of k in the batch's widest n-gram proposal when each request's lookup proposes in full with
    probability ``fill``: the verify forward is padded to the widest row, so at batch B the width is k unless all B
    lookups came up short."""
    return 1.0 - (1.0 - fill) ** batch


def _some_row_in_full(accepted: list[float], k: int, batch: int) -> float:
    """Chance that at least one of ``batch`` rows accepted all ``k`` draft tokens, from E[a] by depth: a row accepts
    through depth k with chance E[a](k) - E[a](k - 1)."""
    return 1.0 - (1.0 - (accepted[k] - accepted[k - 1])) ** batch if k else 0.0


def _near(priced: float, now: float) -> bool:
    """Whether fills per token ``now`` are close enough to the ``priced`` ones to keep a choice: within 9% (2^(1/8)).
    They move a little every step while rows wait with empty draft caches, and re-pricing at each move would cost a
    batch's choice at every decision."""
    return priced == now or (priced > 0 and now > 0 and abs(log2(now / priced)) < 0.125)


def _fill_tokens(tokens: int) -> int:
    """A draft-cache fill of ``tokens``, rounded up to a multiple of 32 so that its price stays cacheable."""
    return -(-tokens // 32) * 32


def _shape_key(method: str, tree: TreeShape) -> tuple[str, tuple[int, ...] | None]:
    return method, None if tree.is_chain else tree.branching


class _Group:
    """Candidates sharing a method and tree shape: they differ only in depth, so one pass prices them all."""

    __slots__ = ("method", "tree", "ks", "max_k", "nodes", "configs")

    def __init__(self, method: str, tree: TreeShape, options: GoodputOptions) -> None:
        self.method = method
        self.tree = tree
        self.ks = options.ks
        self.max_k = max(options.ks)
        self.nodes = {k: tree.max_nodes(k) for k in options.ks}
        self.configs = {k: SpecConfig(method=method, k=k, tree=tree, min_n=options.min_n, max_n=options.max_n,
                                      max_batch_size=options.max_batch_size) for k in options.ks}

    def deepest(self, reach: int) -> int:
        """The deepest candidate priced when estimates reach ``reach`` depths: the first k at or past it."""
        return self.ks[min(bisect_left(self.ks, reach), len(self.ks) - 1)]


class _Workload:
    """What the policy knows about one workload."""

    __slots__ = ("table", "observations", "step", "last_run", "runs", "choices", "probe_step", "probe_owners",
                 "matched", "mix", "deviations", "acceptance", "prompts", "prompt_tokens", "limit_tokens", "longest",
                 "finished", "unfilled", "unfilled_batch", "candidates")

    def __init__(self, table: AcceptanceTable, groups: int) -> None:
        self.table = table
        self.observations = 0
        self.step = 0  # latest engine step observed
        self.last_run = [0] * groups  # engine step each group last ran
        self.runs = [0] * groups  # engine steps each group ran in
        self.choices: dict[tuple[int, int], _Choice] = {}  # (batch, context bucket) -> the batch's choice
        self.probe_step = 0  # the engine step ``probe_owners`` is for
        self.probe_owners: dict[int, str] = {}  # group -> the one request probing it in that step
        self.matched: dict[int, AcceptanceTable] = {}  # suffix-match bucket -> its acceptance
        self.mix: dict[int, float] = {}  # suffix-match bucket -> share of recent output tokens in it (an EWMA)
        self.deviations: dict[tuple[int, int], _Deviation] = {}  # (batch, match bucket) -> a request's choice
        # each group's ``_batch_acceptance`` for an epoch, computed by the observations just before it starts, one
        # group per observation (so that no single call computes them all)
        self.acceptance: list[tuple[int, tuple[list[float], list[float], int]] | None] = [None] * groups
        self.prompts = 0  # requests seen deciding their first step
        self.prompt_tokens = 0  # their prompt tokens
        self.limit_tokens = 0  # their token limits (``DecisionContext.max_new_tokens``; 0 where unknown)
        self.longest = 0  # the longest output seen so far
        self.finished = 0  # requests seen ending (``StepStats.finished``)
        # the rows of step ``step`` (the latest observed, at batch size ``unfilled_batch``) whose draft caches are
        # still empty, as the sum of 1 / their expected remaining output; a row whose request ended counts as a new
        # request's (None before any step)
        self.unfilled: float | None = None
        self.unfilled_batch = 0
        # (batch, context bucket, group) -> (epoch, ``GoodputPolicy._candidates``)
        self.candidates: dict[tuple[int, int, int], tuple[int, tuple]] = {}

    def horizon(self) -> int:
        """The output length a request of this workload is expected to reach: the longest seen so far, and until a
        request has ended, the mean token limit (a cold policy seeing only short outputs would otherwise price a
        draft-cache fill as if every request ended after a few tokens)."""
        if self.finished or not self.limit_tokens:
            return self.longest
        return max(self.longest, self.limit_tokens // self.prompts)


@dataclass(frozen=True, slots=True)
class _Pending:
    """What ``decide`` told a request, kept for the ``observe`` of its step."""

    config: SpecConfig
    match: int | None  # suffix-match bucket
    output_len: int
    unfilled: float  # 1 / the request's expected remaining output if its draft cache is empty, else 0


@dataclass(frozen=True, slots=True)
class _Choice:
    """The batch's config at one (batch size, context bucket) as priced in ``epoch`` with ``unfilled`` fills per
    output token, and the probes of the other groups: (group, its best config, steps to wait between probes, whether
    a first probe skips the wait for its draft-cache fill)."""

    epoch: int
    unfilled: float
    best: _Priced
    probes: list[tuple[int, SpecConfig, float, bool]]
    starts_draft: bool  # whether a request whose draft cache is empty may start the draft model (``_evaluate``)
    without_draft: SpecConfig  # the batch's config for such a request where it may not (without suffix-match buckets)


@dataclass(frozen=True, slots=True)
class _Deviation:
    """A request's config given its suffix-match bucket, with what ``choose`` needs to price a draft catch-up."""

    epoch: int
    bucket: int  # context bucket
    against: SpecConfig  # the batch's config it deviates from
    config: SpecConfig
    # draft-model configs that beat ``fallback`` with the request's draft cache current: (config, batch tokens and
    # seconds per step); empty unless ``config`` is one of them
    drafts: list[tuple[SpecConfig, float, float]]
    fallback: SpecConfig  # the best config without the draft model
    fallback_rate: float  # its batch tokens per second (off's with the margin speculation must beat)
    others_tokens: float  # of the batch tokens per step, those of the other requests
    accepted: list[tuple[list[float], int]]  # per group: E[a] by depth and how many of its ks were priced
    fill: float  # share of an n-gram config's depth the request's lookups propose


@dataclass(frozen=True)
class _Priced:
    """A candidate config with what the policy expects of it for one request at the batch size being evaluated."""

    config: SpecConfig
    group: int  # -1 for off
    accepted: float  # E[a] per step
    nodes: float  # draft nodes verified per step, the padding to the batch's widest row included
    proposed: float  # draft nodes proposed per step (the LM head runs over these only)
    draft_s: float
    seconds: float  # draft + verify seconds of a step in which every request runs this config
    # the group's best score were its acceptance as high as its run count leaves plausible (``_price_group``; inf
    # once the group has run in WARM_STEPS steps)
    optimistic: float

    @property
    def score(self) -> float:
        return (1.0 + self.accepted) / self.seconds


class GoodputPolicy(Policy):
    name = "goodput"
    Options = GoodputOptions
    needs_cost_model = True

    def __init__(self, cost_model: CostModel, options: GoodputOptions | None = None) -> None:
        self.cost = cost_model
        self.options = opts = options or GoodputOptions()
        self.off = SpecConfig(max_batch_size=opts.max_batch_size)
        self.groups = [_Group(method, tree, opts) for method in opts.methods
                       for tree in (opts.trees if method == "draft" else (CHAIN,))]
        self._group_of = {_shape_key(g.method, g.tree): i for i, g in enumerate(self.groups)}
        self._slot = {id(config): (i, k) for i, g in enumerate(self.groups) for k, config in g.configs.items()}
        self._widths = sorted({1} | {b for t in opts.trees for b in (t.branching or ())})
        self._workloads: dict[str, _Workload] = {}
        self._pending: dict[str, _Pending] = {}
        self._drafted_to: dict[str, int] = {}  # request -> output position the draft model's cache reaches
        self._catch_up_cost: dict[tuple[int, int, int], float] = {}  # (batch, bucket, catch-up) -> extra seconds
        # (batch, bucket, group, catch-up, one row drafting) -> seconds by depth
        self._draft_cost: dict[tuple[int, int, int, int, bool], list[float]] = {}
        self._verify_cost: dict[tuple[int, int, float, float], float] = {}
        # what the requests decided so far in this step make its forwards span (see ``_ride``); an observation
        # ends the step: the engine decides every request's step, runs it, then observes every request
        self._step_width = 0  # verify nodes per row
        self._step_draft = 0  # draft-model depth
        self._step_observed = True
        self._step_decided = 0  # requests decided so far in this step, this one included
        # engine steps counted on across engines: see ``_counted_on``
        self._engine_step = 0
        self._step_offset = 0

    @classmethod
    def from_options(cls, options: GoodputOptions, cost_model: CostModel) -> GoodputPolicy:
        return cls(cost_model, options)

    # -- deciding ---------------------------------------------------------------------------------------------------
    def decide(self, ctx: DecisionContext) -> SpecConfig:
        if self._step_observed:  # the first decision of a new step
            self._step_width, self._step_draft, self._step_observed, self._step_decided = 0, 0, False, 0
        self._step_decided += 1
        config = super().decide(ctx)
        unfilled = 0.0 if ctx.request_id in self._drafted_to else \
            1.0 / self._remaining(self._workload(ctx.workload), ctx)
        remember(self._pending, ctx.request_id, _Pending(config, self._match_bucket(ctx), ctx.output_len, unfilled))
        return config

    @property
    def reads_suffix_match(self) -> bool:
        return bool(self.options.match_buckets)

    def _match_bucket(self, ctx: DecisionContext) -> int | None:
        return bisect_right(self.options.match_buckets, ctx.suffix_match) if self.options.match_buckets else None

    def choose(self, ctx: DecisionContext) -> SpecConfig:
        work = self._workload(ctx.workload)
        if ctx.output_len == 0:
            work.prompts += 1
            work.prompt_tokens += ctx.prompt_len
            work.limit_tokens += ctx.max_new_tokens or 0
        work.longest = max(work.longest, ctx.output_len)
        batch = max(ctx.batch_size, 1)
        bucket = max(ctx.step_context_len, 0) // CONTEXT_BUCKET
        epoch = self._epoch(work.observations)
        unfilled = self._unfilled(work, batch)
        choice = work.choices.get((batch, bucket))
        evaluated = choice is None or choice.epoch != epoch or not _near(choice.unfilled, unfilled)
        if evaluated:
            choice = self._evaluate(work, batch, bucket, epoch, unfilled)
            work.choices[(batch, bucket)] = choice
        best, probes = choice.best, choice.probes
        catch_up = self._catch_up(ctx)
        cold = ctx.request_id not in self._drafted_to  # its draft cache is empty: the first draft pass fills it
        for group, config, gap, explore in probes:
            waited = work.step - work.last_run[group]
            if waited < gap:
                continue
            if config.method == "draft" and (cold or catch_up > 1) and not explore:
                # a draft probe also feeds what this request's draft cache lacks
                extra = self._catch_up_s(batch, bucket, self._first_draft(ctx) if cold else catch_up)
                gap += extra / best.seconds / self.options.probe_budget
            if waited >= gap and (self._step_decided >= batch or self._knows_least(work, ctx, group)):
                # One request per step probes a group: in a batch of B, B simultaneous probes would cost B times as
                # much verify work for the same evidence.
                if work.probe_step != work.step:
                    work.probe_step, work.probe_owners = work.step, {}
                if work.probe_owners.setdefault(group, ctx.request_id) == ctx.request_id:
                    return self._commit(config, work.table.fill)
        match = self._match_bucket(ctx)
        if match is None:
            return self._commit(best.config if choice.starts_draft or not cold else choice.without_draft,
                                work.table.fill)
        deviation = work.deviations.get((batch, match))
        # re-priced with the batch's choice, or else on its first use in a decision that did not re-price the batch's
        if deviation is None or deviation.against is not best.config or \
                (not evaluated and (deviation.epoch, deviation.bucket) != (epoch, bucket)):
            deviation = self._deviate(work, self._matched(work, match), best, batch, bucket, epoch)
            work.deviations[(batch, match)] = deviation
        current = catch_up <= 1 and not cold  # the draft cache lacks at most the last token
        if not deviation.drafts or current:
            return self._ride(deviation, deviation.config, current)
        if cold and not choice.starts_draft:
            return self._ride(deviation, deviation.fallback, current)
        # The draft pass also feeds what this request's draft cache lacks. Filling an empty one (the prompt and all
        # output so far) or catching up a behind one is paid once and serves the rest of the request where it drafts,
        # so a step carries the share of it that its own tokens are of that part of the expected remaining output.
        fill_s = self._catch_up_s(batch, bucket, self._first_draft(ctx) if cold else catch_up)
        remaining = max(self._remaining(work, ctx) * self._drafting_share(work, batch), 1.0)
        pick, top = deviation.fallback, deviation.fallback_rate
        for config, tokens, seconds in deviation.drafts:
            rate = tokens / (seconds + fill_s * (tokens - deviation.others_tokens) / remaining)
            if rate > top:
                pick, top = config, rate
        return self._ride(deviation, pick, current)

    def _knows_least(self, work: _Workload, ctx: DecisionContext, group: int) -> bool:
        """Whether this request's suffix-match bucket has seen ``group``'s method in no more steps than any other
        bucket with text: a due probe goes there (or to the step's last request), since the first request to decide
        may sit in the same bucket step after step and leave the others at the prior."""
        match = self._match_bucket(ctx)
        if match is None:
            return True
        method = self.groups[group].method
        own = self._matched(work, match).walks(method)
        return all(own <= table.walks(method) for m, table in work.matched.items() if work.mix.get(m, 0.0) > 0)

    def _ride(self, deviation: _Deviation, config: SpecConfig, current: bool) -> SpecConfig:
        """``config``, or a config with more expected accepted tokens that costs the step nothing: the verify forward is
        padded to the widest row and a draft-model pass runs over every row at the batch's deepest proposal, so once
        an earlier request of this step has widened them, this one may propose up to that width (a lookup, or the
        draft model if its cache is current and no deeper than the step's pass) for the price of a lookup."""
        width = self._step_width
        own = self._slot.get(id(config))  # None for off
        if width and (own is None or self.groups[own[0]].nodes[own[1]] < width):
            top = MIN_RIDE + (deviation.accepted[own[0]][0][own[1]] if own is not None else 0.0)
            for group, (accepted, priced) in zip(self.groups, deviation.accepted, strict=True):
                if group.method == "draft" and not current:
                    continue
                reach = width if group.method == "ngram" else min(width, self._step_draft)
                for k in reversed(group.ks[:priced]):  # E[a] grows with k: the deepest that fits is the group's best
                    if group.nodes[k] <= reach:
                        if accepted[k] >= top:
                            config, top = group.configs[k], accepted[k]
                        break
        return self._commit(config, deviation.fill)

    def _commit(self, config: SpecConfig, fill: float) -> SpecConfig:
        """Note what ``config`` makes this step's forwards span, for the requests deciding after this one."""
        if config.method == "draft":
            self._step_draft = max(self._step_draft, config.k)
            index, k = self._slot[id(config)]
            self._step_width = max(self._step_width, self.groups[index].nodes[k])
        elif config.method == "ngram" and fill >= SURE_FILL:  # a lookup widens the verify as far as it proposes
            self._step_width = max(self._step_width, round(config.k * fill))
        return config

    def expected_tokens_per_s(self, workload: str, config: SpecConfig, batch_size: int, context_len: int) -> float:
        """Tokens per second of one request when every request of the batch runs ``config``, priced as the batch's
        choice is (the draft model's cache fills spread over the expected output)."""
        work = self._workload(workload)
        bucket = max(context_len, 0) // CONTEXT_BUCKET
        if not config.speculative:
            return 1.0 / self._verify(batch_size, bucket, 0.0, 0.0)
        by_depth, fills = self._text_acceptance(work, config.method, config.tree, config.k)
        accepted, fill, nodes = by_depth[config.k], fills[config.k], config.tree.max_nodes(config.k)
        context = (bucket + 0.5) * CONTEXT_BUCKET
        draft_s = self.cost.draft_s(batch_size, config.k, context, config.method, config.tree)
        if config.method == "draft":  # the pass after a chain accepted in full, and the cache fills
            behind = self.cost.draft_s(batch_size, config.k, context, "draft", config.tree, catch_up=2)
            draft_s += _some_row_in_full(by_depth, config.k, batch_size) * (behind - draft_s) \
                + batch_size * (1.0 + accepted) * self._fill_s(work, batch_size, bucket) / max(work.horizon(), 1)
        verify_s = self._verify(batch_size, bucket, nodes * _widest(fill, batch_size), batch_size * nodes * fill)
        return (1.0 + accepted) / (draft_s + verify_s)

    def _epoch(self, observations: int) -> int:
        """Which pricing of the estimates is current: one per ``refresh_every`` observations, and before the first
        ``refresh_every`` one at each power of two, since early observations move the estimates most."""
        every = self.options.refresh_every
        return observations // every if observations >= every else -observations.bit_length()

    def _price_group(self, work: _Workload, batch: int, bucket: int, index: int, epoch: int,
                     unfilled: float) -> _Priced:
        """The best config of one group for the whole batch, which pays ``unfilled`` draft-cache fills per output
        token of a row."""
        group = self.groups[index]
        key = (batch, bucket, index)
        cached = work.candidates.get(key)
        if cached is None or cached[0] != epoch:
            cached = work.candidates[key] = (epoch, self._candidates(work, batch, bucket, index, epoch))
        drafting, candidates = cached[1]
        filling = self._fill_s(work, batch, bucket) * unfilled if group.method == "draft" else 0.0
        # only a group short of WARM_STEPS runs needs its optimistic score (``_evaluate``)
        doubt = 1.0 / (work.runs[index] + 1) if work.runs[index] < WARM_STEPS else 0.0
        top, top_score, top_seconds, optimistic = candidates[0], -1.0, 0.0, 0.0 if doubt else float("inf")
        for candidate in candidates:
            k, accepted, passes_s = candidate[:3]
            seconds = passes_s + (1.0 + accepted) * filling  # a step's tokens per row, each paying its share of fills
            score = (1.0 + accepted) / seconds
            if score > top_score:
                top, top_score, top_seconds = candidate, score, seconds
            if doubt:
                optimistic = max(optimistic, (1.0 + accepted + (k - accepted) * doubt) / seconds)
        top_k, top_accepted, _, nodes, proposed = top
        return _Priced(group.configs[top_k], index, top_accepted, nodes, proposed, drafting[top_k], top_seconds,
                       optimistic)

    def _candidates(self, work: _Workload, batch: int, bucket: int, index: int,
                    epoch: int) -> tuple[list[float], list[tuple[int, float, float, float, float]]]:
        """What pricing one group's candidates for the whole batch needs beside the fills, which change from step to
        step: its pass's seconds by depth, and per candidate k up to the reach, E[a], the step's seconds (draft pass
        and verify), and the draft nodes per row verified (the padding to the widest row included) and proposed."""
        group = self.groups[index]
        cached = work.acceptance[index]
        if cached is None or cached[0] != epoch:
            cached = work.acceptance[index] = (epoch, self._batch_acceptance(work, group))
        accepted, fills, reach = cached[1]
        drafting = self._drafting(batch, bucket, index, accepted)
        candidates = []
        for k in group.ks:
            widest, proposed = group.nodes[k] * _widest(fills[k], batch), group.nodes[k] * fills[k]
            candidates.append((k, accepted[k], drafting[k] + self._verify(batch, bucket, widest, batch * proposed),
                               widest, proposed))
            if k >= reach:  # the first candidate at or past the reach is the deepest priced
                break
        return drafting, candidates

    def _evaluate(self, work: _Workload, batch: int, bucket: int, epoch: int, unfilled: float) -> _Choice:
        """The best config for the whole batch, and each other group's best config with the steps to wait between
        its probes; ``unfilled``: the rows' draft-cache fills to pay, in fills per output token."""
        off_s = self._verify(batch, bucket, 0.0, 0.0)
        off = _Priced(self.off, -1, 0.0, 0.0, 0.0, 0.0, off_s, 1.0 / off_s)
        per_group = [self._price_group(work, batch, bucket, i, epoch, unfilled) for i in range(len(self.groups))]
        # a group that never ran is only probed: its estimates are still the prior
        winner = max((p for p in per_group if work.runs[p.group]), key=lambda p: p.score, default=off)
        threshold = off.score * (1.0 + self.options.margin)  # what speculation must beat
        best = winner if winner.score > threshold else off
        budget = self.options.probe_budget
        # a group that never ran but looks at least as good as the choice, draft-cache fills included, is probed
        # without waiting for the probing request's fill to pay off: the fill buys its first estimate
        probes = [(p.group, p.config, max(1.0, self._probe_loss(best, p, batch, bucket) / budget
                                          * (min(1.0, work.runs[p.group] / WARM_STEPS)
                                             if p.optimistic >= best.score else 1.0)),
                   not work.runs[p.group] and p.score >= best.score)
                  for p in per_group if p is not best]
        if best.config.method != "draft":
            return _Choice(epoch, unfilled, best, probes, True, best.config)
        # the best config without the draft model, for a request whose draft cache is empty where it does not pay
        rest = max((p for p in per_group if work.runs[p.group] and self.groups[p.group].method != "draft"),
                   key=lambda p: p.score, default=off)
        if rest.score <= threshold:
            rest = off
        starts_draft = self._draft_pays_for_fills(work, batch, bucket, epoch, max(rest.score, threshold))
        return _Choice(epoch, unfilled, best, probes, starts_draft, rest.config)

    def _draft_pays_for_fills(self, work: _Workload, batch: int, bucket: int, epoch: int, rest: float) -> bool:
        """Whether the draft model, with every row's fill spread over the expected output (what it costs once every
        request runs it), beats ``rest``: off's score with the margin and every other group's that has run."""
        steady = batch / max(work.horizon(), 1)
        return max((self._price_group(work, batch, bucket, i, epoch, steady).score for i in range(len(self.groups))
                    if work.runs[i] and self.groups[i].method == "draft"), default=0.0) > rest

    def _batch_acceptance(self, work: _Workload, group: _Group) -> tuple[list[float], list[float], int]:
        """E[a] and the n-gram fill by depth (``_text_acceptance``) up to the deepest candidate priced, and the depth
        reach of ``group``."""
        method, tables = group.method, work.matched.values()
        reach = max([work.table.observed_depth(method), *(t.observed_depth(method) for t in tables)]) + REACH
        depth = group.deepest(reach) if tables else group.max_k
        return (*self._text_acceptance(work, method, group.tree, depth), reach)

    @staticmethod
    def _text_acceptance(work: _Workload, method: str, tree: TreeShape, depth: int) -> tuple[list[float], list[float]]:
        """E[a] and the n-gram fill (the share of the depth a lookup proposes; 1 for a draft model) at depths
        0..``depth`` for a typical request of the workload: the suffix-match buckets' estimates weighted by the share
        of the text in each. (The workload's own table is biased once requests deviate by bucket: a draft model would
        be observed mostly where lookups fail.) E[a] is weighted by tokens, not by steps: a config that accepts 5
        tokens where a file is being copied passes through the copy in a fifth of the steps that off takes, so the
        share of steps spent there depends on the config; steps seen under off would price a lookup as if copying
        lasted five times longer. The fill is a share of steps, so it is weighted by the steps each bucket takes at
        that depth (by tokens, the copied stretches, where lookups propose in full, counted up to k + 1 times over:
        n-gram k=4 at HumanEval B=2 was priced 6% below its replay). Without buckets, the workload's table."""
        if not work.matched:
            table = work.table
            return table.accepted_by_depth(method, tree, depth), \
                [table.fill if method == "ngram" else 1.0] * (depth + 1)
        tables = list(work.matched.values())
        shares = [work.mix.get(m, 0.0) for m in work.matched]
        total = sum(shares)
        weights = [share / total for share in shares] if total > 0 else [1.0 / len(tables)] * len(tables)
        # a step emits 1 + E[a]: tokens per step over the text is the token-weighted harmonic mean
        steps = [[w / (1.0 + a) for a in table.accepted_by_depth(method, tree, depth, cache=False)]
                 for w, table in zip(weights, tables, strict=True)]  # tables change every observation: no caching
        per_token = [sum(column) for column in zip(*steps)]
        accepted = [1.0 / s - 1.0 for s in per_token]
        if method != "ngram":
            return accepted, [1.0] * (depth + 1)
        fills = [sum(by_depth[k] * table.fill for by_depth, table in zip(steps, tables, strict=True)) / per_token[k]
                 for k in range(depth + 1)]
        return accepted, fills

    def _catch_up(self, ctx: DecisionContext) -> int:
        """Tokens the draft model's cache lacks for this request (1 if it drafted last step), rounded up to a power
        of two so that their prices stay cacheable. A request that has not drafted yet is ``cold`` in ``choose``
        and priced by ``_first_draft`` instead."""
        behind = ctx.output_len - self._drafted_to.get(ctx.request_id, -1)
        return 1 << max(behind - 1, 0).bit_length()

    @staticmethod
    def _first_draft(ctx: DecisionContext) -> int:
        """Tokens an empty draft cache lacks (the prompt and the output so far), rounded to keep prices cacheable."""
        return _fill_tokens(ctx.prompt_len + ctx.output_len)

    def _deviate(self, work: _Workload, table: AcceptanceTable, batch_best: _Priced, batch: int,
                 bucket: int, epoch: int) -> _Deviation:
        """The config for one request whose suffix-match bucket has acceptance ``table``, when the rest of the batch
        runs ``batch_best``: the one maximising the batch's tokens per second. The others keep their draft pass (at
        batch 1 there are none), so this request pays only what it adds: a deeper or extra draft-model pass, its
        n-gram lookup, its verify nodes. A draft-model choice also keeps the best choice without it, for a request
        whose draft cache is behind (``choose`` adds the catch-up)."""
        others_tokens = (batch - 1) * (1.0 + batch_best.accepted)
        others_draft_s = batch_best.draft_s if batch > 1 else 0.0
        best_method = batch_best.config.method if batch_best.config.speculative else "off"
        margin = 1.0 + self.options.margin / batch  # speculating must beat off by this
        verify, floor_nodes, own_tokens = self._verify, batch_best.nodes, others_tokens + 1.0  # the others' widest
        others_nodes = (batch - 1) * batch_best.proposed
        off_rate = own_tokens / (others_draft_s + verify(batch, bucket, floor_nodes, others_nodes))
        choice, top, fallback, fallback_top, drafts = self.off, off_rate * margin, self.off, off_rate * margin, []
        by_group = []
        for index, group in enumerate(self.groups):
            reach = max(table.observed_depth(group.method), work.table.observed_depth(group.method)) + REACH
            accepted = table.accepted_by_depth(group.method, group.tree, group.deepest(reach), cache=False)
            by_group.append((accepted, bisect_left(group.ks, reach) + 1))
            if group.method == "ngram":
                fill, lookup_s = table.fill, others_draft_s + self.cost.ngram_s
                for k in group.ks:
                    tokens = own_tokens + accepted[k]
                    own = group.nodes[k] * fill
                    rate = tokens / (lookup_s + verify(batch, bucket, max(floor_nodes, own), others_nodes + own))
                    if rate > top:
                        choice, top = group.configs[k], rate
                    if rate > fallback_top:
                        fallback, fallback_top = group.configs[k], rate
                    if k >= reach:
                        break
                continue
            others_k = batch_best.config.k if best_method == "draft" and batch > 1 else 0
            for k in group.ks:
                # a deeper draft-model pass extends the others' one; with another method it comes on top
                draft_s = self._joining_s(batch, bucket, index, k, others_draft_s, others_k)
                tokens = own_tokens + accepted[k]
                seconds = draft_s + verify(batch, bucket, max(floor_nodes, group.nodes[k]),
                                           others_nodes + group.nodes[k])
                rate = tokens / seconds
                if rate > top:
                    choice, top = group.configs[k], rate
                drafts.append((group.configs[k], tokens, seconds, rate))
                if k >= reach:
                    break
        if choice.method != "draft":
            drafts = []
        return _Deviation(epoch, bucket, batch_best.config, choice,
                          [(c, tokens, seconds) for c, tokens, seconds, rate in drafts if rate > fallback_top],
                          fallback, fallback_top, others_tokens, by_group, table.fill)

    @staticmethod
    def _remaining(work: _Workload, ctx: DecisionContext) -> float:
        """Output tokens a running request is expected still to emit: what the workload's expected output runs
        beyond it, and at least what it has emitted so far (a request that has run long tends to run longer), but
        never past its token limit."""
        output = ctx.output_len
        remaining = max(work.horizon() - output, output)
        if ctx.max_new_tokens is not None:
            remaining = min(remaining, ctx.max_new_tokens - output)
        return float(max(remaining, 1))

    @staticmethod
    def _drafting_share(work: _Workload, batch: int) -> float:
        """The share of the workload's text in suffix-match buckets where a request would run the draft model, fills
        aside (or that no request has priced yet). Only those stretches pay a fill or catch-up back: elsewhere the
        request looks up or stays off, and its draft cache falls behind again."""
        total = drafting = 0.0
        for match, share in work.mix.items():
            total += share
            deviation = work.deviations.get((batch, match))
            if deviation is None or deviation.drafts:
                drafting += share
        return drafting / total if total > 0 else 1.0

    def _fill_s(self, work: _Workload, batch: int, bucket: int) -> float:
        """Seconds of filling a request's empty draft cache with the workload's mean prompt."""
        if not work.prompts:
            return 0.0
        prompt = -(-work.prompt_tokens // work.prompts)  # the mean prompt, rounded up
        return self._catch_up_s(batch, bucket, _fill_tokens(prompt))

    @staticmethod
    def _unfilled(work: _Workload, batch: int) -> float:
        """The draft-cache fills the batch's choice pays, per output token of a row: the rows of the last step whose
        caches are still empty, each over its own expected remaining output (a fill already paid is sunk, and one
        paid near a request's end has few tokens to pay it back), and a new request's over the expected output for
        each row that has ended or been added since."""
        new_rows = batch if work.unfilled is None else max(batch - work.unfilled_batch, 0)
        return (work.unfilled or 0.0) + new_rows / max(work.horizon(), 1)

    def _catch_up_s(self, batch: int, bucket: int, catch_up: int) -> float:
        """Extra seconds of a draft pass when one request's draft cache lacks ``catch_up`` tokens: its first forward
        feeds them padded across the batch, or a row far behind catches up in a forward of its own."""
        key = (batch, bucket, catch_up)
        value = self._catch_up_cost.get(key)
        if value is None:
            context = (bucket + 0.5) * CONTEXT_BUCKET
            if catches_up_alone(batch, catch_up):
                value = self.cost.catch_up_alone_s(catch_up, context)
            elif catch_up > 1:
                value = self.cost.draft_s(batch, 1, context, "draft", catch_up=catch_up) \
                    - self.cost.draft_s(batch, 1, context, "draft")
            else:
                value = 0.0
            self._catch_up_cost[key] = value
        return value

    def _probe_loss(self, best: _Priced, probe: _Priced, batch: int, bucket: int) -> float:
        """Time lost, in steps of ``best``, by a step where one request runs ``probe`` and the rest ``best``: its
        seconds less what its tokens take at ``best``'s rate. (The share of that step's throughput lost would
        undercount a probe that makes the step several times longer.)"""
        best_tokens = 1.0 + best.accepted
        if probe.config.method == "draft":
            draft_s = self._joining_s(batch, bucket, probe.group, probe.config.k, best.draft_s,
                                      best.config.k if best.config.method == "draft" else 0)
        elif probe.config.method == best.config.method:
            draft_s = max(best.draft_s, probe.draft_s)
        else:
            draft_s = best.draft_s + probe.draft_s
        seconds = draft_s + self._verify(batch, bucket, max(best.nodes, probe.nodes),
                                         (batch - 1) * best.proposed + probe.proposed)
        tokens = (batch - 1) * best_tokens + 1.0 + probe.accepted
        return max(0.0, seconds / best.seconds - tokens / (batch * best_tokens))

    def _drafting(self, batch: int, bucket: int, index: int, accepted: list[float]) -> list[float]:
        """Seconds of the batch's draft pass by depth (up to the depths ``accepted`` prices) when every request runs
        the group's config of that depth: for the draft model, its first forward feeds two tokens per row whenever
        some row accepted its whole chain last step, one otherwise."""
        once = self._draft(batch, bucket, index)
        if self.groups[index].method != "draft":
            return once
        twice = self._draft(batch, bucket, index, catch_up=2)
        return [once[k] + _some_row_in_full(accepted, k, batch) * (twice[k] - once[k]) for k in range(len(accepted))]

    def _draft(self, batch: int, bucket: int, index: int, catch_up: int = 1, alone: bool = False) -> list[float]:
        """Seconds of the group's pass by depth with every row of the batch drafting, or only one (``alone``: the
        forwards still span the batch, the head runs over that row only)."""
        key = (batch, bucket, index, catch_up, alone)
        value = self._draft_cost.get(key)
        if value is None:
            group = self.groups[index]
            value = self.cost.draft_s_by_depth(batch, group.max_k, (bucket + 0.5) * CONTEXT_BUCKET, group.method,
                                               group.tree, catch_up, (group.max_k,) if alone else None)
            self._draft_cost[key] = value
        return value

    def _joining_s(self, batch: int, bucket: int, index: int, k: int, others_s: float, others_k: int) -> float:
        """Draft seconds of a step in which one request drafts depth ``k`` with the draft-model group ``index`` and
        the others' drafting takes ``others_s`` (a draft-model pass of depth ``others_k``, or 0 for none): a pass of
        its own, or the forwards past the others' depth, with its logits alone."""
        alone = self._draft(batch, bucket, index, alone=True)
        if not others_k:
            return others_s + alone[k]
        return others_s + max(0.0, alone[k] - alone[others_k])

    def _verify(self, batch: int, bucket: int, nodes: float, proposed: float) -> float:
        """Seconds of a step's verify forward with ``nodes`` draft nodes per request (the batch padded to its widest
        row) of which the batch proposed ``proposed`` in all (the LM head runs over those), plus the engine's
        per-step overhead (every step pays it, so it favours configs that emit more tokens per step)."""
        # the batch's nodes in quarter tokens keep the cache small
        total, head = round(batch * nodes * 4) / 4, round(min(proposed, batch * nodes) * 4) / 4
        key = (batch, bucket, total, head)
        value = self._verify_cost.get(key)
        if value is None:
            value = self.cost.verify_s(batch, batch + total, (bucket + 0.5) * CONTEXT_BUCKET, batch + head) \
                + self.cost.overhead_s(batch)
            self._verify_cost[key] = value
        return value

    # -- observing --------------------------------------------------------------------------------------------------
    def overridden(self, request_id: str, config: SpecConfig) -> None:
        pending = self._pending.get(request_id)
        if pending is not None:
            self._pending[request_id] = _Pending(config, pending.match, pending.output_len, pending.unfilled)

    def observe(self, stats: StepStats) -> None:
        self._step_observed = True
        pending = self._pending.pop(stats.request_id, None)
        decided, match = (pending.config, pending.match) if pending is not None else (None, None)
        if pending is not None and stats.method == "draft" and stats.draft_tokens > 0:
            # the draft's cache now holds the tokens so far and the accepted nodes it was fed (all but the deepest)
            remember(self._drafted_to, stats.request_id,
                     pending.output_len + min(stats.accepted_tokens, max(stats.k - 1, 0)))
        work = self._workload(stats.workload)
        work.observations += 1
        step = self._counted_on(stats.step)  # counted on, steps never go back
        if step != work.step:  # the step's first observation
            work.step, work.unfilled, work.unfilled_batch = step, 0.0, stats.batch_size
        if stats.finished:
            work.unfilled += 1.0 / max(work.horizon(), 1)
        elif pending is not None and stats.request_id not in self._drafted_to:
            work.unfilled += pending.unfilled
        work.finished += stats.finished
        if match is not None:
            # The text's shares are a property of the workload: remembered over about 1 / decay engine steps at any
            # batch size. (Per observation, at batch 16 that memory would be about one step, and a step in which
            # many requests copy would swing the batch's estimate to a lookup for everyone.)
            weight = max(self.options.decay / max(stats.batch_size, 1), 1.0 / work.observations)
            work.mix.setdefault(match, 0.0)
            for m, share in work.mix.items():
                work.mix[m] = share + weight * (stats.emitted_tokens * (m == match) - share)
        tables = [work.table] if match is None else [work.table, self._matched(work, match)]
        ran = self._fold(tables, stats, decided)
        if ran is not None:
            self._ran(work, *ran, step)
        last = len(self.groups) - 1
        for index, cached in enumerate(work.acceptance):
            # group i for the epoch that starts ``last - i`` observations from now: one group per observation
            epoch = self._epoch(work.observations + last - index)
            if cached is None or cached[0] != epoch:
                work.acceptance[index] = (epoch, self._batch_acceptance(work, self.groups[index]))
                break

    def _counted_on(self, step: int) -> int:
        """``step`` counted on from the last engine's: an engine counts its steps from 1, so a step below the last one
        seen is a new engine's (this policy reused by another engine or replay). Without the offset, the steps of the
        groups' last runs would lie ahead of every step the new engine reports, and no probe would fall due until it
        had run as many steps as the last one."""
        if step < self._engine_step:
            self._step_offset += self._engine_step
        self._engine_step = step
        return step + self._step_offset

    def _fold(self, tables: list[AcceptanceTable], stats: StepStats,
              decided: SpecConfig | None) -> tuple[str, TreeShape] | None:
        """Fold one step into ``tables``; the (method, tree) it ran, or None if it tells nothing about a group."""
        if stats.draft_tokens <= 0:
            # The engine reports a step whose drafter proposed nothing as "off"; only the decision tells them apart.
            # Only a lookup finds nothing: a draft model always proposes unless the request's last token left no
            # room to, which says nothing about acceptance.
            asked = stats.method if stats.method != "off" else (decided.method if decided is not None else "off")
            if asked != "ngram" or asked not in self.options.methods:
                return None
            tree = decided.tree if decided is not None and decided.method == asked else CHAIN
            for table in tables:
                table.update(asked, tree.branching_at(1), 1, 0.0)  # asked to speculate, proposed nothing: a miss
                table.observe_fill(0.0)
            return asked, tree
        method = stats.method
        if method not in self.options.methods:
            return None
        tree = self._tree_of(stats, decided)
        if tree is None:
            return None
        window = stats.k
        lookup = method == "ngram" and decided is not None and decided.method == "ngram"
        if lookup:
            window = decided.k  # a lookup that came up short missed the depths it did not propose
        stopped = stats.emitted_tokens == stats.accepted_tokens  # an accepted stop token ends the walk
        for table in tables:
            if lookup:
                table.observe_fill(stats.draft_tokens / max(window, 1))
            table.observe_walk(method, tree, stats.accepted_tokens, window, stopped)
        return method, tree

    def _ran(self, work: _Workload, method: str, tree: TreeShape, step: int) -> None:
        group = self._group_of.get(_shape_key(method, tree))
        if group is not None and step > work.last_run[group]:
            work.last_run[group] = step
            work.runs[group] += 1

    @staticmethod
    def _tree_of(stats: StepStats, decided: SpecConfig | None) -> TreeShape | None:
        """The shape the step ran: the decided one if the stats fit it, a chain if they look like one."""
        if decided is not None and decided.method == stats.method and decided.tree.top_k is None \
                and (stats.k if decided.tree.branching is None else decided.tree.max_nodes(stats.k)) \
                == stats.draft_tokens:
            return decided.tree
        if stats.draft_tokens <= stats.k:  # a chain (an n-gram chain may propose fewer tokens than asked)
            return CHAIN
        return None

    def _workload(self, workload: str) -> _Workload:
        work = self._workloads.get(workload)
        if work is None:
            work = _Workload(self._table(), len(self.groups))
            self._workloads[workload] = work
        return work

    def _table(self) -> AcceptanceTable:
        return AcceptanceTable(self.options.methods, self._widths, self.options.prior, self.options.decay,
                               depth=max(self.options.ks))

    def _matched(self, work: _Workload, match: int) -> AcceptanceTable:
        """The acceptance table of one suffix-match bucket of a workload."""
        table = work.matched.get(match)
        if table is None:
            table = self._table()
            work.matched[match] = table
        return table

    def acceptance(self, workload: str, method: str, width: int = 1) -> list[float]:
        """Conditional acceptance now assumed at depths 1..max(ks) (for inspection and tests)."""
        return self._workload(workload).table.estimates(method, width)
