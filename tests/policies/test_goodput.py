from __future__ import annotations

import math
import random

import pytest

from engine.config import SpecConfig, TreeShape
from engine.policy import DecisionContext
from engine.stats import StepStats
from policies.cost_model import uniform_grid
from policies.goodput import GoodputOptions, GoodputPolicy
from policies.static import StaticPolicy
from tests.policies.synthetic import BATCHES, CONTEXTS, TOKENS, context, linear_cost, make_trace, step_stats
from tuner.replay import replay_cell

CHEAP = linear_cost()  # a 16-token verify costs ~1.4x a 1-token one
# verifying t tokens costs more than t one-token steps: no acceptance can pay for it
STEEP = CHEAP.model_copy(update={"target": uniform_grid(BATCHES, TOKENS, CONTEXTS,
                                                        lambda b, t, c: 0.02 * (b * t) ** 1.2)})


def run(policy: GoodputPolicy, steps: int, accept, batch: int = 1, start: int = 1,
        length: int = 64) -> list[SpecConfig]:
    """Decide, then observe ``accept(config)`` accepted tokens (of k proposed), for ``batch`` requests a step; each
    row's request runs ``length`` steps, then a new one takes its place."""
    decisions = []
    for step in range(start, start + steps):
        ids = [f"r{b}-{step // length}" for b in range(batch)]
        configs = [policy.decide(context(rid, batch_size=batch, output_len=step % length)) for rid in ids]
        for rid, config in zip(ids, configs):
            policy.observe(step_stats(config, accept(config), step=step, request_id=rid, batch_size=batch))
        decisions += configs
    return decisions


def probing_loss(policy: GoodputPolicy, decisions: list[SpecConfig]) -> float:
    """Mean throughput given up against off, priced with the policy's final estimates."""
    off = policy.expected_tokens_per_s("w", SpecConfig(), 1, 128)
    return sum(max(0.0, 1 - policy.expected_tokens_per_s("w", d, 1, 128) / off) for d in decisions) / len(decisions)


def test_speculates_deep_when_acceptance_is_high_and_verify_cheap():
    policy = GoodputPolicy(CHEAP, GoodputOptions(ks=(1, 2, 4, 8)))
    decisions = run(policy, 200, accept=lambda c: c.k)
    assert sum(d.k == 8 and d.speculative for d in decisions[-100:]) >= 95  # the rest: probes of the other method


def test_turns_off_when_acceptance_is_near_zero():
    policy = GoodputPolicy(CHEAP)
    decisions = run(policy, 400, accept=lambda c: 0)
    assert sum(not d.speculative for d in decisions[-200:]) > 0.75 * 200
    assert probing_loss(policy, decisions[-200:]) < 2 * 2 * policy.options.probe_budget  # two groups probed
    # probing the draft model fills an empty draft cache (about a step's time here), so it is rarer: one probe
    # every two requests or so; a few misses take the prior down
    assert policy.acceptance("w", "draft")[0] < policy.options.prior / 3


def test_turns_off_when_verification_is_expensive():
    policy = GoodputPolicy(STEEP)
    decisions = run(policy, 200, accept=lambda c: c.k)  # even perfect acceptance does not pay
    assert sum(not d.speculative for d in decisions[-100:]) > 0.8 * 100
    assert probing_loss(policy, decisions[-100:]) < 2 * 2 * policy.options.probe_budget
    assert policy.expected_tokens_per_s("w", SpecConfig(method="ngram", k=4), 1, 128) < \
        policy.expected_tokens_per_s("w", SpecConfig(), 1, 128)


def test_batch_size_changes_the_choice():
    # same acceptance (the prior), but verify cost grows steeply with the batch's tokens
    def first_decision(batch_size: int) -> SpecConfig:
        policy = GoodputPolicy(linear_cost(per_token=0.004), GoodputOptions(methods=("ngram",), prior=0.7))
        return policy.decide(context(batch_size=batch_size))

    assert first_decision(1).speculative
    assert not first_decision(16).speculative


def test_probes_while_off_and_turns_back_on():
    policy = GoodputPolicy(CHEAP)
    off_phase = run(policy, 300, accept=lambda c: 0)
    probes = {d.method for d in off_phase[-200:] if d.speculative}
    assert probes == {"draft", "ngram"}  # both methods are re-checked while off
    on_phase = run(policy, 300, accept=lambda c: c.k, start=301)
    assert all(d.speculative for d in on_phase[-100:])


def test_a_policy_reused_by_a_new_engine_counts_its_steps_on():
    # Each new engine counts its steps from 1 again; its probes fall due as if the first engine's steps went on. Read
    # as they come, the steps of the groups' last runs would lie ahead of the new ones, and no probe would fall due
    # until a new engine had run as many steps as the last: the policy would not see speculation pay again.
    policy = GoodputPolicy(CHEAP)
    run(policy, 300, accept=lambda c: 0)
    again = run(policy, 300, accept=lambda c: 0, start=1)
    assert sum(not d.speculative for d in again[-200:]) > 0.75 * 200
    assert probing_loss(policy, again[-200:]) < 2 * 2 * policy.options.probe_budget
    on_phase = run(policy, 300, accept=lambda c: c.k, start=1)  # and a third engine still finds it pays again
    assert all(d.speculative for d in on_phase[-100:])


