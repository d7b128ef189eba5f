"""The batched replay loop: continuous batching, the contexts and stats policies see, and step pricing."""

from __future__ import annotations

import pytest

from engine.config import OFF, SpecConfig
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.static import StaticPolicy
from tests.policies.synthetic import linear_cost, make_trace
from tuner.replay import (
    ReplayError,
    check_identity,
    filled,
    oracle_cell,
    prepare,
    repeated,
    replay_all,
    replay_cell,
    static_grid,
)

COST = linear_cost()
PROMPT = tuple(range(100, 170))  # 70 tokens: contexts stay inside the cost grid
RANKS = [0, 0, 1, 0, 0, 0, 0, 2, 0, 0]


def verify(batch: int, tokens: int, ctx: int) -> float:
    return 0.02 + 0.0005 * tokens + 2e-6 * batch * ctx


def draft_forward(batch: int, tokens: int, ctx: int) -> float:
    return 0.006 + 0.0002 * batch * tokens + 5e-7 * batch * ctx


class Recorder:
    """Wraps a config chooser and records every call, as a live engine's policy would see them."""

    def __init__(self, choose=lambda ctx: OFF) -> None:
        self.choose = choose
        self.contexts: list[DecisionContext] = []
        self.stats: list[StepStats] = []

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        self.contexts.append(ctx)
        return self.choose(ctx)

    def observe(self, stats: StepStats) -> None:
        self.stats.append(stats)


def test_single_request_chain_steps_and_prices():
    trace = make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS)
    policy = Recorder(lambda ctx: SpecConfig(method="draft", k=3))
    cell = replay_cell([trace], policy, COST, 1, "static")
    # depths 3, 3, 2, 1 at p = 0, 3, 7, 8 (see test_replay_outcome); context = 70 + p - 1
    expected = [(3, 2, 69), (3, 3, 72), (2, 0, 76), (1, 1, 77)]
    # the draft's first forward feeds what its cache lacks: the whole prompt on the first step (the draft cache starts
    # empty), the root, plus the deepest accepted node (never fed to the draft) after the fully accepted second step
    catch_up = [70, 1, 2, 1]
    seconds = sum(draft_forward(1, fed, ctx) + (depth - 1) * draft_forward(1, 1, ctx) + verify(1, 1 + depth, ctx)
                  for (depth, _, ctx), fed in zip(expected, catch_up))
    assert [(s.k, s.accepted_tokens, s.context_len) for s in policy.stats] == expected
    assert cell.steps == 4 and cell.emitted_tokens == 10 and cell.accepted_tokens == 6 and cell.drafts == 4
    assert cell.seconds == pytest.approx(seconds)
    assert cell.tokens_per_s == pytest.approx(10 / seconds)
    assert cell.mean_acceptance_length == pytest.approx(1 + 6 / 4)
    assert cell.config == "draft k=3 chain"


def test_every_step_pays_the_engine_overhead():
    trace = make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS)
    overhead = COST.model_copy(update={"step_overhead_s": (0.05,) * len(COST.target.batch_sizes)})
    plain = replay_cell([trace], StaticPolicy(SpecConfig(method="draft", k=3)), COST, 1, "static")
    slower = replay_cell([trace], StaticPolicy(SpecConfig(method="draft", k=3)), overhead, 1, "static")
    assert slower.steps == plain.steps
    assert slower.seconds == pytest.approx(plain.seconds + 0.05 * plain.steps)


def test_continuous_batching_and_decision_contexts():
    traces = [make_trace(range(3), prompt=PROMPT, request_id="a"), make_trace(range(5), prompt=PROMPT, request_id="b"),
              make_trace(range(1), prompt=PROMPT[:66], request_id="c")]
    policy = Recorder()
    cell = replay_cell(traces, policy, COST, 2, "off")
    seen = [(c.request_id, c.batch_size, c.output_len, c.context_len, c.request_step) for c in policy.contexts]
    assert seen == [("a", 2, 0, 69, 0), ("b", 2, 0, 69, 0), ("a", 2, 1, 70, 1), ("b", 2, 1, 70, 1),
                    ("a", 2, 2, 71, 2), ("b", 2, 2, 71, 2), ("b", 2, 3, 72, 3), ("c", 2, 0, 65, 0),
                    ("b", 1, 4, 73, 4)]
    assert [c.last for c in policy.contexts[:2]] == [None, None]
    assert policy.contexts[2].last == policy.stats[0]  # a request sees its own previous step
    assert cell.steps == 5 and cell.emitted_tokens == 9 and cell.requests == 3
    assert [s.step for s in policy.stats] == [1, 1, 2, 2, 3, 3, 4, 4, 5]
    step_seconds = [verify(2, 2, 69), verify(2, 2, 70), verify(2, 2, 71), verify(2, 2, 72), verify(1, 1, 73)]
    assert cell.seconds == pytest.approx(sum(step_seconds))
    assert policy.stats[-1].timestamp == pytest.approx(sum(step_seconds))  # the simulated clock


