"""Build llama.cpp's ``llama-server`` from the source PyPI ships, into a versioned cache directory.

The ``llama-cpp-python`` sdist vendors a full llama.cpp tree (``vendor/llama.cpp``); PyPI is the only network this
project may use, so that is where the source comes from. Only ``llama-server`` is built, for this CPU
(``GGML_NATIVE``), statically linked, without the web UI (its prebuilt assets would be fetched from elsewhere).
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from engine.models.cache import cache_root

PYPI_PACKAGE = "llama-cpp-python"
PYPI_VERSION = "0.3.36"
LLAMACPP_COMMIT = "0c1e570"  # the llama.cpp commit that sdist vendors

# ggml's AMX matmul, which -march=native compiles in on an AMX CPU, crashed llama-server at its first forward on an
# AMX-capable VM here (SIGSEGV in ggml_backend_amx_mul_mat, Xeon with AVX512+bf16+amx, 2026-12-07; ``--no-repack``
# avoided it). Explicit -mno flags keep AMX out whatever -march=native enables (GCC and clang let explicit ISA flags
# win over -march in any order).
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # ON by default: would download web-UI assets at configure time
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
) + ((f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}") if platform.machine() in ("x86_64", "AMD64") else ())
# Cached builds live under the version and this build number: raise it whenever CMAKE_OPTIONS change, so that a build
# made with the old options is not reused (2: without AMX).
BUILD = 2

Progress = Callable[[str], None]


class InstallError(RuntimeError):
    """The build cannot run here (missing tool) or failed; the message says which and what to do."""


@dataclass(frozen=True)
class LlamaCppInstall:
    """Where one built llama.cpp version lives."""

    root: Path

    @property
    def server(self) -> Path:
        return self.root / "bin" / "llama-server"

    @property
    def installed(self) -> bool:
        return self.server.is_file() and os.access(self.server, os.X_OK)


def default_install(version: str = PYPI_VERSION) -> LlamaCppInstall:
    return LlamaCppInstall(cache_root() / "llama.cpp" / f"{version}-build{BUILD}")


def find_llama_server() -> Path:
    """The installed ``llama-server``; InstallError naming the install command when it is missing."""
    install = default_install()
    if not install.installed:
        raise InstallError(f"llama-server is not built ({install.server} missing); "
                           "run: spectune engines install llama.cpp")
    return install.server


def check_toolchain() -> tuple[str, str | None]:
    """cmake and a C++ compiler must exist; ninja is used when present. Returns (cmake, ninja or None)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise InstallError("cmake not found on PATH; install it (e.g. apt-get install cmake) and retry")
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None or shutil.which(cxx) is None:
        raise InstallError("no C++ compiler found (c++, g++ or clang++, or $CXX); install one "
                           "(e.g. apt-get install g++) and retry")
    return cmake, shutil.which("ninja")


def install_llama_server(jobs: int = 2, install: LlamaCppInstall | None = None,
                         progress: Progress = print) -> LlamaCppInstall:
    """Build ``llama-server`` unless it is already in the cache; safe to call from several processes at once."""
    install = install or default_install()
    if install.installed:
        progress(f"llama-server {PYPI_VERSION} (llama.cpp {LLAMACPP_COMMIT}) already built: {install.server}")
        return install
    cmake, ninja = check_toolchain()
    install.root.mkdir(parents=True, exist_ok=True)
    with _locked(install.root.parent / f"{install.root.name}.lock", progress):
        if install.installed:  # another process finished the build while we waited
            return install
        for stale in install.root.glob("build-*"):  # left by a killed build; we hold the lock, so none is in use
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=install.root) as work:
            source = _fetch_source(Path(work), progress)
            started = time.monotonic()
            _build(source, Path(work) / "build", install.root, cmake, ninja, jobs, progress)
            built = Path(work) / "build" / "bin" / "llama-server"
            (install.root / "bin").mkdir(exist_ok=True)
            staged = install.root / "bin" / ".llama-server.tmp"
            shutil.copy2(built, staged)
            staged.replace(install.server)
        progress(f"built {install.server} in {time.monotonic() - started:.0f} s")
    return install


@contextmanager
def _locked(path: Path, progress: Progress) -> Iterator[None]:
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another process is building llama-server; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch_source(work: Path, progress: Progress) -> Path:
    progress(f"downloading the {PYPI_PACKAGE}=={PYPI_VERSION} sdist from PyPI (~77 MB, source only)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", str(work), f"{PYPI_PACKAGE}=={PYPI_VERSION}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise InstallError(f"pip download of {PYPI_PACKAGE}=={PYPI_VERSION} failed:\n{done.stderr.strip()[-2000:]}")
    archives = list(work.glob("llama_cpp_python-*.tar.gz"))
    if len(archives) != 1:
        raise InstallError(f"expected one llama_cpp_python sdist in {work}, found {[a.name for a in archives]}")
    progress(f"extracting {archives[0].name}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(work, filter="data")
    archives[0].unlink()
    source = work / f"llama_cpp_python-{PYPI_VERSION}" / "vendor" / "llama.cpp"
    if not (source / "tools" / "server").is_dir():
        raise InstallError(f"the sdist has no vendored llama.cpp server sources at {source / 'tools' / 'server'}")
    return source


_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STEP = re.compile(r"^\[\s*(\d+)%\]")


def _build(source: Path, build: Path, logs: Path, cmake: str, ninja: str | None, jobs: int,
           progress: Progress) -> None:
    generator = ["-G", "Ninja"] if ninja else []
    progress(f"configuring llama.cpp {LLAMACPP_COMMIT} with cmake ({'ninja' if ninja else 'make'})")
    _run([cmake, "-S", str(source), "-B", str(build), *generator, *CMAKE_OPTIONS], logs / "configure.log")
    progress(f"building llama-server with {jobs} job(s); this takes ~10-15 min on 2 cores")
    _run([cmake, "--build", str(build), "--target", "llama-server", "-j", str(jobs)], logs / "build.log",
         on_line=_step_reporter(progress))


def _step_reporter(progress: Progress) -> Callable[[str], None]:
    last = [-1]

    def report(line: str) -> None:
        if match := _NINJA_STEP.match(line):
            percent = 100 * int(match[1]) // int(match[2])
        elif match := _MAKE_STEP.match(line):
            percent = int(match[1])
        else:
            return
        if percent // 5 > last[0]:  # one line per 5 % step
            last[0] = percent // 5
            progress(f"  build {percent:3d}%  {line.strip()[:100]}")

    return report


def _run(command: list[str], log: Path, on_line: Callable[[str], None] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                  text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sink.write(line)
            if on_line is not None:
                on_line(line)
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise InstallError(f"{' '.join(command[:2])} ... failed (exit {proc.returncode}); last lines of {log}:\n{tail}")