def test_ngram_lookup_that_finds_nothing_is_a_miss():
    policy = GoodputPolicy(CHEAP, GoodputOptions(methods=("ngram",)))
    before = policy.acceptance("w", "ngram")[0]
    config = policy.decide(context())
    assert config.method == "ngram"
    policy.observe(step_stats(config, 0, proposed=0))  # the engine reports it as method off, nothing proposed
    assert policy.acceptance("w", "ngram")[0] < before


def test_workloads_learn_separately():
    policy = GoodputPolicy(CHEAP)
    decided = {"code": [], "prose": []}
    for step in range(1, 200):
        for workload, accept in (("code", lambda c: c.k), ("prose", lambda c: 0)):
            config = policy.decide(context(workload, workload, output_len=step))
            policy.observe(step_stats(config, accept(config), step=step, request_id=workload, workload=workload))
            decided[workload].append(config)
    assert all(c.speculative for c in decided["code"][-50:])
    assert sum(c.speculative for c in decided["prose"][-50:]) <= 15  # probes: a cheap verify re-checks lookups often


def test_trees_win_when_the_second_choice_is_often_right():
    wide = TreeShape(branching=(4,))
    policy = GoodputPolicy(CHEAP, GoodputOptions(methods=("draft",), trees=(TreeShape(), wide), ks=(2, 4)))
    # the draft's argmax is wrong at depth 1, but the true token is always among its top 4; deeper it is right
    for step in range(1, 300):
        rid, output_len = f"r{step // 64}", step % 64  # requests of 64 tokens, one after another
        config = policy.decide(context(rid, output_len=output_len))
        if not config.speculative:
            policy.observe(step_stats(config, 0, step=step, request_id=rid))
            continue
        accepted = config.k if config.tree.branching_at(1) >= 4 else 0
        nodes = config.tree.max_nodes(config.k)
        policy.observe(StepStats(step, rid, "w", 1, 128, "draft", config.k, nodes, accepted,
                                 tuple(1 if d < accepted else 0 for d in range(config.k)), accepted + 1, 1 + nodes,
                                 1 + nodes, 0.01, 0.03, float(step)))
    choice = policy.decide(context())
    assert choice.speculative and choice.tree == wide
    # the chain, hopeless after a few misses, is re-checked only at the budget rate: a few misses in all
    assert policy.acceptance("w", "draft", width=1)[0] < 0.2 < 0.9 < policy.acceptance("w", "draft", width=4)[0]


def test_in_a_batch_one_request_probes_a_group_per_step_and_draft_probes_are_rarer():
    batch, length = 8, 24  # requests of 24 tokens, one after another in each row
    policy = GoodputPolicy(CHEAP)
    steps, losses, drafted_to = [], [], {}
    off_s = CHEAP.verify_s(batch, batch, 128)
    for step in range(1, 301):
        ids = [f"r{b}-{step // length}" for b in range(batch)]
        configs = [policy.decide(context(rid, batch_size=batch, output_len=step % length)) for rid in ids]
        # what the step costs, as the engine runs it: one draft pass for the batch, fed what the drafting rows'
        # draft caches lack, and a verify padded to the widest row
        catch_up = max((step % length - drafted_to.get(rid, -1) for rid, c in zip(ids, configs)
                        if c.method == "draft"), default=1)
        draft_k = max((c.k for c in configs if c.method == "draft"), default=0)
        widest = max(c.k if c.speculative else 0 for c in configs)
        seconds = CHEAP.draft_s(batch, draft_k, 128, "draft", catch_up=catch_up) + \
            CHEAP.verify_s(batch, batch * (1 + widest), 128)
        losses.append(1 - off_s / seconds)
        for rid, config in zip(ids, configs):
            if config.method == "draft":
                drafted_to[rid] = step % length
            policy.observe(step_stats(config, 0, step=step, request_id=rid, batch_size=batch))
        steps.append(configs)
    for configs in steps[-200:]:  # off is the choice by now: whatever speculates is a probe
        for method in ("draft", "ngram"):
            assert sum(c.method == method and c.speculative for c in configs) <= 1
    late = [c for configs in steps[-200:] for c in configs if c.speculative]
    # a draft probe costs the whole batch a draft pass, an n-gram lookup only its own request
    assert 0 < sum(c.method == "draft" for c in late) < sum(c.method == "ngram" for c in late)
    # what the probes cost the batch: within the budget of the two groups (x2 slack)
    assert sum(losses[-200:]) / 200 < 2 * 2 * policy.options.probe_budget


def test_k_grows_step_by_step_from_what_was_observed():
    policy = GoodputPolicy(CHEAP, GoodputOptions(methods=("draft",)))
    decisions = run(policy, 300, accept=lambda c: c.k)
    first = next(d for d in decisions if d.speculative)
    assert first.k <= 2  # nothing observed yet: no jump to k=16 on the prior
    ks = [d.k for d in decisions if d.speculative]
    assert all(b <= max(ks[:i + 1]) + 4 for i, b in enumerate(ks[1:]))  # never past the reach of what ran before
    assert ks[-1] == 16  # full acceptance on a cheap verify: it gets to the deepest candidate


