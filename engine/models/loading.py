"""``load_model``: a registry name, a Hugging Face directory or a .gguf file in, a LoadedModel in eval mode out."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.models.cache import cache_lock, gguf_conversion_dir
from engine.models.convert import convert_gguf
from engine.models.fetch import fetch_model
from engine.models.fused import quantize_int8_fused
from engine.models.loaded import LoadedModel
from engine.models.packed import packed_decoder
from engine.models.quantize import require_cpu
from engine.models.registry import REGISTRY, ModelNotFoundError

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
INT8 = "int8"  # float32 activations with dynamic int8 weights (engine.models.quantize); meant for drafts on CPU
PRECISIONS = (*DTYPES, INT8)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_target_dtype(dtype: str | torch.dtype) -> None:
    """Refuse int8 for a target. Dynamic int8 quantizes each forward's activations with one scale over all its tokens,
    so a row's logits would depend on what else its forward holds (the batch's other rows, how many tokens a step
    verifies): verification would be neither exact nor independent of the neighbours. A draft's numbers only move
    acceptance, so int8 stays available there."""
    if dtype == INT8:
        raise ValueError("dtype: int8 is for the draft (--draft-dtype int8), not the target: it quantizes each "
                         "forward's activations with one scale over all its tokens, so a request's output would "
                         "depend on its batch neighbours and on how many tokens a step verifies")


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype weights load in; int8 loads float32 and quantizes afterwards."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if dtype == INT8:
        return torch.float32
    raise ValueError(f"dtype: {dtype!r} is not supported; choose one of {', '.join(PRECISIONS)}")


def resolve_device(device: str | torch.device | None, dtype: torch.dtype) -> torch.device:
    """CUDA when available unless a device is given; float16 only on CUDA (CPU fp16 matmuls are slow and lossy)."""
    if device is None:
        resolved = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            resolved = torch.device(device)
        except RuntimeError:
            raise ValueError(f"device: {device!r} is not a torch device") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} requested but CUDA is not available")
    if dtype == torch.float16 and resolved.type != "cuda":
        raise ValueError(f"dtype: float16 is only supported on CUDA, not on {resolved.type}; use bfloat16 or float32")
    return resolved


def resolve_source(name_or_path: str, progress: bool = True) -> tuple[str, Path]:
    """The LoadedModel name and the safetensors directory for a registry name, model directory or .gguf file."""
    if name_or_path in REGISTRY:
        return name_or_path, fetch_model(name_or_path, progress)
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return str(path.resolve()), path
    if path.is_file() and path.suffix.lower() == ".gguf":
        out = gguf_conversion_dir(path)
        with cache_lock(out.name):
            return str(path.resolve()), convert_gguf(path, out, progress)
    raise ModelNotFoundError(name_or_path)


def load_model(name_or_path: str | Path, dtype: str | torch.dtype = "float32", device: str | torch.device | None = None,
               attn_implementation: str = "sdpa", progress: bool = True) -> LoadedModel:
    """Load a model for the engine, fetching or converting it into the cache first when needed."""
    torch_dtype = resolve_dtype(dtype)
    resolved_device = resolve_device(device, torch_dtype)
    if dtype == INT8:
        require_cpu(resolved_device)
    name, directory = resolve_source(str(name_or_path), progress)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype, attn_implementation=attn_implementation)
    model.to(resolved_device)
    if dtype == INT8:
        model, fast = quantize_int8_fused(model)
    else:
        fast = packed_decoder(model)
    has_tokenizer = any((directory / f).is_file() for f in _TOKENIZER_FILES)
    tokenizer = AutoTokenizer.from_pretrained(directory) if has_tokenizer else None
    precision = dtype if isinstance(dtype, str) else str(torch_dtype).removeprefix("torch.")
    return LoadedModel.from_model(model, tokenizer, name=name, precision=precision, fast_decoder=fast)
