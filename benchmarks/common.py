"""Shared timing helpers for benchmarks: interleaved repeats, median with spread, forward-pass counters."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

T = TypeVar("T")


@dataclass(frozen=True)
class Spread:
    """Median of repeated samples with their min and max."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        if not samples:
            raise ValueError("samples: need at least one")
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))

    def fmt(self, digits: int = 2) -> str:
        """``5.21 (4.90-5.40)``; a single sample prints alone."""
        if self.n == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def interleaved(items: Sequence[T], reps: int) -> Iterator[tuple[int, T]]:
    """``(rep, item)`` for ``reps`` passes over ``items``, each pass rotated by one more place, so slow drift and
    neighbours' load fall on every item alike instead of always on the same one."""
    n = len(items)
    for rep in range(reps):
        shift = rep % n if n else 0
        for item in list(items[shift:]) + list(items[:shift]):
            yield rep, item


@dataclass
class ForwardLog:
    """Shapes ``(batch, tokens)`` of every forward call seen by a counter."""

    calls: list[tuple[int, int]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.calls)

    @property
    def tokens(self) -> int:
        return sum(b * q for b, q in self.calls)


@contextmanager
def count_forwards(*modules: Any) -> Iterator[list[ForwardLog]]:
    """Count forward calls (and the ``input_ids`` shape of each) on every module, one ``ForwardLog`` per module.

    Hook the decoder stack (``model.get_decoder()``), not the LM wrapper: it is what both ``generate`` and an engine
    that calls the decoder directly go through."""
    logs = [ForwardLog() for _ in modules]

    def hook_for(log: ForwardLog):
        def hook(_module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None:
                log.calls.append((int(ids.shape[0]), int(ids.shape[1])))
        return hook

    with ExitStack() as stack:
        for module, log in zip(modules, logs):
            stack.callback(module.register_forward_pre_hook(hook_for(log), with_kwargs=True).remove)
        yield logs


@dataclass
class Stopwatch:
    """Wall time and this process's CPU time of a block. ``cpu_share`` well below its usual value marks a sample that
    neighbours' load slowed down (the CPU time barely moves, the wall time grows)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def cpu_share(self) -> float:
        """CPU seconds per wall second per intra-op thread."""
        return self.cpu_s / (self.wall_s * torch.get_num_threads()) if self.wall_s > 0 else 0.0


@contextmanager
def stopwatch() -> Iterator[Stopwatch]:
    watch = Stopwatch()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield watch
    finally:
        watch.wall_s = time.perf_counter() - wall
        watch.cpu_s = time.process_time() - cpu


def first_diff(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix of the other); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def geomean(values: Sequence[float]) -> float:
    return statistics.geometric_mean(values) if values else 0.0


def pin_threads(n: int) -> None:
    """Same intra-op thread count for every side of a comparison."""
    torch.set_num_threads(n)


def measure_interleaved(runs: dict[tuple, Callable[[], None]], rounds: int, log) -> dict[tuple, Spread]:
    """Each of ``runs`` timed once per round for ``rounds`` rounds, in a rotated order, after one untimed warm-up
    call each; ``log`` is told each round's start."""
    for run in runs.values():  # warm-up: first calls allocate and pick kernels
        run()
    times: dict[tuple, list[float]] = {key: [] for key in runs}
    for rep, key in interleaved(list(runs), rounds):
        start = time.perf_counter()
        runs[key]()
        times[key].append(time.perf_counter() - start)
        if key == next(iter(runs)):
            log(f"round {rep + 1}/{rounds}")
    return {key: Spread.of(t) for key, t in times.items()}


def require_positive(parser: argparse.ArgumentParser, args: argparse.Namespace, fields: Sequence[str]) -> None:
    """A parser error naming the first of ``fields`` (argument names with underscores) below 1."""
    for name in fields:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1")


def elapsed_log() -> Callable[[str], None]:
    """A progress logger to stderr, each line stamped with the seconds since this call."""
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return log
