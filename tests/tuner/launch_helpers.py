"""Shared by the ``spectune engine launch llama.cpp`` tests."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def interrupt_and_check_server_gone(proc: subprocess.Popen[str], server_pid: int, timeout_s: float,
                                    signum: int = signal.SIGINT) -> None:
    """Send the launch CLI ``signum`` (Ctrl-C's by default); it must exit 0 and llama-server (``server_pid``) must
    be gone."""
    proc.send_signal(signum)
    assert proc.wait(timeout=timeout_s) == 0
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{server_pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{server_pid}").exists()
