"""Where fetched and converted models live on disk, and how to tell a complete conversion from an interrupted one."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import platformdirs
from filelock import FileLock

from engine.models.registry import get_spec

MARKER = ".spectune-complete"  # written last into a converted model directory


def cache_root() -> Path:
    """``$SPECTUNE_CACHE_DIR`` if set, else the user cache directory (``~/.cache/spectune`` on Linux)."""
    env = os.environ.get("SPECTUNE_CACHE_DIR")
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("spectune"))


def gguf_path(name: str) -> Path:
    """The assembled GGUF of a registered model (it exists once ``fetch_model(name)`` has run)."""
    return cache_root() / "gguf" / f"{get_spec(name).name}.gguf"


def model_dir(name: str) -> Path:
    """The converted fp32 safetensors directory of a registered model."""
    return cache_root() / "models" / get_spec(name).name


def gguf_conversion_dir(gguf_file: Path) -> Path:
    """Cache directory for an arbitrary GGUF file, keyed by its resolved path, size and mtime."""
    resolved = gguf_file.resolve()
    st = resolved.stat()
    key = hashlib.sha256(f"{resolved}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / "models" / f"gguf-{resolved.stem}-{key}"


def is_complete(directory: Path) -> bool:
    return (directory / MARKER).is_file()


def mark_complete(directory: Path, facts: dict[str, object]) -> None:
    (directory / MARKER).write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n")


@contextmanager
def cache_lock(key: str) -> Iterator[None]:
    """Serialise fetches and conversions of one model across processes (engineers and tests share the cache)."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_dir / f"{key}.lock")):
        yield
