"""Bad inputs fail with a message naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.config import SpecConfig, TreeShape
from engine.engine import EngineInputError, Request, SpecEngine
from engine.sampling import SamplingParams
from tests.engine.tiny import tiny_model


@pytest.fixture(scope="module")
def engine():
    return SpecEngine(tiny_model(1), None)


@pytest.mark.parametrize("fields, message", [
    ({"k": 0}, "k"), ({"k": 33}, "k"), ({"method": "eagle"}, "method"), ({"min_n": 5, "max_n": 2}, "min_n"),
    ({"tree": {"branching": [0]}}, "branching"), ({"tree": {"top_k": 2}}, "budget"),
    ({"k": 8, "tree": {"branching": [4, 4, 4]}}, "nodes"), ({"speculate": True}, "speculate"),
])
def test_invalid_config_names_field(fields, message):
    with pytest.raises(ValidationError, match=message):
        SpecConfig.model_validate(fields)


def test_tree_spec_parsing():
    assert TreeShape.parse("chain").is_chain
    assert TreeShape.parse("2,2,1").branching == (2, 2, 1)
    assert TreeShape.parse("topk=4,budget=16") == TreeShape(top_k=4, budget=16)
    with pytest.raises(ValueError, match="tree"):
        TreeShape.parse("wide")


@pytest.mark.parametrize("prompt, params, config, message", [
    ([], SamplingParams(), SpecConfig(), "prompt: must not be empty"),
    ([1] * 500, SamplingParams(max_new_tokens=100), SpecConfig(), "exceed the model context of 512"),
    ([1, 2, 1000], SamplingParams(), SpecConfig(), "token ids"),
    ([1, 2], SamplingParams(), SpecConfig(method="draft"), "needs a draft model"),
])
def test_engine_rejects_bad_requests(engine, prompt, params, config, message):
    with pytest.raises(EngineInputError, match=message):
        engine.add(Request("x", prompt, params, config))
    assert not engine.has_work()
