from __future__ import annotations

import pytest

from engine.config import TreeShape
from policies.acceptance import AcceptanceTable


def table(**kw) -> AcceptanceTable:
    return AcceptanceTable(("draft", "ngram"), [1, 2], prior=kw.get("prior", 0.5), decay=kw.get("decay", 0.1),
                           depth=8)


def test_running_mean_then_ewma():
    t = table()
    t.update("draft", 1, 1, 1.0)  # prior 0.5 counts as one observation: mean of 0.5 and 1
    assert t.conditional("draft", 1, 1) == pytest.approx(0.75)
    for _ in range(100):
        t.update("draft", 1, 1, 0.0)
    assert t.conditional("draft", 1, 1) < 0.01  # the weight never drops below decay, so it forgets
    assert t.conditional("ngram", 1, 1) == 0.5  # methods are apart


def test_walk_hits_then_one_miss_and_none_after_a_stop():
    t = table()
    t.observe_walk("draft", TreeShape(), accepted=2, window=4, stopped=False)
    assert [t.seen[("draft", 1)][d] for d in range(4)] == [1, 1, 1, 0]
    assert t.alpha[("draft", 1)][2] == pytest.approx(0.25)  # depth 3 missed
    t.observe_walk("draft", TreeShape(), accepted=2, window=4, stopped=True)
    t.observe_walk("draft", TreeShape(), accepted=3, window=3, stopped=False)  # the whole window accepted
    assert [t.seen[("draft", 1)][d] for d in range(4)] == [3, 3, 2, 0]


def test_unobserved_depths_borrow_the_deepest_observed_one():
    t = table(prior=0.9)
    for _ in range(50):
        t.observe_walk("draft", TreeShape(), accepted=0, window=1, stopped=False)
    assert t.estimates("draft")[:3] == pytest.approx([t.alpha[("draft", 1)][0]] * 3)
    assert t.estimates("ngram") == [0.9] * 8


def test_wider_nodes_accept_at_least_what_narrower_ones_do():
    t = table(prior=0.0)
    t.update("draft", 1, 1, 1.0)
    assert t.conditional("draft", 2, 1) == t.conditional("draft", 1, 1) == pytest.approx(0.5)
    wide = TreeShape(branching=(2,))
    t.observe_walk("draft", wide, accepted=1, window=1, stopped=False)
    t.observe_walk("draft", wide, accepted=1, window=1, stopped=False)
    assert t.conditional("draft", 2, 1) == pytest.approx(2 / 3)
    assert t.conditional("draft", 1, 1) == pytest.approx(0.5)


def test_expected_accepted_tokens():
    t = table(prior=0.5)
    assert t.accepted_by_depth("draft", TreeShape(), 3) == pytest.approx([0, 0.5, 0.75, 0.875])
