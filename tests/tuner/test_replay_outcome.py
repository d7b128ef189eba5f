"""Replay maths on hand-made traces: exact accepted tokens per step for chains, trees and n-gram, including the depth
cap near max_new_tokens and the stop-token rules."""

from __future__ import annotations

import random

import pytest

from engine.config import SpecConfig, TreeShape
from engine.drafters.ngram import ngram_candidates, suffix_match_len
from tests.policies.synthetic import make_trace
from tuner.replay import Outcome, ReplayError, ReplayTrace


def walk(trace: ReplayTrace, config: SpecConfig) -> list[Outcome]:
    """Step a single request to its end under a static config."""
    out, p = [], 0
    while p < trace.length:
        step = trace.step(p, config)
        out.append(step)
        p += step.emitted
    assert p == trace.length
    return out


def test_draft_chain_with_the_depth_cap():
    ranks = [0, 0, 1, 0, 0, 0, 0, 2, 0, 0]
    steps = walk(ReplayTrace(make_trace(range(10, 20), ranks=ranks)), SpecConfig(method="draft", k=3))
    # p=0: hits at 0,1 then rank 1 -> 2 accepted + bonus; p=3: 3 of 3; p=7: only 2 left to draft (3 remain),
    # rank 2 -> 0 accepted; p=8: 2 remain -> depth 1, accepted; done at 10
    assert steps == [Outcome("draft", 3, 3, 2, 3, 3), Outcome("draft", 3, 3, 3, 4, 3),
                     Outcome("draft", 2, 2, 0, 1, 2), Outcome("draft", 1, 1, 1, 2, 1)]


def test_no_draft_when_one_token_is_left():
    trace = ReplayTrace(make_trace([5, 6, 7], ranks=[0, 0, 0]))
    assert trace.step(2, SpecConfig(method="draft", k=4)) == Outcome("off", 0, 0, 0, 1, 0)
    assert trace.step(0, SpecConfig(method="draft", k=4)) == Outcome("draft", 2, 2, 2, 3, 2)


def test_accepted_stop_token_gets_no_bonus():
    # output ends at the stop token 99 before max_new_tokens; every draft token would be accepted
    trace = ReplayTrace(make_trace([5, 6, 99], max_new_tokens=10, eos=[99], ranks=[0, 0, 0]))
    assert walk(trace, SpecConfig(method="draft", k=4)) == [Outcome("draft", 4, 4, 3, 3, 4)]


def test_stop_token_as_the_bonus():
    trace = ReplayTrace(make_trace([5, 6, 99], max_new_tokens=10, eos=[99], ranks=[0, 0, 4]))
    assert walk(trace, SpecConfig(method="draft", k=4)) == [Outcome("draft", 4, 4, 2, 3, 4)]


def test_static_tree_accepts_while_rank_is_under_the_branching():
    ranks = [1, 1, 0, 3, 0, 0, 0, 0]
    trace = ReplayTrace(make_trace(range(8), ranks=ranks))
    config = SpecConfig(method="draft", k=4, tree=TreeShape(branching=(2, 2)))
    # depth 1: rank 1 < 2, depth 2: rank 1 < 2, depth 3: width 1, rank 0, depth 4: rank 3 -> 3 accepted
    assert trace.step(0, config) == Outcome("draft", 4, config.tree.max_nodes(4), 3, 4, 4)
    assert trace.step(0, SpecConfig(method="draft", k=4)).accepted == 0  # a chain misses at once


def test_tree_wider_than_the_rank_cap_is_refused():
    trace = ReplayTrace(make_trace(range(8), ranks=[0] * 8, rank_cap=2))
    with pytest.raises(ReplayError, match="branching 3 exceeds the trace's rank_cap 2"):
        trace.step(0, SpecConfig(method="draft", k=2, tree=TreeShape(branching=(3,))))


def test_dynamic_draft_trees_are_refused():
    trace = ReplayTrace(make_trace(range(8), ranks=[0] * 8))
    with pytest.raises(ReplayError, match="dynamic draft trees"):
        trace.step(0, SpecConfig(method="draft", k=3, tree=TreeShape(top_k=2, budget=6)))


def test_draft_without_ranks_is_refused():
    trace = ReplayTrace(make_trace(range(8)))
    with pytest.raises(ReplayError, match="no draft ranks"):
        trace.step(0, SpecConfig(method="draft", k=3))


