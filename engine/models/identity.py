"""Short stable names for a model and for the hardware it runs on; profiles are stored under both."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from engine.models.loaded import LoadedModel
from engine.models.registry import REGISTRY


def model_identity(loaded: LoadedModel) -> str:
    """The registry name, else the model directory's name (a .gguf file's stem); ``@int8`` marks int8 weights, whose
    speed and draft ranks differ from the same model's float weights."""
    if loaded.name in REGISTRY:
        name = loaded.name
    else:
        path = Path(loaded.name)
        name = path.stem if path.suffix.lower() == ".gguf" else path.name or loaded.name
    return f"{name}@int8" if loaded.precision == "int8" else name


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line of /proc/cpuinfo, or None where there is none (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_matmul_isa() -> str:
    """The vector instructions torch's CPU kernels use (``AVX2``, ``AVX512``...), plus ``+bf16`` / ``+amx`` where the
    CPU multiplies bfloat16 natively. Two CPUs sold under one model name can differ here, and it changes the cost
    curve several-fold: without native bf16 a bfloat16 forward of many tokens (prefill, a k-token verify) runs far
    slower than in float32, while a one-token step stays faster."""
    flags = set((_cpuinfo("flags") or "").split())
    native = [name for flag, name in (("avx512_bf16", "bf16"), ("amx_bf16", "amx")) if flag in flags]
    return "+".join([torch.backends.cpu.get_cpu_capability(), *native])


def hardware_fingerprint(device: str | torch.device | None = None) -> str:
    """``cuda:<device name>`` or ``cpu:<cpu model>:<matmul isa>:<usable cores>`` for ``device`` (default: CUDA when
    available)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    resolved = torch.device(device)
    if resolved.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(resolved)}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    model = _cpuinfo("model name") or platform.processor() or platform.machine()
    return f"cpu:{model}:{cpu_matmul_isa()}:{cores}"
