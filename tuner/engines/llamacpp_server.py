"""One ``llama-server`` child process on loopback: launch, wait until healthy, stop without leaving orphans."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tuner.engines.base import EngineError

HOST = "127.0.0.1"


@dataclass(frozen=True)
class ServerOptions:
    """Everything about a launch except the speculation flags."""

    model: Path
    threads: int = 2
    ctx_size: int = 4096
    parallel: int = 1  # slots, i.e. the largest batch the server decodes
    port: int | None = None  # None: a free port
    startup_timeout_s: float = 180.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def server_command(binary: Path, options: ServerOptions, port: int, spec_flags: Sequence[str]) -> list[str]:
    """The full argv; the web UI is off (its assets are not built) and ``/metrics`` is on."""
    return [str(binary), "-m", str(options.model), "-t", str(options.threads), "-tb", str(options.threads),
            "-c", str(options.ctx_size), "-np", str(options.parallel), "--metrics", "--no-ui", "--jinja",
            "--host", HOST, "--port", str(port), *spec_flags]


class LlamaServerProcess:
    """A launched ``llama-server``. ``stop()`` terminates it, then kills it after a grace period.

    The process is also stopped when this object is garbage-collected or the interpreter exits (an orphan would keep
    gigabytes of weights mapped and a port bound).
    """

    def __init__(self, command: list[str], port: int) -> None:
        self.command = command
        self.port = port
        self.instance = uuid.uuid4().hex[:12]
        self._log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self._log.name)
        try:
            self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                          stderr=subprocess.STDOUT)
        except OSError as exc:
            self._log.close()
            self.log_path.unlink(missing_ok=True)
            raise EngineError(f"cannot run {command[0]}: {exc}") from exc
        self._finalizer = weakref.finalize(self, _terminate, self._proc, self._log, self.log_path)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self._proc.pid

    def running(self) -> bool:
        return self._proc.poll() is None

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running():
                raise EngineError(f"llama-server exited with code {self._proc.returncode} during startup; "
                                  f"last log lines:\n{self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.2)
        self.stop()
        raise EngineError(f"llama-server was not healthy after {timeout_s:.0f} s; last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(log removed)"

    def wait(self) -> int:
        """Block until the server exits on its own; its exit code."""
        return self._proc.wait()

    def stop(self, grace_s: float = 10.0) -> None:
        self._finalizer.detach()
        _terminate(self._proc, self._log, self.log_path, grace_s)


def _terminate(proc: subprocess.Popen[bytes], log: object, log_path: Path, grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()  # type: ignore[attr-defined]
    log_path.unlink(missing_ok=True)
