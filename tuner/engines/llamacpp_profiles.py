"""Which stored profile a llama-server gets at launch, and the engine identity llama.cpp profiles are stored under.

Identity convention: target and draft are the registry names (a ``.gguf`` file's stem otherwise), ``dtype`` is
``"gguf"`` (llama.cpp runs the file's own quantization, so profiles tuned on the PyTorch engine's float32/bfloat16 never
match it by accident) and ``hardware`` is the CPU fingerprint. Portable profiles apply too, if their config maps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from engine.config import SpecConfig
from storage.identity import EngineIdentity
from storage.profiles import resolve
from tuner.engines.base import UnsupportedConfigError

GGUF_DTYPE = "gguf"


def model_name(name_or_path: str) -> str:
    """The registry name, else the ``.gguf`` file's stem."""
    from engine.models.registry import REGISTRY

    return name_or_path if name_or_path in REGISTRY else Path(name_or_path).stem


def llamacpp_identity(model: str, draft: str | None) -> EngineIdentity:
    from engine.models.identity import hardware_fingerprint

    return EngineIdentity(target=model_name(model), draft=model_name(draft) if draft else None, dtype=GGUF_DTYPE,
                          hardware=hardware_fingerprint("cpu"))


def active_config(session: Session, workload: str,
                  identity: EngineIdentity) -> tuple[SpecConfig, dict[str, Any] | None]:
    """The config and ``llamacpp`` extension of ``workload``'s active profile for ``identity``; ValueError when there
    is none to apply."""
    record = resolve(session, workload, identity)
    if record is None:
        raise ValueError(f"workload: {workload!r} has no active profile for {identity}")
    if record.schedule is not None:
        raise UnsupportedConfigError(
            "schedule", f"version {record.version} of {workload!r} switches configs by batch size or context length; "
            "llama-server fixes one config at launch")
    return record.config, record.extensions.get("llamacpp")
