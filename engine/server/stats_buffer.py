"""A bounded ring buffer of statistics entries, read with a cursor (``GET /stats?since=CURSOR``)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

EntryKind = Literal["step", "request", "config"]


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int  # monotonically increasing from 0; the cursor is the next seq a reader wants
    kind: EntryKind
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Page:
    entries: list[Entry]
    next_cursor: int
    dropped: int  # entries at or after the requested cursor that were evicted before this read
    dropped_total: int  # entries ever evicted


class StatsBuffer:
    """Keeps the newest ``capacity`` entries; older ones are dropped and counted. Thread-safe."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("stats_capacity: must be at least 1")
        self._entries: deque[Entry] = deque(maxlen=capacity)
        self._next_seq = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._entries.maxlen or 0

    @property
    def head(self) -> int:
        """The seq the next entry will get."""
        return self._next_seq

    def append(self, kind: EntryKind, data: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(Entry(self._next_seq, kind, data))
            self._next_seq += 1

    def read(self, since: int = 0, limit: int = 1000) -> Page:
        """Entries with ``seq >= since``, oldest first, at most ``limit`` (>= 1); ``next_cursor`` continues after
        them."""
        with self._lock:
            oldest = self._next_seq - len(self._entries)
            start = max(since, oldest)
            offset = start - oldest
            chosen = [self._entries[i] for i in range(offset, min(offset + limit, len(self._entries)))]
            # nothing chosen means the cursor is at (or, from an earlier server run, past) the head
            next_cursor = chosen[-1].seq + 1 if chosen else self._next_seq
            return Page(chosen, next_cursor, max(0, oldest - since), oldest)