def test_tokens_per_s_is_the_throughput_at_the_cells_batch_size():
    """The drain after the queue empties runs below the cell's batch size: it counts in ``seconds`` (what a live run
    of these requests takes), not in ``tokens_per_s``."""
    traces = [make_trace(range(3), prompt=PROMPT, request_id="a"), make_trace(range(5), prompt=PROMPT, request_id="b")]
    cell = replay_cell(traces, Recorder(), COST, 2, "off")
    full = [verify(2, 2, 69), verify(2, 2, 70), verify(2, 2, 71)]  # then b runs alone for two steps
    assert cell.seconds == pytest.approx(sum(full) + verify(1, 1, 72) + verify(1, 1, 73))
    assert cell.tokens_per_s == pytest.approx(6 / sum(full))
    alone = replay_cell(traces[:1], Recorder(), COST, 2, "off")  # never a full batch: every step counts
    assert alone.tokens_per_s == pytest.approx(3 / alone.seconds)


def test_step_stats_match_the_engine_fields():
    trace = make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id="x", workload="code")
    policy = Recorder(lambda ctx: SpecConfig(method="draft", k=3))
    replay_cell([trace], policy, COST, 4, "static")
    first = policy.stats[0]
    assert (first.request_id, first.workload, first.batch_size, first.method) == ("x", "code", 1, "draft")
    assert first.accepted_per_position == (1, 1, 0)
    assert [(s.prompt_len, s.output_len, s.max_new_tokens) for s in policy.stats] == [(70, p, 10) for p in (0, 3, 7, 8)]
    assert (first.draft_tokens, first.verify_tokens, first.batch_verify_tokens, first.emitted_tokens) == (3, 4, 4, 3)
    # the draft cache starts empty: the first pass feeds the whole prompt
    assert first.draft_s == pytest.approx(draft_forward(1, 70, 69) + 2 * draft_forward(1, 1, 69))
    assert first.verify_s == pytest.approx(verify(1, 4, 69))


def test_mixed_methods_share_the_step():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id="d"),
              make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id="n")]
    configs = {"d": SpecConfig(method="draft", k=2), "n": SpecConfig(method="ngram", k=4)}
    policy = Recorder(lambda ctx: configs[ctx.request_id])
    replay_cell(traces, policy, COST, 2, "mixed")
    d, n = policy.stats[:2]
    assert n.method == "off" and n.draft_tokens == 0  # the lookup finds nothing in these tokens
    # the draft model drafts for the whole (padded) batch; the n-gram lookup is priced per request that ran one; the
    # verify forward is padded to the widest row (1 + 2 nodes). The draft cache starts empty and d's prompt is far
    # behind, so it catches up alone first (all but the root, which the shared pass feeds)
    assert d.draft_s == pytest.approx(draft_forward(1, 69, 69) + 2 * draft_forward(2, 1, 69) + 2e-5)
    assert d.verify_s == pytest.approx(verify(2, 2 * 3, 69))
    assert d.draft_s == n.draft_s and d.verify_s == n.verify_s


def test_the_verify_head_runs_over_the_real_nodes_only():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id="d"),
              make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id="o")]
    configs = {"d": SpecConfig(method="draft", k=3), "o": OFF}
    plain, policy = Recorder(lambda ctx: configs[ctx.request_id]), Recorder(lambda ctx: configs[ctx.request_id])
    replay_cell(traces, plain, COST, 2, "mixed")
    replay_cell(traces, policy, linear_cost(head=(0.004, 0.0001)), 2, "mixed")
    # the off row is padded to the draft row's 4 tokens, but only 4 + 1 nodes get logits
    assert policy.stats[0].verify_s == pytest.approx(plain.stats[0].verify_s + 0.004 + 0.0001 * 5)


def test_the_draft_head_runs_over_the_drafting_rows_only():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id=r) for r in ("d3", "d1", "o")]
    configs = {"d3": SpecConfig(method="draft", k=3), "d1": SpecConfig(method="draft", k=1), "o": OFF}
    plain, policy = Recorder(lambda ctx: configs[ctx.request_id]), Recorder(lambda ctx: configs[ctx.request_id])
    replay_cell(traces, plain, COST, 3, "mixed")
    replay_cell(traces, policy, linear_cost(head=(0.004, 0.0001)), 3, "mixed")

    def head(rows: int) -> float:
        return (0.004 + 0.0001 * rows) / 2  # the draft's head, half the target's here

    # three draft forwards over all three rows; logits in the two drafting rows at depth 1, then in d3's alone
    assert policy.stats[0].draft_s == pytest.approx(plain.stats[0].draft_s + head(2) + 2 * head(1))