def test_a_step_is_priced_at_the_batch_longest_context():
    # verify cost grows steeply with context: a short request in a batch with a long one must price the long one
    steep_context = CHEAP.model_copy(update={"target": uniform_grid(BATCHES, TOKENS, CONTEXTS,
                                                                    lambda b, t, c: 0.02 + 0.00002 * b * t * c)})

    def decision(ctx: DecisionContext) -> SpecConfig:
        policy = GoodputPolicy(steep_context, GoodputOptions(methods=("ngram",), prior=0.5))
        # n-gram has run once (a group that never ran is only probed), accepting as the prior assumes
        policy.observe(step_stats(SpecConfig(method="ngram", k=2), 1, request_id="earlier", batch_size=4))
        return policy.decide(ctx)

    assert decision(context("a", batch_size=4, context_len=64)).speculative
    assert not decision(context("b", batch_size=4, context_len=64, batch_context_len=4096)).speculative


def test_step_overhead_favours_tokens_per_step():
    # a verify curve on which n-gram k=4 at 35% acceptance loses to off, until each step also pays a fixed overhead
    cost = linear_cost(per_token=0.004)
    heavy = cost.model_copy(update={"step_overhead_s": (0.2,) * len(cost.target.batch_sizes)})
    options = GoodputOptions(methods=("ngram",), ks=(4,), prior=0.35)
    assert not GoodputPolicy(cost, options).decide(context()).speculative
    assert GoodputPolicy(heavy, options).decide(context()).speculative



def test_a_request_continuing_a_long_match_copies_while_one_writing_new_text_does_not():
    """One workload, two kinds of position: where the text's end already occurred 9 tokens long, a lookup's
    continuation is always right; where the last token is new, the lookup finds nothing and the draft model is always
    wrong. Per suffix-match bucket the policy copies deep in the first and stays off in the second; pooled into one
    estimate, neither would be clear."""
    policy = GoodputPolicy(CHEAP, GoodputOptions(ks=(1, 2, 4, 8)))
    copying, fresh = [], []
    for step in range(1, 301):
        configs = [policy.decide(context("copy", batch_size=2, output_len=step, suffix_match=9)),
                   policy.decide(context("new", batch_size=2, output_len=step, suffix_match=0))]
        copy_accepts = configs[0].k if configs[0].method == "ngram" else 0
        policy.observe(step_stats(configs[0], copy_accepts, step=step, request_id="copy", batch_size=2))
        policy.observe(step_stats(configs[1], 0, step=step, request_id="new", batch_size=2,
                                  proposed=0 if configs[1].method == "ngram" else None))
        copying.append(configs[0])
        fresh.append(configs[1])
    assert sum(c.method == "ngram" and c.k == 8 for c in copying[-100:]) >= 90
    assert sum(not c.speculative for c in fresh[-100:]) >= 90


def test_a_due_probe_goes_to_the_request_whose_suffix_match_bucket_has_seen_the_group_least():
    """The request deciding first writes new text (its lookups find nothing), the second continues a long match (its
    lookups are always right). At a prior of 0.04 no lookup pays or rides on another's (a ride must add 0.05 expected
    tokens) until its bucket has observed lookups, so only probes teach the copying bucket. Taken by whichever
    request decides first, every probe would land in the new text's bucket, and the copying request would never
    copy."""
    policy = GoodputPolicy(CHEAP, GoodputOptions(ks=(1, 2, 4, 8), methods=("ngram",), prior=0.04))
    copying = []
    for step in range(1, 301):
        fresh = policy.decide(context("new", batch_size=2, output_len=step, suffix_match=0))
        copy = policy.decide(context("copy", batch_size=2, output_len=step, suffix_match=9))
        policy.observe(step_stats(fresh, 0, step=step, request_id="new", batch_size=2,
                                  proposed=0 if fresh.speculative else None))
        policy.observe(step_stats(copy, copy.k, step=step, request_id="copy", batch_size=2))
        copying.append(copy)
    assert sum(c.method == "ngram" and c.k == 8 for c in copying[-100:]) >= 90


def test_a_draft_step_capped_to_nothing_by_the_token_limit_is_not_a_miss():
    policy = GoodputPolicy(CHEAP, GoodputOptions(methods=("draft",)))
    policy.decide(context(output_len=0))
    first = SpecConfig(method="draft", k=4)
    policy.overridden("r0", first)  # the request runs the draft model whatever goodput chose, filling its cache
    policy.observe(step_stats(first, first.k))
    before = policy.acceptance("w", "draft")[0]
    config = policy.decide(context(output_len=first.k + 1))
    assert config.method == "draft"
    policy.observe(step_stats(config, 0, proposed=0))  # one token left: the engine drafted nothing, reports off
    assert policy.acceptance("w", "draft")[0] == before


