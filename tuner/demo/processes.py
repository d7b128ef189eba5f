"""The services the demo starts (``spectune engine serve``, ``spectune sidecar``) as subprocesses on loopback, each
logging to its own file, and the guarantee that every one is stopped: ``Services`` stops what it started on leaving
its ``with`` block (normal end, error or Ctrl-C), an atexit hook does the same if the block is somehow skipped, and on
Linux the kernel sends SIGTERM to a service whose parent (the demo) dies without cleaning up, even from SIGKILL.

Services run in their own session, so a Ctrl-C at the terminal reaches only the demo, which then stops them in order.
"""

from __future__ import annotations

import atexit
import ctypes
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from tqdm import tqdm

PR_SET_PDEATHSIG = 1
# looked up here, not in the forked child: loading a library there can deadlock on a lock another thread held
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


class ServiceError(RuntimeError):
    """A service did not come up; the message names it, says why and where its log is."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the demo process goes away."""
    assert _PRCTL is not None
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


@dataclass
class Service:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGINT (a graceful uvicorn shutdown), then SIGKILL after ``timeout_s``; safe to call twice."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Services:
    """``with Services(log_dir, env) as services: engine = services.start("engine", [...])``; every service started
    is stopped, newest first, when the block ends. ``pids`` lists every process ever started."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.running: list[Service] = []
        self.pids: list[int] = []

    def start(self, name: str, args: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 600.0,
              progress: bool = True) -> Service:
        """``spectune ARGS --port P`` on a free port (``env`` added to the common one); returns once its
        ``/health`` answers 200."""
        port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tuner.cli", *args, "--port", str(port)], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env=self.env | (env or {}), start_new_session=True,
                preexec_fn=_die_with_parent if _PRCTL is not None else None)
        service = Service(name, f"http://127.0.0.1:{port}", proc, log_path)
        self.running.append(service)
        self.pids.append(proc.pid)
        self._wait_healthy(service, timeout_s, progress)
        return service

    def _wait_healthy(self, service: Service, timeout_s: float, progress: bool) -> None:
        start = time.monotonic()
        with tqdm(desc=f"start {service.name}", unit="s", bar_format="{desc}: {elapsed}", disable=not progress,
                  file=sys.stderr) as bar:
            while True:
                code = service.proc.poll()
                if code is not None:
                    raise ServiceError(f"{service.name} exited with code {code} while starting: "
                                       f"{last_line(service.log_path)} (log: {service.log_path})")
                try:
                    if httpx.get(f"{service.url}/health", timeout=2.0).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() - start > timeout_s:
                    raise ServiceError(f"{service.name} not healthy after {timeout_s:.0f} s (log: "
                                       f"{service.log_path})")
                bar.refresh()
                time.sleep(0.5)

    def stop(self, service: Service) -> None:
        service.stop()
        if service in self.running:
            self.running.remove(service)

    def stop_all(self) -> None:
        for service in reversed(list(self.running)):
            self.stop(service)

    def __enter__(self) -> Services:
        atexit.register(self.stop_all)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()  # if this is interrupted, the atexit hook stays registered and finishes the job
        atexit.unregister(self.stop_all)

