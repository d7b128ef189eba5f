"""Export formats: each engine's documented launch shape, and every field that does not translate is named."""

from __future__ import annotations

import json

import pytest

from engine.config import SpecConfig, TreeShape
from storage.schemas import Schedule, ScheduleEntry
from tuner.engines.llamacpp_config import spec_flags
from tuner.export import FORMATS, export_profile

NGRAM = SpecConfig(method="ngram", k=4, min_n=1, max_n=3)
DRAFT = SpecConfig(method="draft", k=6)
TREE = SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2)))
# k=6 up to batch 4, k=2 for 5..16, off above 16
SCHEDULE = Schedule([ScheduleEntry(min_batch=1, max_batch=4, config=DRAFT),
                     ScheduleEntry(min_batch=5, max_batch=16, config=DRAFT.model_copy(update={"k": 2})),
                     ScheduleEntry(min_batch=17, config=SpecConfig())])


def _flags(args: list[str]) -> dict[str, str]:
    return dict(zip(args[::2], args[1::2]))


def test_vllm_ngram_is_a_speculative_config_json() -> None:
    out = export_profile(NGRAM, None, "vllm")
    assert out.args[0] == "--speculative-config"
    assert json.loads(out.args[1]) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                                       "prompt_lookup_max": 3}
    assert out.untranslated == []


def test_vllm_draft_schedule_becomes_per_batch_size_tokens() -> None:
    out = export_profile(DRAFT, SCHEDULE, "vllm", draft_model="Qwen/Qwen2.5-Coder-0.5B")
    spec = json.loads(out.args[1])
    assert spec["method"] == "draft_model" and spec["model"] == "Qwen/Qwen2.5-Coder-0.5B"
    assert spec["num_speculative_tokens"] == 6
    ranges = spec["num_speculative_tokens_per_batch_size"]
    assert [r[:1] + r[2:] for r in ranges] == [[1, 6], [5, 2], [17, 0]]
    assert [r[1] for r in ranges[:2]] == [4, 16] and ranges[2][1] > 10_000


def test_vllm_names_the_tree_it_cannot_run() -> None:
    out = export_profile(TREE, None, "vllm")
    assert json.loads(out.args[1])["num_speculative_tokens"] == 3
    assert any(note.startswith("tree:") for note in out.untranslated)


def test_max_batch_size_is_an_off_range() -> None:
    capped = NGRAM.model_copy(update={"max_batch_size": 8})
    spec = json.loads(export_profile(capped, None, "vllm").args[1])
    assert spec["num_speculative_tokens_per_batch_size"][0][:3] == [1, 8, 4]
    assert spec["num_speculative_tokens_per_batch_size"][1][::2] == [9, 0]
    trt = export_profile(capped, None, "trtllm").config["speculative_config"]
    assert trt["max_concurrency"] == 8 and trt["draft_len_schedule"] == {1: 4, 9: 0}


def test_sglang_chain_tree_and_ngram() -> None:
    chain = _flags(export_profile(DRAFT, None, "sglang", draft_model="/m/draft").args)
    assert chain == {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": "/m/draft",
                     "--speculative-num-steps": "6", "--speculative-eagle-topk": "1",
                     "--speculative-num-draft-tokens": "7"}
    tree = export_profile(TREE, None, "sglang")
    assert tree.config["speculative_eagle_topk"] == 2
    assert tree.config["speculative_num_draft_tokens"] == TREE.tree.max_nodes(3) + 1
    assert any(n.startswith("tree: SGLang drafts dynamic trees") for n in tree.untranslated)
    dynamic = export_profile(SpecConfig(method="draft", k=5, tree=TreeShape(top_k=4, budget=16)), None, "sglang")
    assert (dynamic.config["speculative_eagle_topk"], dynamic.config["speculative_num_draft_tokens"]) == (4, 17)
    assert dynamic.untranslated == []
    ngram = _flags(export_profile(NGRAM, None, "sglang").args)
    assert ngram["--speculative-algorithm"] == "NGRAM"
    assert ngram["--speculative-ngram-min-match-window-size"] == "1"
    assert ngram["--speculative-ngram-max-match-window-size"] == "3"
    assert ngram["--speculative-num-draft-tokens"] == "5"
    assert any(n.startswith("schedule:") for n in export_profile(DRAFT, SCHEDULE, "sglang").untranslated)


def test_trtllm_draft_len_schedule() -> None:
    out = export_profile(DRAFT, SCHEDULE, "trtllm", draft_model="/m/draft")
    spec = out.config["speculative_config"]
    assert spec["decoding_type"] == "DraftTarget" and spec["speculative_model"] == "/m/draft"
    assert spec["max_draft_len"] == 6
    assert spec["draft_len_schedule"] == {1: 6, 5: 2, 17: 0}  # from that batch size up; {1: max_draft_len}
    assert spec["max_concurrency"] == 16
    assert out.untranslated == []
    ngram = export_profile(NGRAM, None, "trtllm").config["speculative_config"]
    assert ngram == {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3}
    assert any(n.startswith("min_n:") for n in export_profile(NGRAM.model_copy(update={"min_n": 2}), None,
                                                              "trtllm").untranslated)


def test_llamacpp_reuses_the_engine_flag_mapping() -> None:
    out = export_profile(DRAFT, None, "llamacpp", draft_model="d.gguf")
    assert out.args == ["-md", "d.gguf", "--draft-max", "6", "--draft-min", "0"]
    assert out.config["spec_flags"] == spec_flags(DRAFT, draft_model="d.gguf")
    window = export_profile(NGRAM, None, "llamacpp")
    assert any(n.startswith("min_n:") for n in window.untranslated)
    assert window.args == spec_flags(NGRAM.model_copy(update={"min_n": 3}))
    assert any(n.startswith("tree:") for n in export_profile(TREE, None, "llamacpp").untranslated)


def test_json_round_trips_and_off_exports_nothing() -> None:
    body = export_profile(DRAFT, SCHEDULE, "json").config
    assert SpecConfig.model_validate(body["config"]) == DRAFT
    assert Schedule.model_validate(body["schedule"]) == SCHEDULE
    for fmt in FORMATS[1:]:
        assert export_profile(SpecConfig(), None, fmt).args == []


def test_context_ranges_are_named_and_unknown_format_fails() -> None:
    by_context = [ScheduleEntry(min_context=1024, config=NGRAM)]
    assert any(n.startswith("schedule.context") for n in export_profile(DRAFT, by_context, "vllm").untranslated)
    with pytest.raises(ValueError, match="format: expected one of json, vllm"):
        export_profile(DRAFT, None, "tgi")