def test_a_batch_lookup_is_priced_by_the_share_of_text_copied_not_of_steps():
    """Each request's text alternates 16 tokens being copied (a lookup's continuation is right) and 16 new ones (the
    lookup finds nothing). Under off, half the steps are in copies; a lookup of 4 passes a copy in a fifth of the
    steps, so it emits 32 tokens in 3.2 + 16 steps: 1.67 a step. On this verify curve a batch of 8 verifying 5
    tokens each costs twice a plain step, so off wins; weighting the buckets by steps seen under off would price the
    lookup at 3 tokens a step and copy."""
    cost = linear_cost(per_token=0.000917)  # at B=8, 40 verified tokens cost 2x 8
    policy = GoodputPolicy(cost, GoodputOptions(methods=("ngram",), ks=(4,)))
    region, positions, decisions = 16, [7 * row for row in range(8)], []
    for step in range(1, 401):
        copying = [p % (2 * region) < region for p in positions]
        configs = [policy.decide(context(f"r{row}", batch_size=8, output_len=p, suffix_match=9 if copy else 0))
                   for row, (p, copy) in enumerate(zip(positions, copying))]
        for row, (config, copy) in enumerate(zip(configs, copying)):
            left = region - positions[row] % region  # tokens to the end of this copy or new stretch
            accepted = min(config.k, left - 1) if copy and config.speculative else 0
            policy.observe(step_stats(config, accepted, step=step, request_id=f"r{row}", batch_size=8,
                                      proposed=None if copy else 0))
            positions[row] += accepted + 1
        decisions += configs
    assert sum(not c.speculative for c in decisions[-800:]) >= 0.9 * 800


def test_a_request_starts_the_draft_model_only_if_its_expected_output_pays_for_filling_the_draft_cache():
    """The engine fills a request's draft cache at its first draft pass, feeding it the whole prompt. Here that fill
    costs about three target steps, while drafting (by the prior's acceptance) beats off once the cache is filled.
    In a workload whose requests emit 4 tokens a new request never earns the fill back and stays off; in one whose
    requests emit 400 it drafts from its first step. (The first request of each knows no mean output yet.)"""
    cost = linear_cost(draft_base=0.002, draft_per_token=0.001)  # filling 64 prompt tokens: 0.066 s, a step 0.02 s
    policy = GoodputPolicy(cost, GoodputOptions(methods=("draft",), ks=(2, 4)))
    firsts: dict[str, list[SpecConfig]] = {"short": [], "long": []}
    for workload, length in (("short", 4), ("long", 400)):
        for request in range(6):
            rid, emitted, step = f"{workload}-{request}", 0, 1000 * (request + 1)
            while emitted < length:
                config = policy.decide(context(rid, workload=workload, output_len=emitted))
                if emitted == 0:
                    firsts[workload].append(config)
                stats = step_stats(config, config.k, step=step, request_id=rid, workload=workload)
                policy.observe(stats)
                emitted, step = emitted + stats.emitted_tokens, step + 1
    assert [c.speculative for c in firsts["short"]] == [False] * 6
    assert [c.method for c in firsts["long"][1:]] == ["draft"] * 5


def test_until_a_request_ends_a_draft_cache_fill_is_spread_over_the_token_limit():
    """As above, but every request states a 400-token limit. Before any request has ended, the policy expects a
    request to reach its limit, so the first request of each workload drafts from its first step (knowing only the
    outputs seen so far, 0 tokens, it priced the fill as if requests ended at once). Once a short request has ended,
    the outputs seen decide again: later short requests stay off, long ones draft."""
    cost = linear_cost(draft_base=0.002, draft_per_token=0.001)
    policy = GoodputPolicy(cost, GoodputOptions(methods=("draft",), ks=(2, 4)))
    firsts: dict[str, list[SpecConfig]] = {"short": [], "long": []}
    for workload, length in (("short", 4), ("long", 400)):
        for request in range(6):
            rid, emitted, step = f"{workload}-{request}", 0, 1000 * (request + 1)
            while emitted < length:
                config = policy.decide(context(rid, workload=workload, output_len=emitted, max_new_tokens=400))
                if emitted == 0:
                    firsts[workload].append(config)
                accepted = min(config.k, length - emitted - 1)
                stats = step_stats(config, accepted, step=step, request_id=rid, workload=workload,
                                   finished=emitted + accepted + 1 >= length)
                policy.observe(stats)
                emitted, step = emitted + stats.emitted_tokens, step + 1
    assert [c.method for c in firsts["long"]] == ["draft"] * 6
    assert firsts["short"][0].method == "draft"
    assert [c.speculative for c in firsts["short"][1:]] == [False] * 5


def test_a_draft_cache_fill_is_spread_only_over_the_text_where_the_request_would_draft():
    """Requests alternate copied stretches (a lookup of 8 is always right, so they copy) and new text (lookups find
    nothing; the draft model gets one token right per step, about 1.5x off once its cache is filled). Filling a
    request's draft cache (its 64-token prompt) costs about 12 plain steps, and only the new text pays it back. Where
    new text is 95% of the output a request starts the draft model on its first step; where it is 5%, the fill would
    be spread over about 20 drafting tokens, so the request stays off there. (Spread over all 400 tokens of the
    request, as if it drafted to its end, the fill looked worth it in both.)"""
    cost = linear_cost(draft_base=0.002, draft_per_token=0.004)  # the fill: 0.26 s; a plain step: 0.021 s
    policy = GoodputPolicy(cost, GoodputOptions(ks=(1, 2, 8)))
    length, period, step = 400, 100, 0
    firsts: dict[str, list[SpecConfig]] = {"copying": [], "writing": []}
    for workload, new_text in (("copying", 5), ("writing", 95)):
        for request in range(8):
            rid, emitted = f"{workload}-{request}", 0
            while emitted < length:
                fresh = emitted % period < new_text
                left = (new_text if fresh else period) - emitted % period  # tokens to the end of this stretch
                left = min(left, length - emitted)
                config = policy.decide(context(rid, workload=workload, output_len=emitted,
                                               suffix_match=0 if fresh else 9, max_new_tokens=length))
                if emitted == 0:
                    firsts[workload].append(config)
                if not config.speculative:
                    accepted, proposed = 0, None
                elif fresh:
                    accepted = min(1, left - 1) if config.method == "draft" else 0
                    proposed = None if config.method == "draft" else 0
                else:
                    accepted, proposed = min(config.k, left - 1), None
                step += 1
                stats = step_stats(config, accepted, step=step, request_id=rid, workload=workload, proposed=proposed,
                                   finished=emitted + accepted + 1 >= length)
                policy.observe(stats)
                emitted += stats.emitted_tokens
    assert [c.method for c in firsts["writing"][2:]] == ["draft"] * 6
    assert all(c.method != "draft" for c in firsts["copying"][2:])


