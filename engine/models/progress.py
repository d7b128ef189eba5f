"""Human-readable progress for the slow steps (download, assembly, conversion), printed to stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def step(message: str, enabled: bool = True) -> Iterator[None]:
    """Print ``message ...`` before a slow step and its wall time after it, when ``enabled``."""
    if enabled:
        print(f"{message} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    yield
    if enabled:
        print(f"{message}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
