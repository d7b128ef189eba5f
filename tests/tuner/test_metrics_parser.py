"""The one spec-decode Prometheus parser, on scrapes in the three dialects it serves."""

from __future__ import annotations

import re

import pytest

from tuner.engines.prometheus import (
    WORKLOAD_LABEL,
    MetricsParseError,
    SpecDecodeCounters,
    delta_by_workload,
    parse_spec_decode,
)

# Captured from spectune's llama-server build (llama.cpp 0c1e570, SmolLM2-135M, ngram-simple n=2 m=8) after three
# greedy chat requests; the per-response timings summed to draft_n 162, draft_n_accepted 27.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 148
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 4.3738
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 132
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 18.772
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 105
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 106
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 162
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 27
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 32
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 43.7262
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 6.11248
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 4
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="4"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="5"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="6"} 3
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="7"} 3
"""  # noqa: E501

# vLLM v1 exposition (prometheus_client): model_name/engine labels, float values, _created samples.
VLLM = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 184.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7334e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 552.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7334e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 243.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 1.7334e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="0"} 130.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="1"} 75.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct",position="2"} 38.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
"""  # noqa: E501

# spectune's engine server: the vLLM names behind ``spectune:``, one series per workload.
SPECTUNE = """\
# HELP spectune:spec_decode_num_drafts_total Verify steps that carried at least one draft token.
# TYPE spectune:spec_decode_num_drafts_total counter
spectune:spec_decode_num_drafts_total{workload="code"} 10.0
spectune:spec_decode_num_drafts_total{workload="chat"} 4.0
# HELP spectune:spec_decode_num_draft_tokens_total Draft tokens proposed.
# TYPE spectune:spec_decode_num_draft_tokens_total counter
spectune:spec_decode_num_draft_tokens_total{workload="code"} 40.0
spectune:spec_decode_num_draft_tokens_total{workload="chat"} 16.0
# HELP spectune:spec_decode_num_accepted_tokens_total Draft tokens the target accepted.
# TYPE spectune:spec_decode_num_accepted_tokens_total counter
spectune:spec_decode_num_accepted_tokens_total{workload="code"} 25.0
spectune:spec_decode_num_accepted_tokens_total{workload="chat"} 3.0
# HELP spectune:spec_decode_num_accepted_tokens_per_pos_total Accepted draft tokens per position.
# TYPE spectune:spec_decode_num_accepted_tokens_per_pos_total counter
spectune:spec_decode_num_accepted_tokens_per_pos_total{position="0",workload="code"} 9.0
spectune:spec_decode_num_accepted_tokens_per_pos_total{position="1",workload="code"} 8.0
spectune:spec_decode_num_accepted_tokens_per_pos_total{position="2",workload="code"} 5.0
spectune:spec_decode_num_accepted_tokens_per_pos_total{position="3",workload="code"} 3.0
spectune:spec_decode_num_accepted_tokens_per_pos_total{position="0",workload="chat"} 3.0
"""


def test_llamacpp_scrape():
    got = parse_spec_decode(LLAMACPP, "llamacpp:")
    assert got == {"": SpecDecodeCounters(num_drafts=32, num_draft_tokens=162, num_accepted_tokens=27,
                                          accepted_per_position=(5, 4, 3, 3, 3, 3, 3, 3))}
    assert got[""].mean_acceptance_length == pytest.approx(1 + 27 / 32)


def test_llamacpp_before_any_draft_has_counters_but_no_positions():
    idle = LLAMACPP.split("# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total")[0]
    for name in ("draft_tokens", "accepted_tokens", "drafts"):
        idle = re.sub(rf"(spec_decode_num_{name}_total) \d+", r"\1 0", idle)
    assert parse_spec_decode(idle, "llamacpp:") == {"": SpecDecodeCounters()}


def test_vllm_scrape_folds_model_and_engine_labels_and_skips_created():
    got = parse_spec_decode(VLLM, "vllm:")[""]
    assert got == SpecDecodeCounters(num_drafts=184, num_draft_tokens=552, num_accepted_tokens=243,
                                     accepted_per_position=(130, 75, 38))
    assert got.acceptance_rate == pytest.approx(243 / 552)
    assert got.mean_acceptance_length == pytest.approx(1 + 243 / 184)


def test_spectune_scrape_per_workload_and_in_total():
    per = parse_spec_decode(SPECTUNE, "spectune:", workload_label=WORKLOAD_LABEL)
    assert per == {
        "chat": SpecDecodeCounters(4, 16, 3, (3,)),
        "code": SpecDecodeCounters(10, 40, 25, (9, 8, 5, 3)),
    }
    assert parse_spec_decode(SPECTUNE, "spectune:") == {"": per["chat"] + per["code"]}


def test_other_prefixes_are_ignored():
    assert parse_spec_decode(VLLM, "llamacpp:") == {}
    assert parse_spec_decode(SPECTUNE + VLLM, "vllm:") == parse_spec_decode(VLLM, "vllm:")


def test_delta_between_two_scrapes():
    before = parse_spec_decode(SPECTUNE, "spectune:", workload_label=WORKLOAD_LABEL)
    after_text = SPECTUNE.replace('{workload="code"} 10.0', '{workload="code"} 13.0').replace(
        '{workload="code"} 40.0', '{workload="code"} 52.0').replace(
        '{workload="code"} 25.0', '{workload="code"} 30.0') + (
        'spectune:spec_decode_num_drafts_total{workload="edit"} 2.0\n'
        'spectune:spec_decode_num_accepted_tokens_per_pos_total{position="4",workload="code"} 1.0\n')
    after = parse_spec_decode(after_text, "spectune:", workload_label=WORKLOAD_LABEL)
    delta = delta_by_workload(before, after)
    assert delta["code"] == SpecDecodeCounters(3, 12, 5, (0, 0, 0, 0, 1))
    assert delta["chat"] == SpecDecodeCounters(0, 0, 0, (0,))
    assert delta["edit"] == SpecDecodeCounters(2, 0, 0, ())


def test_counters_going_backwards_are_an_error():
    with pytest.raises(ValueError, match="went backwards"):
        SpecDecodeCounters(1, 3, 2, (2,)) - SpecDecodeCounters(5, 20, 9, (6,))


def test_prefix_must_end_with_a_colon():
    with pytest.raises(ValueError, match="prefix"):
        parse_spec_decode(VLLM, "vllm")


@pytest.mark.parametrize("text", [
    "vllm:spec_decode_num_drafts_total{engine=\"0\" 3\n",
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 3\n',
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="x"} 3\n',
])
def test_malformed_text_raises_a_parse_error(text):
    with pytest.raises(MetricsParseError):
        parse_spec_decode(text, "vllm:")
