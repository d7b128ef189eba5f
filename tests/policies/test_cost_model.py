from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from engine.config import TreeShape
from policies.cost_model import CostModel, EngineIdentity, ForwardGrid, uniform_grid
from tests.policies.synthetic import linear_cost

GRID = ForwardGrid(batch_sizes=(1, 4), tokens=(1, 8), context_lens=(100, 1100),
                   seconds=(((0.010, 0.020), (0.014, 0.030)), ((0.012, 0.026), (0.040, 0.080))))


def test_hits_every_measured_point():
    for b, batch in enumerate(GRID.batch_sizes):
        for t, tokens in enumerate(GRID.tokens):
            for c, ctx in enumerate(GRID.context_lens):
                assert GRID(batch, tokens, ctx) == pytest.approx(GRID.seconds[b][t][c])


def test_linear_between_points():
    assert GRID(1, 1, 600) == pytest.approx(0.015)  # halfway along context
    assert GRID(2.5, 1, 100) == pytest.approx(0.011)  # halfway along batch
    assert GRID(1, 4.5, 100) == pytest.approx(0.012)  # halfway along tokens
    # the centre of the cell: the mean of its 8 corners
    assert GRID(2.5, 4.5, 600) == pytest.approx(sum(s for row in GRID.seconds for col in row for s in col) / 8)


def test_extends_the_edge_segment_and_never_drops_below_the_fastest_point():
    assert GRID(7, 1, 100) == pytest.approx(0.014)  # batch 4 -> 7 continues the 1 -> 4 slope
    assert GRID(1, 1, 2100) == pytest.approx(0.030)
    assert GRID(1, 1, 0) == pytest.approx(0.010)  # would extrapolate to 0.009: floored


def test_single_point_axes_are_constant():
    grid = ForwardGrid(batch_sizes=(1,), tokens=(1, 2), context_lens=(64,), seconds=(((0.1,), (0.2,)),))
    assert grid(16, 1.5, 4096) == pytest.approx(0.15)


def test_monotone_fit_pools_violators_and_keeps_ordered_grids():
    line = ForwardGrid(batch_sizes=(1,), tokens=(1, 2, 4), context_lens=(64,),
                       seconds=(((0.40,), (0.29,), (0.33,)),))
    assert [col[0] for col in line.monotone().seconds[0]] == pytest.approx([0.34, 0.34, 0.34])  # pooled to the mean
    noisy = ForwardGrid(batch_sizes=(1, 2), tokens=(1, 2, 4), context_lens=(64,),
                        seconds=(((0.40,), (0.29,), (0.33,)), ((0.38,), (0.40,), (0.38,))))
    values = [[col[0] for col in row] for row in noisy.monotone().seconds]
    for row in values:
        assert row == sorted(row)
    for t in range(3):
        assert values[0][t] <= values[1][t]
    assert GRID.monotone() == GRID


def test_monotone_fit_along_chosen_axes_keeps_the_others_as_measured():
    # a 3-token forward dearer than a 4-token one, as measured in float32 on AVX2 (benchmarks/width_cost.py)
    dip = ForwardGrid(batch_sizes=(1, 2), tokens=(1, 3, 4), context_lens=(64,),
                      seconds=(((0.36,), (0.98,), (0.79,)), ((0.30,), (0.99,), (0.97,))))
    fitted = dip.monotone((0, 2))
    values = [[col[0] for col in row] for row in fitted.seconds]
    assert values[0] == pytest.approx([0.33, 0.98, 0.79])  # the tokens axis as measured; batch 1 > 2 pooled
    assert values[1] == pytest.approx([0.33, 0.99, 0.97])
    assert fitted(1, 3, 64) > fitted(1, 4, 64)
    assert [col[0] for col in dip.monotone().seconds[0]] == pytest.approx([0.33, 0.885, 0.885])


def test_exact_on_linear_surfaces():
    cost = linear_cost()
    assert cost.verify_s(4, 12, 500) == pytest.approx(0.02 + 0.0005 * 12 + 2e-6 * 4 * 500)


def test_draft_seconds():
    cost = linear_cost()
    one = cost.draft(2, 1, 300)  # type: ignore[misc]
    assert cost.draft_s(2, 4, 300, "draft") == pytest.approx(4 * one)
    # a tree feeds each depth's nodes: 1 (root), then 2, then 4 per request
    tree = TreeShape(branching=(2, 2))
    assert cost.draft_s(2, 3, 300, "draft", tree) == pytest.approx(
        cost.draft(2, 1, 300) + cost.draft(2, 2, 300) + cost.draft(2, 4, 300))  # type: ignore[misc]
    assert cost.draft_s(3, 8, 300, "ngram") == pytest.approx(3 * 2e-5)
    assert cost.draft_s(3, 8, 300, "off") == 0.0
    with pytest.raises(ValueError, match="no draft-model grid"):
        linear_cost(draft=None).draft_s(1, 2, 100, "draft")