def test_probes_that_stretch_a_large_batch_step_are_spaced_by_the_time_they_lose():
    # at batch 16 every extra token per row costs most of a step: one request's lookup of k tokens makes the
    # verify k + 1 tokens wide for all 16 rows, so a probe step takes up to twice a step's time
    batch, length = 16, 48
    cost = linear_cost(per_token=0.004)
    policy = GoodputPolicy(cost, GoodputOptions(methods=("ngram",)))
    off_s = cost.verify_s(batch, batch, 128)
    lost = []
    for step in range(1, 1201):
        ids = [f"r{b}-{step // length}" for b in range(batch)]
        configs = [policy.decide(context(rid, batch_size=batch, output_len=step % length)) for rid in ids]
        widest = max(c.k if c.speculative else 0 for c in configs)
        lost.append(cost.verify_s(batch, batch * (1 + widest), 128) / off_s - 1)  # nothing is accepted
        for rid, config in zip(ids, configs):
            policy.observe(step_stats(config, 0, step=step, request_id=rid, batch_size=batch))
    late = lost[-600:]
    assert max(late) > 0.5  # a probe loses more than half a step
    # the time the probes lose stays near the budget (x1.5 slack: the first probes wait less); counting a probe's
    # loss as a share of its own step's throughput, it came to 1.7x
    assert sum(late) / len(late) < 1.5 * policy.options.probe_budget


def test_a_group_that_never_ran_is_probed_before_the_batch_runs_it():
    # the prior alone says n-gram pays for the whole batch; it runs in one request first, then, confirmed, in all
    policy = GoodputPolicy(CHEAP, GoodputOptions(methods=("ngram",), prior=0.9, match_buckets=()))
    batch, first = 8, []
    for step in range(1, 5):
        ids = [f"r{b}" for b in range(batch)]
        configs = [policy.decide(context(rid, batch_size=batch, output_len=step)) for rid in ids]
        for rid, config in zip(ids, configs):
            policy.observe(step_stats(config, config.k, step=step, request_id=rid, batch_size=batch))
        first.append(sum(c.speculative for c in configs))
    assert first[:2] == [0, 1]  # nothing ran yet, then one request probes
    assert first[2:] == [batch, batch]


def test_a_request_rides_free_on_a_step_widened_by_an_earlier_request():
    """A copying request widens the step's verify to 8 tokens a row; a request whose lookups are right a fifth of
    the time would not widen it for itself (speculation must beat off by half here), but once the verify is that wide
    its own lookup costs the step nothing, so it proposes too: only when it decides after the copying request."""
    policy = GoodputPolicy(CHEAP, GoodputOptions(ks=(1, 2, 4, 8), methods=("ngram",), margin=1.0))
    after, before = [], []
    for step in range(1, 401):
        copy = context("copy", batch_size=2, output_len=step, suffix_match=9)
        rare = context("rare", batch_size=2, output_len=step, suffix_match=1)
        order = [copy, rare] if step % 2 else [rare, copy]
        configs = {ctx.request_id: policy.decide(ctx) for ctx in order}
        policy.observe(step_stats(configs["copy"], configs["copy"].k, step=step, request_id="copy", batch_size=2))
        policy.observe(step_stats(configs["rare"], int(step % 5 == 0), step=step, request_id="rare", batch_size=2))
        (after if step % 2 else before).append((configs["copy"], configs["rare"]))
    assert all(c.method == "ngram" and c.k == 8 for c, _ in after[-100:] + before[-100:])
    assert all(r.method == "ngram" and r.k <= 8 for _, r in after[-100:])
    assert all(not r.speculative for _, r in before[-100:])


def test_a_groups_first_probe_does_not_wait_for_the_probing_requests_draft_cache_fill_to_pay_off():
    """Filling a request's empty draft cache costs about three steps here; charged whole to the probe, the draft
    model's first probe would wait 3 / probe_budget steps. It looks as good as the batch's choice on the prior, so its
    first probe runs at once and the estimates it brings decide the rest."""
    cost = linear_cost(draft_base=0.002, draft_per_token=0.001)
    policy = GoodputPolicy(cost, GoodputOptions(ks=(2, 4)))
    decisions = run(policy, 40, accept=lambda c: c.k if c.method == "draft" else 0, batch=2, length=400)
    first = next(i for i, d in enumerate(decisions) if d.method == "draft")
    assert first < 2 * 4  # within the first steps of a batch of 2
    assert all(d.method == "draft" for d in decisions[-10:])


