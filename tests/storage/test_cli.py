"""``spectune db`` and ``spectune profiles`` end to end through the real command line, on both databases."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from storage.db import Database
from tuner.cli import app

runner = CliRunner()


def cli(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    return result.stdout if code == 0 else result.stderr


def url_of(db: Database) -> str:
    return db.url.render_as_string(hide_password=False)


def test_db_upgrade_and_current(make_empty_url: Callable[[], str]) -> None:
    url = make_empty_url()
    assert json.loads(cli("db", "current", "--db", url, "--json"))["current"] is None
    assert "out of date; run `spectune db upgrade --db" in cli("db", "current", "--db", url)
    error = cli("profiles", "list", "--db", url, code=2)
    assert error.startswith("error: ") and "run `spectune db upgrade --db" in error and error.count("\n") == 1
    assert "schema at revision" in cli("db", "upgrade", "--db", url)
    cli("db", "upgrade", "--db", url)  # idempotent
    state = json.loads(cli("db", "current", "--db", url, "--json"))
    assert state["up_to_date"] and state["current"] == state["head"]
    assert "none (base)" in cli("db", "downgrade", "--revision", "base", "--db", url)
    assert json.loads(cli("db", "current", "--db", url, "--json"))["current"] is None


def test_profiles_lifecycle(db: Database, tmp_path: Path) -> None:
    url = url_of(db)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps({"method": "draft", "k": 5}))

    first = json.loads(cli("profiles", "put", "chat", "--config", '{"method": "ngram", "k": 3}', "--db", url, "--json"))
    assert (first["version"], first["active"], first["config"]["k"]) == (1, True, 3)
    second = json.loads(cli("profiles", "put", "chat", "--config", str(config_file), "--target", "qwen-1.5b",
                            "--draft", "qwen-0.5b", "--note", "by hand", "--db", url, "--json"))
    assert second["identity"]["target"] == "qwen-1.5b" and second["provenance"]["note"] == "by hand"
    cli("profiles", "put", "chat", "--config", '{"method": "off"}', "--no-activate", "--db", url)

    listed = json.loads(cli("profiles", "list", "--db", url, "--json"))
    assert [(p["version"], p["active"]) for p in listed] == [(1, True), (2, True)]
    assert [p["version"] for p in json.loads(cli("profiles", "history", "chat", "--db", url, "--json"))] == [3, 2, 1]
    assert "draft k=5 chain" in cli("profiles", "history", "chat", "--db", url)

    shown = json.loads(cli("profiles", "show", "chat", "--target", "qwen-1.5b", "--draft", "qwen-0.5b",
                           "--dtype", "bfloat16", "--db", url, "--json"))
    assert shown["version"] == 2  # exact-enough identity beats the portable profile
    assert json.loads(cli("profiles", "show", "chat", "--target", "llama", "--db", url, "--json"))["version"] == 1
    assert "version:      3" in cli("profiles", "show", "chat", "--version", "3", "--db", url)

    assert json.loads(cli("profiles", "activate", "chat", "--version", "3", "--db", url, "--json"))["active"]
    assert json.loads(cli("profiles", "rollback", "chat", "--db", url, "--json"))["version"] == 1
    assert "deleted version 3" in cli("profiles", "delete", "chat", "--version", "3", "--db", url)
    assert [p["version"] for p in json.loads(cli("profiles", "history", "chat", "--db", url, "--json"))] == [2, 1]


@pytest.mark.parametrize(("args", "message"), [
    (["show", "nope"], "unknown workload 'nope'"),
    (["history", "nope"], "unknown workload 'nope'"),
    (["activate", "nope", "--version", "1"], "unknown workload 'nope'"),
    (["delete", "nope", "--version", "1"], "unknown workload 'nope'"),
    (["list", "--workload", "nope"], "unknown workload 'nope'"),
    (["activate", "chat", "--version", "7"], "workload 'chat' has no version 7"),
    (["activate", "chat", "--version", "two"], "--version: expected a positive integer, got 'two'"),
    (["show", "chat", "--version", "-1"], "--version: expected a positive integer, got '-1'"),
    (["delete", "chat", "--version", "1"], "version 1 of workload 'chat' is active"),
    (["show", "chat"], "workload 'chat' has 2 active profiles"),
    (["put", "chat", "--config", '{"method": "ngram", "k": 99}'], "config.k: Input should be less than or equal"),
    (["put", "chat", "--config", '{"method": "ngram", "k": "four"}'], "config.k: Input should be a valid integer"),
    (["put", "chat", "--config", '{"method": "ngram"'], "--config: invalid JSON"),
    (["put", "chat", "--config", "missing.json"], "--config: neither inline JSON nor an existing file"),
    (["put", "chat", "--config", "{}", "--schedule", '[{"min_batch": 4, "max_batch": 2, "config": {}}]'],
     "schedule.0: Value error, max_batch (2) is below min_batch (4)"),
    (["put", "chat", "--config", "{}", "--measurements", '{"buckets": []}'], "measurements.buckets"),
    (["put", "two words", "--config", "{}"], "workload name 'two words'"),
])
def test_bad_input_is_one_error_line_and_exit_2(db: Database, args: list[str], message: str) -> None:
    url = url_of(db)
    cli("profiles", "put", "chat", "--config", '{"method": "ngram"}', "--db", url)
    cli("profiles", "put", "chat", "--config", '{"method": "draft"}', "--target", "qwen", "--db", url)
    error = cli("profiles", *args, "--db", url, code=2)
    assert error.startswith("error: ") and message in error and error.count("\n") == 1, error


def test_show_refuses_a_profile_tuned_for_another_engine(db: Database) -> None:
    url = url_of(db)
    cli("profiles", "put", "code", "--config", '{"method": "draft"}', "--target", "qwen", "--db", url)
    error = cli("profiles", "show", "code", "--target", "llama", "--db", url, code=2)
    assert error == "error: no active profile of workload 'code' applies to target=llama\n"


def test_unreachable_or_malformed_database_is_an_error_line() -> None:
    assert "invalid database URL 'not a url'" in cli("profiles", "list", "--db", "not a url", code=2)
    error = cli("db", "current", "--db", "postgresql+psycopg://u:secret@127.0.0.1:1/none", code=2)
    assert error.startswith("error: database error:") and "secret" not in error
