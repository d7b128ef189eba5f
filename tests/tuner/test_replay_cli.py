"""``spectune replay``: JSON output, the table, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.policies.synthetic import linear_cost, make_trace
from tuner.cli import app
from tuner.traces import write_traces

PROMPT = tuple(range(100, 170))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    traces = tmp_path / "traces"
    traces.mkdir()
    for workload, ranks in (("code", [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]), ("prose", [3, 0, 2, 1, 0, 5, 1, 0, 4, 2])):
        write_traces(traces / f"{workload}.jsonl", [make_trace(range(10, 20), prompt=PROMPT, ranks=ranks,
                                                               workload=workload, request_id=str(i)) for i in range(3)])
    cost = tmp_path / "cost.json"
    cost.write_text(linear_cost().to_json())
    return traces, cost


def replay(*args: str):
    return CliRunner().invoke(app, ["replay", *args])


def test_json_cells(files):
    traces, cost = files
    result = replay("--traces", str(traces), "--cost-model", str(cost), "--policy", "static:method=draft,k=4",
                    "--policy", "goodput", "--batch-sizes", "1,2", "--oracle", "--json")
    assert result.exit_code == 0, result.stderr
    cells = json.loads(result.stdout)["cells"]
    assert [(c["workload"], c["batch_size"], c["policy"]) for c in cells] == [
        (w, b, p) for w in ("code", "prose") for b in (1, 2) for p in ("static:method=draft,k=4", "goodput", "oracle")]
    for cell in cells:
        assert {"workload", "batch_size", "policy", "config", "tokens_per_s", "mean_acceptance_length",
                "steps"} <= set(cell)
        assert cell["tokens_per_s"] > 0 and cell["steps"] > 0
    static = cells[0]
    assert static["config"] == "draft k=4 chain"
    # per request: p=0 accepts 3 of 4, p=4 accepts 4 of 4, p=9 has one token left and drafts nothing
    assert static["mean_acceptance_length"] == pytest.approx(1 + 7 / 2)
    # batch 1: a cell replays 8 batches' worth, the 3 requests cycled: 8 requests of 3 steps one after another
    assert (static["requests"], static["steps"]) == (8, 24)
    by_key = {(c["workload"], c["batch_size"], c["policy"]): c for c in cells}
    for w in ("code", "prose"):
        for b in (1, 2):
            assert by_key[(w, b, "oracle")]["tokens_per_s"] >= by_key[(w, b, "static:method=draft,k=4")]["tokens_per_s"]


def test_a_cell_at_batch_size_b_runs_b_requests_together(files):
    traces, cost = files
    result = replay("--traces", str(traces / "code.jsonl"), "--cost-model", str(cost), "--policy", "static",
                    "--batch-sizes", "1,3,16", "--waves", "1", "--json")
    assert result.exit_code == 0, result.stderr
    cells = {c["batch_size"]: c for c in json.loads(result.stdout)["cells"]}
    # the 3 recorded requests are repeated up to one batch at 16; each takes 10 steps off
    assert [(cells[b]["requests"], cells[b]["steps"]) for b in (1, 3, 16)] == [(3, 30), (3, 10), (16, 10)]
    assert cells[16]["tokens_per_s"] > 3 * cells[3]["tokens_per_s"]


def test_table(files):
    traces, cost = files
    result = replay("--traces", str(traces), "--cost-model", str(cost), "--policy", "heuristic", "--batch-sizes", "4")
    assert result.exit_code == 0, result.stderr
    assert "heuristic" in result.stdout and "code" in result.stdout and "prose" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--batch-sizes", "1,x", "--policy", "static"], "error: --batch-sizes: '1,x' is not a comma-separated list"),
    (["--batch-sizes", "0", "--policy", "static"], "error: --batch-sizes: '0' must list batch sizes of at least 1"),
    ([], "error: --policy: give at least one policy SPEC (or --oracle)"),
    (["--policy", "magic"], "error: policy 'magic': unknown"),
    (["--policy", "static", "--waves", "0"], "Usage:"),
    (["--policy", "static:k=99"], "error: policy static: k: Input should be less than or equal to 32"),
    (["--policy", "static:method=draft,k=2,top_k=2,budget=4"], "error: config 'draft k=2 topk=2,budget=4': dynamic"),
])
def test_bad_input_is_one_line_and_exit_2(files, args, message):
    traces, cost = files
    result = replay("--traces", str(traces), "--cost-model", str(cost), *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message)
    assert "Traceback" not in result.stderr


def test_cost_model_problems(files, tmp_path):
    traces, _ = files
    result = replay("--traces", str(traces), "--policy", "static")
    assert result.exit_code == 2 and "error: --cost-model: required" in result.stderr
    result = replay("--traces", str(traces), "--policy", "static", "--cost-model", str(tmp_path / "none.json"))
    assert result.exit_code == 2 and "none.json: no such file" in result.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1}))
    result = replay("--traces", str(traces), "--policy", "static", "--cost-model", str(bad))
    assert result.exit_code == 2 and "bad.json: engine: Field required" in result.stderr
    other = tmp_path / "other.json"
    other.write_text(linear_cost(target="another-model").to_json())
    result = replay("--traces", str(traces), "--policy", "static", "--cost-model", str(other))
    assert result.exit_code == 2 and "target 't' differs from the cost model's 'another-model'" in result.stderr


def test_bad_trace_file(files):
    traces, cost = files
    (traces / "zz.jsonl").write_text('{"version": 1}\n')
    result = replay("--traces", str(traces), "--cost-model", str(cost), "--policy", "static")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {traces / 'zz.jsonl'}:1: workload: missing field")