def test_a_request_behind_on_the_draft_model_catches_up_while_the_batch_drafts():
    """A request held off the draft model for some steps (here: overridden, as a requested config or a cooldown
    would) finds its draft cache behind. Its catch-up feeds the missing tokens once and then serves every later step,
    so it is spread over the request's expected remaining output; charged whole to one step it kept the request off
    the draft model for good, more behind each step."""
    cost = linear_cost(draft_base=0.001, draft_per_token=0.001)  # 10 missing tokens: most of a step
    policy = GoodputPolicy(cost, GoodputOptions(methods=("draft",), ks=(2, 4)))
    emitted = {"a": 0, "b": 0}
    decisions = {"a": [], "b": []}
    for step in range(1, 81):
        for rid in ("a", "b"):
            # 4-token prompts: filling an empty draft cache is cheap, catching up after steps off is not
            config = policy.decide(DecisionContext(rid, "w", 2, 128, 4, emitted[rid], 0, SpecConfig(), None, None, 0))
            if rid == "a" and 30 <= step < 40:
                config = SpecConfig()
                policy.overridden(rid, config)
            stats = step_stats(config, config.k, step=step, request_id=rid, batch_size=2)
            policy.observe(stats)
            emitted[rid] += stats.emitted_tokens
            decisions[rid].append(config)
    assert decisions["a"][25].method == decisions["b"][25].method == "draft"
    assert all(d.method == "draft" for d in decisions["a"][-20:])


def test_the_batch_prices_the_draft_model_with_every_requests_prompt_fill():
    """The draft model accepts all 4 of its tokens, lookups half; per step the draft model is the better choice
    (10 tokens in 0.044 s against 6 in 0.029 s at batch 2). But each request's first draft pass feeds its 640-token
    prompt to the draft cache (0.26 s) and emits only 48 tokens: with that fill the draft model makes about 100
    tokens/s, lookups about 150. The batch's choice carries the fills, so requests keep to lookups; priced on its
    passes alone, every request would start the draft model."""
    cost = linear_cost(draft_base=0.002, draft_per_token=0.0004)
    policy = GoodputPolicy(cost, GoodputOptions(ks=(2, 4), match_buckets=()))
    batch, length, emitted, started = 2, 48, {}, set()
    rows = [0] * batch
    for step in range(1, 601):
        ids = []
        for b in range(batch):
            if emitted.get(f"r{b}-{rows[b]}", 0) >= length:
                rows[b] += 1
            ids.append(f"r{b}-{rows[b]}")
        configs = [policy.decide(DecisionContext(rid, "w", batch, 1024, 640, emitted.get(rid, 0), 0, SpecConfig(),
                                                 None, None, 0)) for rid in ids]
        for rid, config in zip(ids, configs):
            stats = step_stats(config, config.k if config.method == "draft" else config.k // 2, step=step,
                               request_id=rid, batch_size=batch)
            policy.observe(stats)
            emitted[rid] = emitted.get(rid, 0) + stats.emitted_tokens
            if config.method == "draft":
                started.add(rid)
    assert len(started) <= 0.1 * len(emitted)


def test_a_group_that_could_not_pay_even_if_it_hit_waits_the_full_probe_gap_but_is_still_rechecked():
    # batch 16, where one request's lookup widens every row's verify: after a miss, even the optimistic estimate
    # (misses so far, every untried depth a hit) loses to off, so the group gets none of the quicker early re-checks
    # a group with little evidence gets; it is still re-checked at the budget rate, in case the traffic changes
    batch, length = 16, 48
    policy = GoodputPolicy(linear_cost(per_token=0.004), GoodputOptions(methods=("ngram",)))
    probe_steps = []
    for step in range(1, 401):
        ids = [f"r{b}-{step // length}" for b in range(batch)]
        configs = [policy.decide(context(rid, batch_size=batch, output_len=step % length)) for rid in ids]
        if any(c.speculative for c in configs):
            probe_steps.append(step)
        for rid, config in zip(ids, configs):
            policy.observe(step_stats(config, 0, step=step, request_id=rid, batch_size=batch))
    first = probe_steps[0]
    assert first <= 2  # never ran: probed at once
    assert not [s for s in probe_steps if first < s <= 100]  # the warm-up schedule re-probed at 12, 31, 59, 96
    assert len([s for s in probe_steps if s > 100]) >= 2


def test_a_lookup_that_comes_up_short_pays_the_head_only_over_what_it_proposes():
    batch, config = 4, SpecConfig(method="ngram", k=4)
    plain, headed = GoodputPolicy(CHEAP), GoodputPolicy(linear_cost(head=(0.004, 0.001)))
    for policy in (plain, headed):  # the engine runs lookups; every other one proposes 4 tokens, the rest nothing
        for step in range(1, 41):
            policy.decide(context(batch_size=batch, output_len=step))
            policy.overridden("r0", config)
            policy.observe(step_stats(config, 1, step=step, batch_size=batch, proposed=4 * (step % 2)))
    fill = headed._workloads["w"].table.fill
    assert 0.2 < fill < 0.8
    # the verify is padded to the widest row, but the head runs over the nodes the lookups proposed
    alpha = headed.acceptance("w", "ngram")
    emitted = 1 + sum(math.prod(alpha[:d]) for d in range(1, 5))
    seconds = [emitted / policy.expected_tokens_per_s("w", config, batch, 128) for policy in (plain, headed)]
    proposed = round(batch * 4 * fill * 4) / 4  # priced in quarter tokens
    assert seconds[1] - seconds[0] == pytest.approx(0.004 + 0.001 * (batch + proposed))