def test_the_head_is_priced_over_the_rows_that_get_logits():
    plain, cost = linear_cost(), linear_cost(head=(0.004, 0.0001))

    def head(rows: int) -> float:
        return 0.004 + 0.0001 * rows

    # 3 rows padded to 5 tokens each: the head runs over the 9 real nodes (all 15 unless told)
    assert cost.verify_s(3, 15, 500, 9) == pytest.approx(plain.verify_s(3, 15, 500) + head(9))
    assert cost.verify_s(3, 15, 500) == pytest.approx(plain.verify_s(3, 15, 500) + head(15))
    # a draft pass: the first forward feeds each row's catch-up and takes logits at its root only, the next ones at
    # the nodes they feed (2, then 4 per row in a 2x2 tree); the draft's head is half the target's here
    tree = TreeShape(branching=(2, 2))
    assert cost.draft_s(2, 3, 300, "draft", tree, catch_up=12) == pytest.approx(
        plain.draft_s(2, 3, 300, "draft", tree, catch_up=12) + (head(2) + head(4) + head(8)) / 2)
    assert cost.catch_up_alone_s(40, 300) == plain.catch_up_alone_s(40, 300)  # a catch-up alone takes no logits
    assert plain.verify_s(3, 15, 500, 9) == plain.verify_s(3, 15, 500)  # without heads the grid holds them
    assert CostModel.from_json(cost.to_json()) == cost


def test_the_draft_head_runs_over_the_drafting_rows_to_their_own_depths():
    plain, cost = linear_cost(), linear_cost(head=(0.004, 0.0001))

    def head(rows: int) -> float:
        return (0.004 + 0.0001 * rows) / 2  # the draft's head is half the target's

    forwards = plain.draft_s(4, 3, 300, "draft")
    # of 4 rows, one drafts 3 deep and one 1 deep (the others are off or look up): the three forwards span all four
    # rows; the first takes logits in two rows, the next two in the deeper row alone
    assert cost.draft_s(4, 3, 300, "draft", depths=[3, 1]) == pytest.approx(forwards + head(2) + 2 * head(1))
    assert cost.draft_s(4, 3, 300, "draft") == pytest.approx(forwards + 3 * head(4))  # every row, to k
    alone = cost.draft_s_by_depth(4, 3, 300, "draft", depths=(3,))
    assert alone == pytest.approx([cost.draft_s(4, k, 300, "draft", depths=[k]) for k in range(4)])
    assert alone[2] == pytest.approx(plain.draft_s(4, 2, 300, "draft") + 2 * head(1))


def test_json_round_trip_keeps_the_engine_identity():
    cost = linear_cost(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16")
    again = CostModel.from_json(cost.to_json())
    assert again == cost
    assert again.engine == EngineIdentity(target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16")
    assert again.verify_s(3, 7, 333) == cost.verify_s(3, 7, 333)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["target"].update(tokens=[8, 1]), "tokens: grid points must be strictly increasing"),
    (lambda d: d["target"].update(seconds=[[[0.1]]]), "seconds: expected shape"),
    (lambda d: d["target"]["seconds"][0][0].__setitem__(0, 0.0), "every measured time must be positive"),
    (lambda d: d.update(version=7), "version: cost model version 7 is not supported"),
    (lambda d: d["engine"].pop("target"), "engine.target"),
    (lambda d: d.update(ngram_s=-1), "ngram_s"),
    (lambda d: d.update(step_overhead_s=[0.01]), "step_overhead_s: expected one value per target batch size"),
    (lambda d: d.update(step_overhead_s=[-0.01] * len(d["target"]["batch_sizes"])), "must not be negative"),
])
def test_bad_files_name_the_field(change, message):
    data = json.loads(linear_cost().to_json())
    change(data)
    with pytest.raises(ValidationError) as err:
        CostModel.from_json(json.dumps(data))
    assert message in str(err.value)


def test_uniform_grid_samples_the_function():
    grid = uniform_grid((1, 2), (1,), (10, 20), lambda b, t, c: b + c / 10)
    assert grid.seconds == (((2.0, 3.0),), ((3.0, 4.0),))


def test_step_overhead_is_linear_between_batch_sizes_and_zero_when_unmeasured():
    cost = linear_cost()
    assert cost.overhead_s(4) == 0.0
    sizes = cost.target.batch_sizes
    with_overhead = cost.model_copy(update={"step_overhead_s": tuple(0.01 * b for b in sizes)})
    assert with_overhead.overhead_s(sizes[1]) == pytest.approx(0.01 * sizes[1])
    assert with_overhead.overhead_s((sizes[1] + sizes[2]) / 2) == pytest.approx(0.01 * (sizes[1] + sizes[2]) / 2)
    assert with_overhead.overhead_s(10 * sizes[-1]) == pytest.approx(0.01 * sizes[-1])  # constant beyond the grid