def test_max_batch_size_applies_as_in_the_engine():
    traces = [make_trace(range(10, 10 + n), prompt=PROMPT, ranks=RANKS[:n], request_id=str(n)) for n in (2, 10, 10)]
    policy = Recorder(lambda ctx: SpecConfig(method="draft", k=3, max_batch_size=2))
    replay_cell(traces, policy, COST, 3, "capped")
    assert {s.method for s in policy.stats if s.batch_size == 3} == {"off"}
    assert {s.method for s in policy.stats if s.batch_size < 3} == {"draft"}


def test_identity_mismatch_is_refused():
    with pytest.raises(ReplayError, match="target 'other' differs from the cost model's 't'"):
        check_identity([make_trace([1], target="other")], COST)
    with pytest.raises(ReplayError, match="dtype 'fp32'"):
        check_identity([make_trace([1], dtype="fp32")], COST)
    with pytest.raises(ReplayError, match="draft 'x'"):
        check_identity([make_trace([1], ranks=[0], draft="x")], COST)


def test_policy_choosing_draft_on_ngram_traces_is_refused():
    with pytest.raises(ReplayError, match="no draft ranks"):
        replay_cell([make_trace(range(5), prompt=PROMPT)], StaticPolicy(SpecConfig(method="draft")), COST, 1, "s")


def test_oracle_is_the_best_static_config():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id=str(i)) for i in range(3)]
    best, results = oracle_cell(traces, COST, 2)
    assert len(results) == len(static_grid(traces))
    assert best.policy == "oracle"
    assert best.tokens_per_s == max(r.tokens_per_s for r in results)
    assert best.config in {r.config for r in results}
    assert not any(c.method == "draft" for c in static_grid([make_trace(range(5))]))  # no ranks, no draft configs


def test_replay_all_gives_one_cell_per_workload_batch_and_policy():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id=str(i), workload=w)
              for w in ("code", "prose") for i in range(2)]
    policies = ["static:method=draft,k=2", "heuristic"]
    cells = replay_all(traces, policies, COST, [1, 4], oracle=True)
    assert [(c.workload, c.batch_size, c.policy) for c in cells] == [
        (w, b, p) for w in ("code", "prose") for b in (1, 4) for p in (*policies, "oracle")]
    static = cells[0]
    assert static.config == "draft k=2 chain" and static.steps > 0


def test_a_cell_is_filled_with_copies_that_replay_as_recorded():
    traces = [make_trace(range(10, 20), prompt=PROMPT, ranks=RANKS, request_id=str(i)) for i in range(2)]
    cell = filled(traces, 3, waves=2)
    assert [t.trace.request_id for t in cell] == ["0#0", "1#0", "0#1", "1#1", "0#2", "1#2"]
    assert [t.trace.request_id for t in filled(prepare(traces), 1, waves=2)] == ["0", "1"]  # enough already
    static = StaticPolicy(SpecConfig(method="draft", k=2))
    alone = replay_cell(traces[:1], static, COST, 1, "static")
    copies = replay_cell(repeated(traces[:1], 3), static, COST, 1, "static")
    assert (copies.steps, copies.accepted_tokens, copies.requests) == (3 * alone.steps, 3 * alone.accepted_tokens, 3)
    assert copies.tokens_per_s == pytest.approx(alone.tokens_per_s)
    # at batch 3 the copies decode together: three rows per step
    assert replay_cell(repeated(traces[:1], 3), static, COST, 3, "static").steps == alone.steps


def test_a_workload_recorded_without_a_draft_model_replays_the_policies_on_lookups():
    traces = [make_trace([5, 6, 7, 5, 6, 7, 5, 6, 7, 5], prompt=PROMPT, request_id=str(i)) for i in range(2)]
    cells = replay_all(traces, ["goodput", "bandit", "heuristic"], COST, [2])
    assert [c.policy for c in cells] == ["goodput", "bandit", "heuristic"]
    assert all(label.startswith(("ngram", "off")) for c in cells for label in c.configs)
    with pytest.raises(ReplayError, match="no draft ranks"):
        replay_all(traces, ["heuristic:method=draft"], COST, [2])  # what a SPEC names is kept
