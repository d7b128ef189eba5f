"""SpecConfig -> llama-server flags, and the errors for configs llama.cpp cannot run (no server needed)."""

from __future__ import annotations

import pytest

from engine.config import SpecConfig, TreeShape
from tuner.engines.base import UnsupportedConfigError
from tuner.engines.llamacpp_config import LlamaCppExtension, spec_flags
from tuner.engines.llamacpp_server import ServerOptions, server_command


def flags(config: SpecConfig, ext: dict | None = None, **kw) -> list[str]:
    return spec_flags(config, LlamaCppExtension.parse(ext), **kw)


def test_off_adds_no_speculation_flags():
    assert flags(SpecConfig()) == []


def test_draft_maps_k_to_n_max_with_the_draft_model_and_threads():
    got = flags(SpecConfig(method="draft", k=5), {"draft_p_min": 0.75, "draft_n_min": 2}, draft_model="/m/d.gguf",
                threads=2)
    assert got == ["-md", "/m/d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "5",
                   "--spec-draft-n-min", "2", "--spec-draft-p-min", "0.75",
                   "--spec-draft-threads", "2", "--spec-draft-threads-batch", "2"]


def test_ngram_maps_to_ngram_simple_lookup_and_draft_lengths():
    got = flags(SpecConfig(method="ngram", k=10, min_n=3, max_n=3), {"ngram_min_hits": 2})
    assert got == ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                   "--spec-ngram-simple-size-m", "10", "--spec-ngram-simple-min-hits", "2"]


@pytest.mark.parametrize("spec_type", ["ngram-map-k", "ngram-map-k4v"])
def test_ngram_map_modes_use_their_own_flag_names(spec_type):
    got = flags(SpecConfig(method="ngram", k=8, min_n=4, max_n=4), {"spec_type": spec_type})
    assert got == ["--spec-type", spec_type, f"--spec-{spec_type}-size-n", "4", f"--spec-{spec_type}-size-m", "8"]


def test_ngram_mod_via_the_extension():
    got = flags(SpecConfig(method="ngram", k=32, min_n=16, max_n=16), {"spec_type": "ngram-mod", "ngram_mod_n_min": 8})
    assert got == ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "16", "--spec-ngram-mod-n-max", "32",
                   "--spec-ngram-mod-n-min", "8"]


@pytest.mark.parametrize(("config", "ext", "kw", "field", "why"), [
    (SpecConfig(method="draft", k=3, tree=TreeShape(branching=(2, 2))), None, {"draft_model": "d.gguf"},
     "tree", "single chain"),
    (SpecConfig(method="draft", k=3, tree=TreeShape(top_k=2, budget=4)), None, {"draft_model": "d.gguf"},
     "tree", "single chain"),
    (SpecConfig(method="draft", k=3), None, {}, "draft", "needs a draft model"),
    (SpecConfig(method="ngram", k=4, min_n=4, max_n=4), None, {"draft_model": "d.gguf"}, "draft", "only used by"),
    (SpecConfig(method="ngram", k=8), None, {}, "min_n", "one fixed n-gram length"),
    (SpecConfig(method="ngram", k=2, min_n=3, max_n=3), None, {}, "k", "never drafts"),
    (SpecConfig(method="ngram", k=8, min_n=3, max_n=3, max_batch_size=1), None, {"parallel": 4},
     "max_batch_size", "must be >= 4"),
    (SpecConfig(method="ngram", k=8, min_n=3, max_n=3), {"spec_type": "draft-simple"}, {}, "llamacpp.spec_type",
     "does not fit method 'ngram'"),
    (SpecConfig(method="draft", k=3), {"spec_type": "ngram-mod"}, {"draft_model": "d"}, "llamacpp.spec_type",
     "does not fit method 'draft'"),
    (SpecConfig(method="ngram", k=8, min_n=3, max_n=3), {"draft_p_min": 0.5}, {}, "llamacpp.draft_p_min",
     "only applies to draft-simple"),
    (SpecConfig(method="ngram", k=8, min_n=16, max_n=16), {"spec_type": "ngram-mod", "ngram_min_hits": 2}, {},
     "llamacpp.ngram_min_hits", "only applies to"),
    (SpecConfig(method="ngram", k=8, min_n=16, max_n=16), {"spec_type": "ngram-mod", "ngram_mod_n_min": 9}, {},
     "llamacpp.ngram_mod_n_min", "exceeds the draft cap k=8"),
    (SpecConfig(method="draft", k=3), {"draft_n_min": 4}, {"draft_model": "d"}, "llamacpp.draft_n_min",
     "exceeds the draft length k=3"),
    (SpecConfig(), {"spec_type": "ngram-mod"}, {}, "llamacpp", "method is off"),
])
def test_unmappable_configs_name_the_field(config, ext, kw, field, why):
    with pytest.raises(UnsupportedConfigError) as info:
        flags(config, ext, **kw)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ") and why in str(info.value)


@pytest.mark.parametrize(("ext", "field"), [
    ({"spec_type": "ngram-cache"}, "llamacpp.spec_type"),
    ({"draft_p_min": 1.5}, "llamacpp.draft_p_min"),
    ({"n_max": 64}, "llamacpp.n_max"),
])
def test_bad_extension_values_name_the_field(ext, field):
    with pytest.raises(UnsupportedConfigError) as info:
        LlamaCppExtension.parse(ext)
    assert info.value.field == field


def test_max_batch_size_at_or_above_the_slot_count_is_accepted():
    config = SpecConfig(method="ngram", k=8, min_n=3, max_n=3, max_batch_size=2)
    assert flags(config, parallel=2)[:2] == ["--spec-type", "ngram-simple"]


def test_server_command_listens_on_loopback_with_metrics_and_no_web_ui(tmp_path):
    options = ServerOptions(model=tmp_path / "m.gguf", threads=3, ctx_size=2048, parallel=2)
    cmd = server_command(tmp_path / "llama-server", options, 8123, ["--spec-type", "ngram-mod"])
    assert cmd[0] == str(tmp_path / "llama-server")
    joined = " ".join(cmd)
    for part in (f"-m {tmp_path / 'm.gguf'}", "-t 3", "-tb 3", "-c 2048", "-np 2", "--metrics", "--no-ui",
                 "--host 127.0.0.1", "--port 8123"):
        assert part in joined
    assert cmd[-2:] == ["--spec-type", "ngram-mod"]