def test_ngram_recomputes_the_engine_lookup():
    # the prompt ends in 5 6, which earlier continued 7 8 9; the output repeats it, then goes elsewhere
    trace = ReplayTrace(make_trace([7, 8, 1, 2, 3], prompt=[5, 6, 7, 8, 9, 5, 6], max_new_tokens=5))
    config = SpecConfig(method="ngram", k=3, min_n=1, max_n=2)
    assert trace.step(0, config) == Outcome("ngram", 3, 3, 2, 3, 3)  # proposes 7 8 9; 7 8 accepted, bonus 1
    # p=3: context ...7 8 1 2; suffix "2" never occurred before: nothing proposed, reported as off
    assert trace.step(3, config) == Outcome("off", 0, 0, 0, 1, 1)


def test_ngram_tree_walks_the_branch_that_matches():
    # after 5 the context continued with 1 (most recent) and 2; the output continues with 2
    trace = ReplayTrace(make_trace([2, 9, 9], prompt=[5, 2, 8, 5, 1, 8, 5], max_new_tokens=3))
    chain = SpecConfig(method="ngram", k=2, min_n=1, max_n=1)
    tree = SpecConfig(method="ngram", k=2, min_n=1, max_n=1, tree=TreeShape(branching=(2,)))
    assert trace.step(0, chain).accepted == 0  # proposes 1 8
    assert trace.step(0, tree) == Outcome("ngram", 2, 4, 1, 2, 2)  # 1 8 and 2 8: the 2 branch hits once


def test_ngram_first_match_continues_the_earliest_occurrence():
    # 5 was followed by 2 8 first and by 1 8 most recently; the output copies the first occurrence
    trace = ReplayTrace(make_trace([2, 8, 9], prompt=[5, 2, 8, 5, 1, 8, 5], max_new_tokens=3))
    recent = SpecConfig(method="ngram", k=2, min_n=1, max_n=1)
    first = recent.model_copy(update={"ngram_match": "first"})
    assert ngram_candidates([5, 2, 8, 5, 1, 8, 5], 2, 1, 1, 2, "first") == [[2, 8], [1, 8]]
    assert trace.step(0, recent).accepted == 0
    assert trace.step(0, first) == Outcome("ngram", 2, 2, 2, 3, 2)
    assert first.label() == "ngram k=2 chain n=1..1 first"


def test_single_candidate_shortcut_matches_the_engine_lookup():
    rng = random.Random(0)
    for _ in range(200):
        prompt = [rng.randrange(6) for _ in range(rng.randrange(2, 30))]
        output = [rng.randrange(6) for _ in range(20)]
        trace = ReplayTrace(make_trace(output, prompt=prompt))
        p, k = rng.randrange(12), rng.randrange(1, 9)
        lo = rng.randrange(1, 4)
        hi = lo + rng.randrange(0, 3)
        match = rng.choice(["recent", "first"])
        expected = ngram_candidates(prompt + output[:p], k, lo, hi, 1, match)
        got = trace.step(p, SpecConfig(method="ngram", k=k, min_n=lo, max_n=hi, ngram_match=match))
        proposal = expected[0] if expected else []
        assert got.nodes == len(proposal)
        true = output[p:p + k]
        assert got.accepted == next((i for i, (a, b) in enumerate(zip(proposal, true)) if a != b),
                                    min(len(proposal), len(true)))


def _longest_earlier_suffix(tokens: list[int], cap: int) -> int:
    """The definition, by brute force: the largest n <= cap whose last-n tokens also end somewhere before the end."""
    best = 0
    for n in range(1, min(cap, len(tokens) - 1) + 1):
        suffix = tokens[-n:]
        if any(tokens[end - n:end] == suffix for end in range(n, len(tokens))):
            best = n
    return best


def test_suffix_match_is_the_longest_earlier_occurrence_of_the_text_end():
    rng = random.Random(1)
    assert suffix_match_len([7]) == 0 and suffix_match_len([1, 2, 3]) == 0
    assert suffix_match_len([4, 4, 4, 4, 4], cap=16) == 4
    assert suffix_match_len([4, 4, 4, 4, 4], cap=2) == 2
    for _ in range(500):
        tokens = [rng.randrange(rng.choice((2, 4, 30))) for _ in range(rng.randrange(1, 40))]
        cap = rng.randrange(1, 12)
        assert suffix_match_len(tokens, cap) == _longest_earlier_suffix(tokens, cap), (tokens, cap)


def test_replay_reports_the_suffix_match_the_engine_computes():
    prompt, output = [1, 2, 3, 9, 1, 2], [3, 9, 1, 5, 5]
    trace = ReplayTrace(make_trace(output, prompt=prompt))
    assert [trace.suffix_match(p) for p in range(len(output))] == \
        [suffix_match_len(prompt + output[:p]) for p in range(len(output))] == [2, 3, 4, 5, 0]
