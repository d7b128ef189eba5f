"""Calibration on a tiny model: a valid cost model with the engine identity that replays traces recorded on the same
engine, timing leaves the cache as it found it, and the ``spectune calibrate`` command's exit codes."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

from policies.cost_model import CostModel
from policies.goodput import GoodputOptions
from tests.engine.tiny import tiny_model
from tuner.calibrate import QUICK, Grid, calibrate, prefill, retime, time_forward
from tuner.cli import app
from tuner.record import record
from tuner.replay import replay_all
from tuner.traces import write_traces

runner = CliRunner()


@pytest.fixture(scope="module")
def models():
    return tiny_model(1), tiny_model(2)


def test_calibrated_cost_model_is_valid_and_prices_replay(models, tmp_path):
    target, draft = models
    cost = calibrate(target, draft, QUICK)
    assert (cost.engine.target, cost.engine.draft, cost.engine.dtype) == ("tiny-qwen2-1", "tiny-qwen2-2", "float64")
    assert cost.engine.device.startswith("cpu:")
    assert cost.target.batch_sizes == (1, 2) and cost.target.tokens == (1, 2) and cost.target.context_lens == (16, 32)
    assert cost.draft is not None and cost.draft.tokens == (1,)
    assert cost.target_head.tokens == (1, 2) and cost.draft_head.tokens == (1, 2)
    assert cost.target_head(1, 2, 0) > 0 and cost.target_head.batch_sizes == (1,)
    assert cost.ngram_s > 0
    assert len(cost.step_overhead_s) == 2 and 0 <= cost.step_overhead_s[0] <= cost.step_overhead_s[1]
    again = CostModel.from_json(cost.to_json())
    assert again == cost
    assert cost.verify_s(2, 4, 24) > 0 and cost.draft_s(2, 3, 24, "draft") > cost.draft_s(2, 1, 24, "draft")
    traces = record(target, draft, "w", ["a", "b"], [[1, 2, 3], [4, 5, 6, 7]], 8, rank_cap=4, max_batch=2)
    write_traces(tmp_path / "w.jsonl", traces)
    cells = replay_all(traces, ["static:method=draft,k=2", "goodput"], cost, [1, 2], oracle=True)
    assert len(cells) == 6 and all(c.tokens_per_s > 0 for c in cells)


def test_timing_keeps_the_cache_at_its_context(models):
    target, _ = models
    base = prefill(target, 24)
    assert time_forward(base, 3, 4, warmup=1, repeats=2) > 0
    assert base.batch_size == 1 and base.lengths.tolist() == [24] and base.pending_width == 0


def test_calibrate_without_draft_prices_ngram_only(models):
    cost = calibrate(models[0], None, QUICK)
    assert cost.draft is None and cost.engine.draft is None
    with pytest.raises(ValueError, match="no draft-model grid"):
        cost.draft_s(1, 2, 16, "draft")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-calib"
    tiny_model(1, dtype=torch.float32).model.save_pretrained(path)
    return path


def test_calibrate_cli_writes_a_cost_model(tiny_dir, tmp_path):
    out = tmp_path / "models" / "cost.json"
    result = runner.invoke(app, ["calibrate", "--target", str(tiny_dir), "--quick", "--out", str(out),
                                 "--threads", "1"])
    assert result.exit_code == 0, result.output
    cost = CostModel.from_json(out.read_text())
    assert cost.engine.target == "tiny-calib" and cost.engine.dtype == "float32" and cost.draft is None
    assert json.loads(out.read_text())["version"] == 1


@pytest.mark.parametrize("args, message", [
    (["--target", "no-such-model"], "no-such-model"),
    (["--dtype", "int3"], "int3"),
    (["--out", "."], "is a directory"),
])
def test_calibrate_cli_errors(tiny_dir, tmp_path, args, message):
    base = {"--target": str(tiny_dir), "--out": str(tmp_path / "c.json")}
    for key, value in zip(args[::2], args[1::2]):
        base[key] = value
    result = runner.invoke(app, ["calibrate", "--quick", *[x for kv in base.items() for x in kv]])
    assert result.exit_code == 2, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last


def test_retime_measures_the_grids_and_the_overhead_again_up_to_the_live_batch_size(models):
    target, draft = models
    cost = calibrate(target, draft, QUICK)
    seconds = tuple(tuple(tuple(s * 1000 for s in col) for col in row) for row in cost.target.seconds)
    stale = cost.model_copy(update={"target": cost.target.model_copy(update={"seconds": seconds}),
                                    "step_overhead_s": (10.0, 20.0), "ngram_s": 10.0})
    now = retime(stale, target, draft, 2, QUICK)
    # a batch of 2 shrinks to 1 as its requests finish, so both sizes are timed again
    assert now.target.batch_sizes == (1, 2) and now.draft.batch_sizes == (1, 2)
    assert now.target.tokens == cost.target.tokens
    assert now.target.context_lens == cost.target.context_lens and now.draft.tokens == cost.draft.tokens
    assert now.target(1, 1, 16) < stale.target(1, 1, 16) / 100  # measured again, not copied
    assert now.target(2, 1, 16) < stale.target(2, 1, 16) / 100
    assert now.verify_s(2, 4, 24, 3) == now.target(2, 2, 24) + now.target_head(1, 3, 0)
    # the engine's step overhead and the n-gram lookup are timed again too (on a tiny model, well under a second)
    assert len(now.step_overhead_s) == 2 and 0 <= now.step_overhead_s[0] <= now.step_overhead_s[1] < 1
    assert 0 < now.ngram_s < 1
    assert now.target_head.tokens == cost.target_head.tokens and now.target_head != cost.target_head
    assert retime(stale, target, draft, 1, QUICK).target.batch_sizes == (1,)
    # the grid's widths on top of the model's: a model calibrated at fewer widths is re-priced at the chains' widths
    wider = retime(stale, target, draft, 1, dataclasses.replace(QUICK, tokens=(1, 3)))
    assert wider.target.tokens == (1, 2, 3) and wider.draft.tokens == cost.draft.tokens


def test_the_grid_times_every_chain_width_goodput_considers():
    assert set(Grid().tokens) >= {1} | {1 + k for k in GoodputOptions().ks}
