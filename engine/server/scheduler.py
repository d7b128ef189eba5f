"""The stepping thread: runs ``engine.step()`` while there is work, sleeps when idle, and hands each request's new
text to its HTTP handler through an asyncio queue. It also feeds ``/stats`` and ``/metrics`` from every step.

Continuous batching itself is the engine's (it admits waiting requests between steps, up to ``max_batch``); this
thread only decides when to step and where outputs go.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from engine.engine import Request, RequestOutput, SpecEngine
from engine.server.metrics import ServerMetrics
from engine.server.stats_buffer import StatsBuffer
from engine.server.text import TextStream
from engine.stats import RequestSummary

log = logging.getLogger("spectune.server")


class EngineUnavailable(RuntimeError):
    """The engine failed earlier and serves no more requests."""


@dataclass(frozen=True)
class Delta:
    text: str
    token_ids: list[int]


@dataclass(frozen=True)
class Final:
    text: str  # the last piece of text
    token_ids: list[int]
    finish_reason: str  # "stop" | "length"
    summary: RequestSummary
    ttft_s: float | None
    latency_s: float


@dataclass(frozen=True)
class Failure:
    message: str


Event = Delta | Final | Failure


@dataclass
class _Tracked:
    request: Request
    text: TextStream
    queue: asyncio.Queue[Event]
    loop: asyncio.AbstractEventLoop
    arrival: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None

    def send(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the event loop is gone (shutdown); nobody is listening any more
            pass


class Scheduler:
    """Owns the stepping thread. ``submit`` and ``abort`` are called from the event loop's thread."""

    def __init__(self, engine: SpecEngine, tokenizer: Any, metrics: ServerMetrics, stats: StatsBuffer) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.stats = stats
        self.failure: str | None = None  # set when a step raised; the engine's caches can no longer be trusted
        self._tracked: dict[str, _Tracked] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="spectune-step", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=30)

    def submit(self, request: Request, stop: tuple[str, ...] = ()) -> asyncio.Queue[Event]:
        """Queue ``request`` for the engine; raises ``EngineInputError`` for a request it cannot serve and
        ``EngineUnavailable`` once a step has failed."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        tracked = _Tracked(request, TextStream(self.tokenizer, request.prompt_ids, stop), queue,
                           asyncio.get_running_loop())
        with self._lock:
            if self.failure is not None:
                raise EngineUnavailable(self.failure)
            self._tracked[request.request_id] = tracked
        try:
            self.engine.add(request)
        except Exception:
            with self._lock:
                self._tracked.pop(request.request_id, None)
            raise
        self.metrics.prompt_tokens.labels(request.workload).inc(len(request.prompt_ids))
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        """The client went away: free the request's slot; it gets no more events."""
        with self._lock:
            self._tracked.pop(request_id, None)
        self.engine.abort(request_id)
        self._wake.set()

    # -- the stepping thread ----------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            if not self.engine.has_work():
                self.metrics.set_queue(0, 0)
                self._wake.wait()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # a failed forward leaves the KV cache in an unknown state: stop serving
                log.exception("engine step failed; the server stops accepting requests")
                self._fail(f"engine step failed: {type(exc).__name__}: {exc}")
                return
            now = time.perf_counter()
            for out in outputs:
                self._record(out, now)
            self.metrics.set_queue(self.engine.num_running, self.engine.num_waiting)

    def _record(self, out: RequestOutput, now: float) -> None:
        if out.stats is not None:
            self.metrics.observe_step(out.stats)
            self.stats.append("step", out.stats.to_dict())
        with self._lock:
            tracked = self._tracked.get(out.request_id)
        text = ""
        if tracked is not None and out.new_token_ids and not tracked.text.stopped:
            text = self._deliver(tracked, out, now)
        if out.finished:
            self._finish(tracked, out, now, text)
        elif tracked is not None and out.new_token_ids:
            tracked.send(Delta(text, list(out.new_token_ids)))

    def _deliver(self, tracked: _Tracked, out: RequestOutput, now: float) -> str:
        workload = tracked.request.workload
        if tracked.first_token is None:
            tracked.first_token = now
            self.metrics.ttft.labels(workload).observe(now - tracked.arrival)
        else:
            self.metrics.itl.labels(workload).observe(now - (tracked.last_token or now))
        tracked.last_token = now
        text = tracked.text.push(out.new_token_ids)
        if tracked.text.stopped and not out.finished:
            # a stop string matched: the engine drops the request before its next step and reports it finished
            self.engine.abort(out.request_id)
        return text

    def _finish(self, tracked: _Tracked | None, out: RequestOutput, now: float, text: str) -> None:
        summary = out.summary
        assert summary is not None  # the engine sets it on every finished output
        reason = out.finish_reason or "abort"
        if tracked is not None and tracked.text.stopped:
            reason = "stop"  # our own abort after a stop string: to the client this is a normal stop
        latency = ttft = None
        if tracked is not None:
            with self._lock:
                self._tracked.pop(out.request_id, None)
            latency = now - tracked.arrival
            ttft = tracked.first_token - tracked.arrival if tracked.first_token is not None else None
        self.metrics.observe_finished(summary, reason, latency if reason != "abort" else None)
        self.stats.append("request", summary.to_dict() | {"finish_reason": reason, "ttft_s": ttft,
                                                          "latency_s": latency})
        if tracked is not None and reason != "abort":
            tracked.send(Final(text + tracked.text.finish(), list(out.new_token_ids), reason, summary, ttft,
                               latency or 0.0))

    def _fail(self, message: str) -> None:
        with self._lock:
            self.failure = message
            tracked, self._tracked = list(self._tracked.values()), {}
        for t in tracked:
            t.send(Failure(message))
