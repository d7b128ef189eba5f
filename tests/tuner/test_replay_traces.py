"""Trace files: loading, and bad files failing with the file, line and field at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.policies.synthetic import make_trace
from tuner.traces import TraceError, by_workload, load_traces, write_traces


def record(**change) -> dict:
    data = json.loads(make_trace([7, 8, 9], ranks=[0, 1, 0]).model_dump_json())
    data.update(change)
    return data


def write_lines(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_loads_a_directory_in_file_order(tmp_path):
    write_traces(tmp_path / "b.jsonl", [make_trace([1, 2], workload="prose", request_id=str(i)) for i in range(2)])
    write_traces(tmp_path / "a.jsonl", [make_trace([3], workload="code", request_id="0", ranks=[0])])
    (tmp_path / "notes.txt").write_text("ignored")
    traces = load_traces(tmp_path)
    assert [(t.workload, t.request_id) for t in traces] == [("code", "0"), ("prose", "0"), ("prose", "1")]
    assert list(by_workload(traces)) == ["code", "prose"]
    assert traces[0] == make_trace([3], workload="code", request_id="0", ranks=[0])
    assert load_traces(tmp_path / "a.jsonl") == traces[:1]


BAD = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "Input should be an object"),
    (record(version=2), "version: trace version 2 is not supported (expected 1)"),
    ({k: v for k, v in record().items() if k != "output_ids"}, "output_ids: missing field"),
    (record(prompt_ids=[1, "2"]), "prompt_ids.1: Input should be a valid integer"),
    (record(max_new_tokens=True), "max_new_tokens: Input should be a valid integer"),
    (record(prompt_ids=[-1]), "prompt_ids.0: Input should be greater than or equal to 0"),
    (record(prompt_ids=[]), "prompt_ids: Tuple should have at least 1 item"),
    (record(draft_true_prob=[0.5, 1.5, 0.1]), "draft_true_prob.1: Input should be less than or equal to 1"),
    (record(surprise=1), "surprise: Extra inputs are not permitted"),
    (record(draft_rank=[0, 1]), "draft_rank: 2 entries, but output_ids has 3"),
    (record(draft_top_prob=[0.5]), "draft_top_prob: 1 entries, but output_ids has 3"),
    (record(draft_rank=[0, 9, 0]), "draft_rank: entries must not exceed rank_cap=8"),
    (record(draft=None), "draft_rank: given without a draft model (draft is null)"),
    (record(draft_rank=None), "draft_rank: required when draft is set"),
    (record(max_new_tokens=2), "output_ids: 3 tokens, more than max_new_tokens=2"),
    (record(max_new_tokens=5), "output_ids: 3 tokens end before max_new_tokens=5 without a stop token"),
    (record(eos_token_ids=[8]), "output_ids: stop token 8 at position 1 before the end"),
    (record(workload=""), "workload: String should have at least 1 character"),
]


@pytest.mark.parametrize(("line", "message"), BAD)
def test_bad_records_name_file_line_and_field(tmp_path, line, message):
    path = write_lines(tmp_path / "w.jsonl", [record(request_id="ok"), "", line])
    with pytest.raises(TraceError) as err:
        load_traces(tmp_path)
    assert str(err.value).startswith(f"{path}:3: ")
    assert message in str(err.value)


def test_repeated_request_id_names_both_places(tmp_path):
    write_lines(tmp_path / "a.jsonl", [record(request_id="x")])
    write_lines(tmp_path / "b.jsonl", [record(request_id="y"), record(request_id="x")])
    with pytest.raises(TraceError, match=r"b.jsonl:2: request_id: 'x' repeats .*a.jsonl:1 in workload 'w'"):
        load_traces(tmp_path)


def test_missing_or_empty_locations(tmp_path):
    with pytest.raises(TraceError, match="no such trace directory or file"):
        load_traces(tmp_path / "nope")
    with pytest.raises(TraceError, match="no \\*.jsonl trace files"):
        load_traces(tmp_path)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="no traces"):
        load_traces(tmp_path)


def test_a_stop_token_may_end_the_output_early(tmp_path):
    write_lines(tmp_path / "w.jsonl", [record(max_new_tokens=10, eos_token_ids=[9])])
    assert load_traces(tmp_path)[0].stop_ids == frozenset({9})
