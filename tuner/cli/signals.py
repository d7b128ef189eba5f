"""Stopping signals for the commands that start processes of their own."""

from __future__ import annotations

import signal


def sigterm_interrupts() -> None:
    """Make SIGTERM (``kill``, ``docker stop``, systemd) raise KeyboardInterrupt as Ctrl-C does, so the command's
    cleanup stops the processes it started; Python's default for SIGTERM exits at once and orphans them."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
