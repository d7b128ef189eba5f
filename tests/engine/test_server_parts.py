"""The engine server's parts in-process: incremental text with stop strings, the stats ring buffer, the live config
table, startup profiles (fail-open) and the command line's input errors."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast
from typer.testing import CliRunner

from engine.config import SpecConfig
from engine.policy import DecisionContext
from engine.server.live_config import LiveConfigPolicy, LiveConfigTable
from engine.server.metrics import ServerMetrics
from engine.server.profile_source import EngineIdentity, ProfileSourceError, apply_profile_source, fetch_profiles
from engine.server.settings import ServerSettings
from engine.server.stats_buffer import StatsBuffer
from engine.server.text import TextStream
from tuner.cli import app

IDENTITY = EngineIdentity("tiny", None, "float32", "cpu:test:2")


@pytest.fixture(scope="module")
def byte_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE without merges: one token per byte, so a multi-byte character spans several tokens."""
    alphabet = sorted(ByteLevel.alphabet())
    backend = Tokenizer(BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def feed(stream: TextStream, ids: list[int], per_step: int) -> list[str]:
    return [stream.push(ids[i:i + per_step]) for i in range(0, len(ids), per_step)]


# -- text ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("per_step", [1, 2, 3, 7])
def test_text_deltas_add_up_to_the_decoded_text(byte_tokenizer, per_step):
    text = "héllo wörld — ✓ done"
    ids = byte_tokenizer.encode(text)
    stream = TextStream(byte_tokenizer, byte_tokenizer.encode("prompt: "))
    deltas = feed(stream, ids, per_step)
    assert "".join(deltas) + stream.finish() == text
    assert not any("\ufffd" in d for d in deltas)  # half a character is never shown


def test_stop_string_spanning_tokens_cuts_the_text_and_is_never_shown(byte_tokenizer):
    ids = byte_tokenizer.encode("abc STOP def")
    stream = TextStream(byte_tokenizer, [], stop=("STOP", "zzz"))
    shown = ""
    for i in range(len(ids)):
        shown += stream.push(ids[i:i + 1])
        assert "S" not in shown
        if stream.stopped:
            break
    assert stream.stopped and shown + stream.finish() == "abc "
    assert stream.push(byte_tokenizer.encode("more")) == ""


def test_text_without_stop_strings_is_not_held_back(byte_tokenizer):
    stream = TextStream(byte_tokenizer, [])
    assert stream.push(byte_tokenizer.encode("ab")) == "ab"


# -- stats buffer ----------------------------------------------------------------------------------------------------
def test_ring_buffer_drops_and_counts_the_oldest_entries():
    buffer = StatsBuffer(capacity=3)
    for i in range(5):
        buffer.append("step", {"i": i})
    page = buffer.read(0)
    assert [e.seq for e in page.entries] == [2, 3, 4] and [e.data["i"] for e in page.entries] == [2, 3, 4]
    assert (page.next_cursor, page.dropped, page.dropped_total) == (5, 2, 2)
    assert buffer.read(3).dropped == 0 and [e.seq for e in buffer.read(3).entries] == [3, 4]
    assert buffer.read(5).entries == [] and buffer.read(5).next_cursor == 5
    assert buffer.read(99).next_cursor == 5  # a cursor from an earlier server run starts over at the head
    first = buffer.read(0, limit=2)
    assert [e.seq for e in first.entries] == [2, 3] and first.next_cursor == 4


def test_ring_buffer_capacity_must_be_positive():
    with pytest.raises(ValueError, match="stats_capacity"):
        StatsBuffer(0)


# -- live config -----------------------------------------------------------------------------------------------------
def _ctx(workload: str) -> DecisionContext:
    return DecisionContext("r", workload, 1, 10, 5, 0, 0, SpecConfig(method="ngram", k=7), None)


def test_live_config_policy_follows_the_table_per_workload():
    table = LiveConfigTable()
    policy = LiveConfigPolicy(table)
    assert policy.decide(_ctx("code")) == SpecConfig()  # the submitted config does not matter
    before = table.snapshot
    table.set(SpecConfig(method="ngram", k=3), "code")
    assert policy.decide(_ctx("code")).k == 3 and policy.decide(_ctx("chat")) == SpecConfig()
    table.set(SpecConfig(method="ngram", k=2))
    assert policy.decide(_ctx("chat")).k == 2 and policy.decide(_ctx("code")).k == 3
    assert before.lookup("code") == SpecConfig()  # snapshots are immutable
    assert table.snapshot.to_dict()["workloads"]["code"]["k"] == 3


# -- startup profiles ------------------------------------------------------------------------------------------------
def test_profile_file_fills_the_table(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"version": 3, "default": {"method": "ngram", "k": 2},
                                "workloads": {"code": {"method": "ngram", "k": 6}}}))
    table, metrics = LiveConfigTable(), ServerMetrics()
    assert apply_profile_source(str(path), IDENTITY, table, metrics, has_draft=False)
    assert table.lookup("code").k == 6 and table.lookup("other").k == 2
    assert b"profile_source_failures_total{" not in metrics.render()


@pytest.mark.parametrize(("content", "reason", "message"), [
    (None, "unreadable", "No such file"),
    ("{not json", "invalid", "not JSON"),
    (json.dumps({"workloads": {"code": {"method": "ngram", "k": 99}}}), "invalid", "workloads.code.k"),
    (json.dumps({"workloads": {"code": {"method": "ngram", "depth": 2}}}), "invalid", "workloads.code.depth"),
    (json.dumps({"workloads": {"bad name": {"method": "off"}}}), "invalid", "workloads.bad name"),
])
def test_a_bad_profile_source_names_the_problem(tmp_path, content, reason, message):
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ProfileSourceError, match=message) as caught:
        fetch_profiles(str(path), IDENTITY)
    assert caught.value.reason == reason


def test_a_bad_profile_source_fails_open_and_is_counted(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"workloads": {"code": {"method": "draft", "k": 3}}}))
    table, metrics = LiveConfigTable(), ServerMetrics()
    table.set(SpecConfig(method="ngram", k=5))
    assert not apply_profile_source(str(path), IDENTITY, table, metrics, has_draft=False)
    assert table.snapshot.workloads == {} and table.lookup("code").k == 5
    assert b'spectune:profile_source_failures_total{reason="invalid"} 1.0' in metrics.render()


# -- settings and command line ---------------------------------------------------------------------------------------
def test_settings_read_the_admin_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("SPECTUNE_ADMIN_TOKEN", "s3cret")
    assert ServerSettings(target="x").admin_token.get_secret_value() == "s3cret"
    monkeypatch.setenv("SPECTUNE_ADMIN_TOKEN", "")
    assert ServerSettings(target="x").admin_token is None


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "no-such-model"], "error: unknown model 'no-such-model'"),
    (["--target", "x", "--max-batch", "0"], "error: max_batch: Input should be greater than or equal to 1"),
    (["--target", "x", "--dtype", "int4"], "error: dtype: Input should be 'float32', 'bfloat16', 'float16' or 'int8'"),
    (["--target", "x", "--dtype", "int8"], "error: dtype: int8 is for the draft (--draft-dtype int8), not the target"),
    (["--target", "x", "--log-level", "loud"], "error: log-level: 'loud' is not one of"),
])
def test_serve_refuses_bad_input_with_one_line(args, message):
    result = CliRunner().invoke(app, ["engine", "serve", *args])
    assert result.exit_code == 2
    assert result.output.strip().startswith(message)