class Observing:
    """Runs ``config`` while ``policy`` decides beside it and learns from every step (as under a wrapper holding the
    config), at the suffix matches the replay reports."""

    reads_suffix_match = True

    def __init__(self, policy: GoodputPolicy, config: SpecConfig) -> None:
        self.policy, self.config, self.contexts = policy, config, []

    def decide(self, ctx: DecisionContext) -> SpecConfig:
        self.policy.decide(ctx)
        self.policy.overridden(ctx.request_id, self.config)
        self.contexts.append(ctx.step_context_len)
        return self.config

    def observe(self, stats: StepStats) -> None:
        self.policy.observe(stats)


def priced_and_replayed(cost, traces, config: SpecConfig, batch: int) -> tuple[float, float]:
    """``config``'s tokens/s against off's as goodput prices it after learning from its replay, and as replayed."""
    observing = Observing(GoodputPolicy(cost), config)
    replayed = replay_cell(traces, observing, cost, batch, "static").tokens_per_s \
        / replay_cell(traces, StaticPolicy(SpecConfig()), cost, batch, "static").tokens_per_s
    policy, context = observing.policy, round(sum(observing.contexts) / len(observing.contexts))
    priced = policy.expected_tokens_per_s("w", config, batch, context) \
        / policy.expected_tokens_per_s("w", SpecConfig(), batch, context)
    return priced, replayed


def test_a_draft_chain_is_priced_as_the_replay_runs_it_with_two_tokens_fed_after_a_chain_accepted_in_full():
    # feeding a draft forward is dear here, so the pass after a chain accepted in full, which feeds the deepest draft
    # token (proposed but never read by the draft model) and the bonus token, costs far more than the usual one
    cost = linear_cost(draft_per_token=0.004)
    misses = random.Random(0)  # the draft misses one token in five, independently in each request
    traces = [make_trace(range(1000 * i, 1000 * i + 160), prompt=tuple(range(100, 164)),
                         ranks=[int(misses.random() < 0.2) for _ in range(160)], request_id=f"r{i}")
              for i in range(8)]
    priced, replayed = priced_and_replayed(cost, traces, SpecConfig(method="draft", k=2), batch=2)
    assert priced == pytest.approx(replayed, rel=0.03)


def test_a_lookups_fill_is_priced_as_its_share_of_steps_not_of_text():
    # Half the text is copied (the lookup proposes 4 tokens and all are accepted: 5 tokens a step) and half is new
    # (it proposes nothing: 1 token a step), so the lookup proposes in full in one step of six. Weighted by the
    # text, the fill read 1/2 and priced three times the verify nodes the lookups propose (n-gram k=4 at
    # HumanEval B=2 priced 6% below its replay).
    policy, config = GoodputPolicy(CHEAP, GoodputOptions(decay=0.0001)), SpecConfig(method="ngram", k=4)
    for step in range(1, 601):
        copying = step % 6 == 0
        policy.decide(context(output_len=step, suffix_match=12 if copying else 0))
        policy.overridden("r0", config)
        policy.observe(step_stats(config, 4 if copying else 0, step=step, proposed=4 if copying else 0))
    accepted, fills = policy._text_acceptance(policy._workloads["w"], "ngram", config.tree, 4)
    assert fills[4] == pytest.approx(1 / 6, abs=0.02)
    assert 1 + accepted[4] == pytest.approx(10 / 6, rel=0.02)  # tokens per step over the text


def test_a_lone_draft_probe_pays_the_draft_head_over_its_own_row_only():
    # two draft heads that cost the same over one row of logits, and over 16 rows 1x and 11x that: a probe in one
    # request of 16 takes logits in its own row alone, so both space the probes alike (priced over all 16 rows, the
    # dear head waited 3.6x longer)
    base = linear_cost(head=(0.004, 0.0001))
    gaps = []
    for per_row in (0.0, 0.004):
        head = uniform_grid((1,), (1, 1024), (0,), lambda b, rows, c, per_row=per_row: 0.004 + per_row * (rows - 1))
        policy = GoodputPolicy(base.model_copy(update={"draft_head": head}), GoodputOptions(methods=("draft",)))
        for step in range(1, 41):  # the draft model, run in one request of 16 (as if the engine held it there)
            ids = [f"r{b}" for b in range(16)]
            configs = [policy.decide(context(rid, batch_size=16, output_len=step)) for rid in ids]
            configs[0] = SpecConfig(method="draft", k=1)
            policy.overridden(ids[0], configs[0])
            for rid, config in zip(ids, configs):
                policy.observe(step_stats(config, 0, step=step, request_id=rid, batch_size=16))
        choice = [*policy._workloads["w"].choices.values()][-1]  # the latest
        assert not choice.best.config.speculative
        gaps.append([gap for _, config, gap, _ in choice.probes if config.method == "draft"])
    assert gaps[0][0] > 10
    assert gaps[1] == pytest.approx(gaps[0])


