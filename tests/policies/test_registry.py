from __future__ import annotations

import pytest

from engine.config import SpecConfig, TreeShape
from policies.bandit import BanditPolicy
from policies.goodput import GoodputPolicy
from policies.hysteresis import Hysteresis
from policies.registry import PolicySpec, build_policy, without_draft
from policies.static import StaticPolicy
from tests.policies.synthetic import context, linear_cost

COST = linear_cost()


def test_parse_spec():
    spec = PolicySpec.parse(" Static:method=ngram, k=4 ")
    assert (spec.name, spec.options) == ("static", {"method": "ngram", "k": "4"})


def test_without_draft_defaults_to_lookups_and_keeps_what_a_spec_names():
    def options(text: str) -> dict[str, str]:
        return without_draft(PolicySpec.parse(text)).options

    assert options("goodput:ks=2+4") == {"ks": "2+4", "methods": "ngram"}
    assert options("bandit") == {"methods": "ngram"}
    assert options("heuristic") == {"method": "ngram"}
    assert options("static") == {}  # off by default
    assert options("goodput:methods=draft") == {"methods": "draft"}
    assert build_policy(without_draft(PolicySpec.parse("goodput")), COST).options.methods == ("ngram",)


def test_static_configs():
    assert build_policy("static").decide(context()) == SpecConfig()
    policy = build_policy("static:method=draft,k=3,tree=2x2,max_batch_size=8")
    assert isinstance(policy, StaticPolicy)
    assert policy.config == SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2)), max_batch_size=8)
    dynamic = build_policy("static:method=draft,k=4,top_k=3,budget=10")
    assert dynamic.decide(context()).tree == TreeShape(top_k=3, budget=10)


def test_lists_and_wrappers():
    policy = build_policy("goodput:methods=ngram,ks=4+1+2,trees=chain+2x2,hold=3,cooldown=8", COST)
    assert isinstance(policy, Hysteresis) and (policy.hold, policy.cooldown) == (3, 8)
    inner = policy.inner
    assert isinstance(inner, GoodputPolicy)
    assert inner.options.ks == (1, 2, 4) and inner.options.methods == ("ngram",)
    assert inner.options.trees == (TreeShape(), TreeShape(branching=(2, 2)))
    assert [a.label() for a in build_policy("bandit:methods=ngram,ks=3,off=false").arms] == ["ngram k=3 chain n=1..4"]
    assert isinstance(build_policy("bandit"), BanditPolicy)
    assert build_policy("goodput:match_buckets=none", COST).options.match_buckets == ()
    assert build_policy("goodput:match_buckets=2+8", COST).options.match_buckets == (2, 8)


@pytest.mark.parametrize(("spec", "message"), [
    ("", "empty name"),
    ("nope", "policy 'nope': unknown; choose one of static, heuristic, goodput, bandit"),
    ("static:k", "policy static: 'k' is not key=value"),
    ("static:k=1,k=2", "policy static: key 'k' given twice"),
    ("static:speed=9", "policy static: unknown key(s) speed; known keys:"),
    ("static:k=40", "policy static: k: Input should be less than or equal to 32"),
    ("static:method=magic", "policy static: method: Input should be 'off', 'draft' or 'ngram'"),
    ("static:tree=3y", "policy static: tree:"),
    ("heuristic:k=0", "policy heuristic: k: Input should be greater than or equal to 1"),
    ("goodput:ks=1+x", "policy goodput: ks.1: Input should be a valid integer"),
    ("goodput:methods=off", "policy goodput: methods:"),
    ("goodput:trees=topk=2", "policy goodput:"),
    ("goodput:match_buckets=4+2", "policy goodput: match_buckets: Value error, give strictly increasing"),
    ("goodput:match_buckets=0+2", "policy goodput: match_buckets: Value error, give strictly increasing"),
    ("bandit:exploration=-1", "policy bandit: exploration: Input should be greater than or equal to 0"),
    ("bandit:hold=soon", "policy bandit: hold and cooldown must be integers"),
    ("bandit:hold=0", "policy bandit: hold: must be at least 1"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ValueError) as err:
        build_policy(spec, COST)
    assert message in str(err.value)


def test_goodput_needs_a_cost_model():
    with pytest.raises(ValueError, match="policy goodput: needs a cost model"):
        build_policy("goodput")
