"""The recorder: prompt files (and their errors), the draft's teacher-forced view, n-gram-only traces, and the
``spectune record`` command's exit codes."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from engine.config import SpecConfig
from engine.engine import Request, SpecEngine
from engine.sampling import SamplingParams
from policies.static import StaticPolicy
from tests.engine.tiny import tiny_model
from tests.policies.synthetic import linear_cost
from tuner.cli import app
from tuner.record import draft_views, record
from tuner.replay import replay_cell
from tuner.traces import load_traces, write_traces
from tuner.workloads import SHIPPED, PromptFileError, read_prompt_file, shipped_prompts

runner = CliRunner()


def write(tmp_path, *lines: str):
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("lines, message", [
    (['{"prompt": "hi"}', "{not json"], ":2: not valid JSON"),
    (['{"id": "a"}'], ":1: give exactly one of 'prompt' and 'messages'"),
    (['{"prompt": "x", "messages": [{"role": "user", "content": "y"}]}'], ":1: give exactly one of"),
    (['{"messages": [{"role": "robot", "content": "y"}]}'], ":1: messages.0.role: Input should be"),
    (['{"messages": [{"role": "user"}]}'], ":1: messages.0.content: missing field"),
    (['{"prompt": 3}'], ":1: prompt: Input should be a valid string"),
    (['{"prompt": "a", "temperature": 1}'], ":1: temperature: Extra inputs are not permitted"),
    (['["prompt"]'], ":1: expected a JSON object"),
    (['{"id": "x", "prompt": "a"}', "", '{"id": "x", "prompt": "b"}'], ":3: id: 'x' repeats line 1"),
    ([""], ": no prompts in this file"),
])
def test_bad_prompt_files_name_line_and_field(tmp_path, lines, message):
    path = write(tmp_path, *lines)
    with pytest.raises(PromptFileError) as err:
        read_prompt_file(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_prompt_file_ids_default_to_line_numbers(tmp_path):
    records = read_prompt_file(write(tmp_path, '{"prompt": "a"}', "", '{"id": "q", "messages": '
                                                '[{"role": "user", "content": "b"}]}', '{"prompt": "c"}'))
    assert [r.id for r in records] == ["1", "q", "4"]
    assert records[1].messages[0].content == "b"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_prompt_sets_parse(name):
    records = read_prompt_file(shipped_prompts(name))
    assert len(records) >= 8
    assert len({r.id for r in records}) == len(records)


def test_unknown_shipped_set_is_refused():
    with pytest.raises(PromptFileError, match="no shipped prompt set 'poetry'"):
        shipped_prompts("poetry")


def test_draft_view_is_the_incremental_drafts_rank():
    """One batched, right-padded teacher-forced pass gives, at every output position, exactly the rank that the
    draft's own next-token logits after the true prefix give the true token."""
    draft = tiny_model(3)
    pairs = [([1, 2, 3, 4, 5], [7, 8, 9, 10]), ([11], [12, 13, 14, 15, 16, 17, 18])]
    views = draft_views(draft, pairs, rank_cap=96)
    for (prompt, output), view in zip(pairs, views):
        assert len(view.rank) == len(output)
        for j, token in enumerate(output):
            logits = draft.model(torch.tensor([prompt + output[:j]])).logits[0, -1]
            assert view.rank[j] == int((logits > logits[token]).sum())
            probs = torch.softmax(logits.float(), -1)
            assert view.top_prob[j] == pytest.approx(float(probs.max()), rel=1e-9)
            assert view.true_prob[j] == pytest.approx(float(probs[token]), rel=1e-9)
    assert all(r <= 3 for view in draft_views(draft, pairs, rank_cap=3) for r in view.rank)


def test_ngram_only_recording_replays_the_live_run(tmp_path):
    target = tiny_model(1)
    prompts = [[3, 4, 5, 6, 3, 4, 5], [9, 10, 11, 9, 10], [20]]
    traces = record(target, None, "w", ["a", "b", "c"], prompts, 12, max_batch=2)
    assert all(t.draft is None and t.draft_rank is None for t in traces)
    write_traces(tmp_path / "w.jsonl", traces)
    loaded = load_traces(tmp_path)
    config = SpecConfig(method="ngram", k=3)
    engine = SpecEngine(target, max_batch=2)
    live = engine.run([Request(t.request_id, list(t.prompt_ids), SamplingParams(max_new_tokens=12), config)
                       for t in loaded])
    replayed = replay_cell(loaded, StaticPolicy(config), linear_cost(target="tiny-qwen2-1", draft=None), 2, "x")
    assert {rid: tokens for rid, (tokens, _) in live.items()} == {t.request_id: list(t.output_ids) for t in loaded}
    assert replayed.steps == engine.step_count
    assert replayed.accepted_tokens == sum(s.accepted_tokens for _, s in live.values())


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-model"
    tiny_model(1, dtype=torch.float32).model.save_pretrained(path)
    return path


@pytest.mark.parametrize("args, message", [
    (["--method", "draft"], "--method draft needs --draft"),
    (["--method", "tree"], "--method: 'tree' is not one of draft, ngram"),
    (["--method", "ngram", "--draft", "x"], "--method ngram records without a draft model"),
    (["--method", "ngram", "--workload", "poetry"], "no shipped prompt set 'poetry'"),
    (["--method", "ngram", "--prompts", "missing.jsonl"], "missing.jsonl: no such prompt file"),
    (["--method", "ngram", "--target", "no-such-model"], "no-such-model"),
    (["--method", "ngram"], "messages: the model's tokenizer has no chat template"),
])
def test_record_cli_errors(tmp_path, tiny_dir, args, message):
    base = {"--target": str(tiny_dir), "--workload": "prose", "--out": str(tmp_path / "out")}
    for key, value in zip(args[::2], args[1::2]):
        base[key] = value
    result = runner.invoke(app, ["record", *[x for kv in base.items() for x in kv]])
    assert result.exit_code == 2, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last


def test_record_cli_refuses_bad_prompt_file_with_its_line(tmp_path, tiny_dir):
    prompts = write(tmp_path, json.dumps({"prompt": "ok"}), json.dumps({"messages": []}))
    result = runner.invoke(app, ["record", "--target", str(tiny_dir), "--workload", "w", "--method", "ngram",
                                 "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"{prompts}:2: messages: List should have at least 1 item" in result.stderr