def _observe_step(policy: GoodputPolicy, ids: list[str], configs: list[SpecConfig], emitted: dict[str, int],
                  length: int, step: int) -> None:
    """Observe one engine step of ``length``-token requests in which the draft model gets every token it proposes
    accepted and a lookup one."""
    for rid, config in zip(ids, configs, strict=True):
        accepted = min(config.k if config.method == "draft" else 1, length - emitted[rid] - 1)
        stats = step_stats(config, accepted, step=step, request_id=rid, batch_size=len(ids),
                           finished=emitted[rid] + accepted + 1 >= length)
        policy.observe(stats)
        emitted[rid] += stats.emitted_tokens


def test_a_paid_draft_cache_fill_is_sunk_and_one_near_a_requests_end_is_not_paid():
    """At batch 2 the draft model accepts all 4 of its tokens and a lookup 1: the draft model makes about 170
    tokens/s against 150 for lookups, but with each request's 640-token prompt fill spread over its 48 tokens
    only about 115, and one request drafting beside a lookup about 120. Here the engine starts every request on
    the draft model: once its cache is filled, the fill is sunk and the batch keeps drafting (priced with the
    fills, it went back to lookups). A request that joins near its end (40 of 48 tokens already out) would pay a
    whole fill for 8 tokens, so it looks up instead."""
    cost = linear_cost()
    policy = GoodputPolicy(cost, GoodputOptions(ks=(2, 4)))
    batch, length, emitted, late = 2, 48, {"r0-0": 0, "r1-0": 0}, []
    rows = [0] * batch
    first_draft = SpecConfig(method="draft", k=4)
    for step in range(1, 401):
        ids = []
        for b in range(batch):
            if emitted.get(f"r{b}-{rows[b]}", 0) >= length:
                rows[b] += 1
                emitted[f"r{b}-{rows[b]}"] = 40 if rows[b] % 4 == 3 else 0  # every 4th joins near its end
            ids.append(f"r{b}-{rows[b]}")
        configs = [policy.decide(DecisionContext(rid, "w", batch, 1024, 640, emitted[rid], 0, SpecConfig(), None,
                                                 None, 0, length)) for rid in ids]
        for b, rid in enumerate(ids):
            if emitted[rid] == 0:  # a new request's first step: the engine starts it on the draft model
                configs[b] = first_draft
                policy.overridden(rid, first_draft)
            elif step > 100:
                late.append((rows[b] % 4 == 3, configs[b].method))
        _observe_step(policy, ids, configs, emitted, length, step)
    filled = [method for near_end, method in late if not near_end]
    assert filled.count("draft") >= 0.9 * len(filled)
    near_end = [method for near_end, method in late if near_end]
    assert near_end and near_end.count("draft") <= 0.2 * len(near_end)


@pytest.mark.parametrize("match_buckets", [GoodputOptions().match_buckets, ()], ids=["buckets", "no-buckets"])
def test_a_request_with_an_empty_draft_cache_does_not_join_a_draft_model_that_loses_with_every_fill_paid(
        match_buckets):
    """Four rows 12 tokens apart in their 96-token requests run the draft model with their caches filled (the
    engine started them on it). It accepts all 4 of its tokens, a lookup 1: with every cache filled the batch makes
    about 264 tokens/s drafting against 232 looking up, but with each request's 512-token prompt fill spread over its
    output only about 203. A request joining beside rows whose fills are paid pays only its own fill (about 245), so
    with sunk fills alone each newcomer joined and the batch drafted on in 99% of decisions; a newcomer now starts the
    draft model only where it wins with every request paying its fill, so the rows move to lookups as they are
    replaced. Without suffix-match buckets, the newcomer takes the batch's best config without the draft model."""
    policy = GoodputPolicy(linear_cost(), GoodputOptions(ks=(2, 4), match_buckets=match_buckets))
    batch, length, steps = 4, 96, 600
    emitted = {f"r{b}-0": 12 * b for b in range(batch)}
    rows = [0] * batch
    started = SpecConfig(method="draft", k=4)
    late = []
    for step in range(1, steps + 1):
        ids = []
        for b in range(batch):
            if emitted[f"r{b}-{rows[b]}"] >= length:
                rows[b] += 1
                emitted[f"r{b}-{rows[b]}"] = 0
            ids.append(f"r{b}-{rows[b]}")
        configs = [policy.decide(DecisionContext(rid, "w", batch, 1024, 512, emitted[rid], 0, SpecConfig(), None,
                                                 None, 0, length)) for rid in ids]
        for b, rid in enumerate(ids):
            if step == 1:
                configs[b] = started
                policy.overridden(rid, started)
            elif step > steps // 2:
                late.append(configs[b].method)
        _observe_step(policy, ids, configs, emitted, length, step)
    work = policy._workloads["w"]
    priced = {unfilled: [policy._price_group(work, batch, 1024 // 64, i, 10**6, unfilled).score for i in (0, 1)]
              for unfilled in (0.0, 1 / length, batch / length)}
    assert priced[0.0][0] > priced[1 / length][0] > 1.02 * priced[0.0][1] > priced[batch / length][0]
    assert late.count("draft") <= 0.05 * len(late)
