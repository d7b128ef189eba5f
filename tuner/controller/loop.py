"""The controller: poll the engine's ``/stats`` by cursor, aggregate per workload, price configs with the goodput
estimator, and apply stabilised per-workload changes through ``PUT /admin/spec-config``, rolling back changes that
lower measured goodput. Every decision is stored with its evidence.

Fail-open: an unreachable engine is retried with exponential back-off; a database that is down only costs the audit
trail (decisions wait in a bounded backlog and are counted) — configs already applied stay as they are, and nothing
here can stop the engine from serving.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.config import SpecConfig
from storage.db import Database
from storage.decisions import record_decision
from storage.errors import StorageError
from storage.schemas import DecisionCreate
from tuner.controller.aggregate import WorkloadStats
from tuner.controller.drift import DriftOptions, Profile, drift_reasons
from tuner.controller.estimate import Estimator, Recommendation
from tuner.controller.identify import Identifier
from tuner.controller.retune import Retuner
from tuner.controller.stabilise import Stabiliser
from tuner.engines.base import EngineError
from tuner.engines.spectune import StatsPage
from tuner.sidecar.metrics import SidecarMetrics

log = logging.getLogger("spectune.controller")

DEFAULT_WORKLOAD = "default"
BACKLOG = 1000
MIN_BACKOFF_S = 1.0
MAX_BACKOFF_S = 60.0


class SteerableEngine(Protocol):
    """What the controller needs of an engine (``tuner.engines.spectune.SpectuneEngine`` provides it)."""

    def stats_page(self, since: int = 0, limit: int = 1000) -> StatsPage: ...

    def spec_configs(self) -> dict[str, Any]: ...

    def apply(self, workload: str, config: SpecConfig) -> None: ...


def _finite(value: Any) -> Any:
    """JSON-safe evidence: NaN and infinities become ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


@dataclass
class _Workload:
    stats: WorkloadStats = field(default_factory=WorkloadStats)
    reference: Profile | None = None
    reference_at_request: int = 0
    last_hold: SpecConfig | None = None


class Controller:
    """One engine, one thread (``tick`` or ``run``); reads for the API (``recommend``, ``snapshot``) take the lock."""

    def __init__(self, engine: SteerableEngine, estimator: Estimator, db: Database | None = None, *,
                 metrics: SidecarMetrics | None = None, stabiliser: Stabiliser | None = None,
                 drift: DriftOptions | None = None, retuner: Retuner | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.estimator = estimator
        self.db = db
        self.metrics = metrics or SidecarMetrics()
        self.stabiliser = stabiliser or Stabiliser()
        self.drift = drift or DriftOptions()
        self.retuner = retuner
        self.clock = clock
        self.identifier = Identifier()
        self.cursor = 0
        self.epoch: str | None = None
        self.default = SpecConfig()
        self.applied: dict[str, SpecConfig] = {}
        self.workloads: dict[str, _Workload] = {}
        self.backlog: deque[tuple[str, DecisionCreate]] = deque(maxlen=BACKLOG)
        self.backoff_s = 0.0
        self.retry_at = -math.inf
        self.lock = threading.Lock()

    # -- the loop ---------------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        while not stop.is_set():
            self.tick()
            stop.wait(interval_s)

    def tick(self) -> None:
        """One poll: read new statistics, then decide for every workload with enough of them."""
        now = self.clock()
        if now < self.retry_at:
            return
        try:
            page = self.engine.stats_page(self.cursor)
            if page.epoch != self.epoch:  # first contact or engine restart: its configs and cursor start over
                self._sync(page.epoch)
                page = self.engine.stats_page(self.cursor)
        except EngineError as exc:
            self.backoff_s = min(max(self.backoff_s * 2, MIN_BACKOFF_S), MAX_BACKOFF_S)
            self.retry_at = now + self.backoff_s
            self.metrics.fail_opens.labels("engine_unreachable").inc()
            log.warning("engine unreachable (retry in %.0fs): %s", self.backoff_s, exc)
            return
        self.backoff_s, self.retry_at = 0.0, -math.inf
        self.metrics.polls.inc()
        with self.lock:
            self._ingest(page, now)
        self._flush_backlog()
        for name in list(self.workloads):
            try:
                self._decide(name, now)
            except EngineError as exc:
                self.metrics.fail_opens.labels("engine_unreachable").inc()
                log.warning("could not apply a config for %s: %s", name, exc)
                return

    def _sync(self, epoch: str) -> None:
        table = self.engine.spec_configs()
        with self.lock:
            self.epoch, self.cursor = epoch, 0
            self.default = SpecConfig.model_validate(table["default"])
            self.applied = {name: SpecConfig.model_validate(cfg) for name, cfg in table["workloads"].items()}

    def _ingest(self, page: StatsPage, now: float) -> None:
        self.cursor = page.next_cursor
        for step in page.steps:
            self._workload(step.workload).stats.observe_step(step, now)
            self.estimator.observe(step, self.current(step.workload))
        for summary in page.requests:
            name = summary.get("workload") or DEFAULT_WORKLOAD
            work = self._workload(name)
            work.stats.observe_request(summary)
            features = work.stats.requests[-1]
            if name == DEFAULT_WORKLOAD:
                self.identifier.assign(features)
            else:
                self.identifier.learn(name, features)

    def _workload(self, name: str) -> _Workload:
        return self.workloads.setdefault(name, _Workload())

    def current(self, workload: str) -> SpecConfig:
        return self.applied.get(workload, self.default)

    # -- deciding ---------------------------------------------------------------------------------------------------
    def _decide(self, name: str, now: float) -> None:
        work = self.workloads[name]
        stats = work.stats
        if stats.steps_seen < self.stabiliser.options.min_samples:
            return
        if self._check_rollback(name, work, now):
            return
        self._check_drift(name, work)
        with self.lock:
            rec = self.recommend(name, stats.typical_batch_size(), stats.typical_context_len())
        gain = rec.gain_over_current
        verdict = self.stabiliser.consider(name, rec.current, rec.config, gain, now)
        if verdict.apply:
            opts = self.stabiliser.options
            baseline, samples = stats.goodput(now - opts.rollback_window_s, now)
            self.engine.apply(name, rec.config)
            with self.lock:
                self.applied[name] = rec.config
            self.stabiliser.applied(name, rec.current, rec.config, now, baseline, samples)
            work.last_hold = None
            self._record(name, DecisionCreate(kind="apply", from_config=rec.current, to_config=rec.config,
                                              predicted_gain=_finite(gain), reason=verdict.reason,
                                              evidence=self.evidence(name, rec, baseline=baseline)))
        elif rec.config != rec.current and rec.config != work.last_hold:
            work.last_hold = rec.config
            self._record(name, DecisionCreate(kind="hold", from_config=rec.current, to_config=rec.config,
                                              predicted_gain=_finite(gain), reason=verdict.reason,
                                              evidence=self.evidence(name, rec)))

    def _check_rollback(self, name: str, work: _Workload, now: float) -> bool:
        pending = self.stabiliser.pending(name)
        if pending is None:
            return False
        measured, samples = work.stats.goodput(pending.at)
        verdict = self.stabiliser.check_rollback(name, measured, samples, now)
        if verdict is None:
            return True  # still measuring: no other change meanwhile
        if not verdict.apply:
            self._set_reference(work)
            return False
        self.engine.apply(name, pending.previous)
        with self.lock:
            self.applied[name] = pending.previous
        self.metrics.rollbacks.labels(name).inc()
        self._record(name, DecisionCreate(
            kind="rollback", from_config=pending.applied, to_config=pending.previous, reason=verdict.reason,
            evidence=_finite({"measured_tokens_per_s": measured, "samples": samples,
                              "baseline_tokens_per_s": pending.baseline, "baseline_samples": pending.baseline_samples,
                              "traffic": work.stats.evidence()})))
        return True

    def _set_reference(self, work: _Workload) -> None:
        recent = work.stats.recent_requests(self.drift.window)
        if len(recent) >= self.drift.window:
            work.reference = Profile.of(recent)
            work.reference_at_request = work.stats.requests_seen

    def _check_drift(self, name: str, work: _Workload) -> None:
        if work.reference is None:
            self._set_reference(work)
            return
        if work.stats.requests_seen - work.reference_at_request < self.drift.window:
            return  # the compared window must not overlap the reference
        recent = Profile.of(work.stats.recent_requests(self.drift.window))
        reasons = drift_reasons(work.reference, recent, self.drift)
        if not reasons:
            return
        reason = "; ".join(reasons)
        evidence = {"reference": work.reference.as_dict(), "recent": recent.as_dict()}
        work.reference, work.reference_at_request = recent, work.stats.requests_seen
        self._record(name, DecisionCreate(kind="drift", reason=f"profile stale: {reason}",
                                          evidence=_finite(evidence)))
        if self.retuner is None:
            return
        try:
            started = self.retuner.retune(name, reason)
        except StorageError as exc:
            self.metrics.fail_opens.labels("database_down").inc()
            log.warning("could not start a re-tune of %s: %s", name, exc)
            return
        if started is not None:
            self._record(name, DecisionCreate(kind="retune", reason=started, evidence=_finite(evidence)))

    # -- reading (API) ----------------------------------------------------------------------------------------------
    def recommend(self, workload: str, batch_size: int, context_len: int) -> Recommendation:
        """The estimator's best config for this point, with predicted gains over off and the current config."""
        return self.estimator.recommend(workload, batch_size, context_len, self.current(workload))

    def evidence(self, workload: str, rec: Recommendation, **extra: Any) -> dict[str, Any]:
        work = self.workloads.get(workload)
        body = {
            "batch_size": rec.batch_size, "context_len": rec.context_len,
            "predicted_tokens_per_s": rec.tokens_per_s, "predicted_tokens_per_s_off": rec.tokens_per_s_off,
            "predicted_tokens_per_s_current": rec.tokens_per_s_current,
            "estimated_acceptance": {m: [round(a, 4) for a in self.estimator.policy.acceptance(workload, m)[:8]]
                                     for m in self.estimator.policy.options.methods},
            "traffic": work.stats.evidence() if work is not None else None,
            "cost_model": self.estimator.cost_evidence(rec.batch_size, rec.context_len),
        }
        return _finite(body | extra)

    def batch_mix(self, workload: str) -> dict[int, float] | None:
        """The share of ``workload``'s steps at each batch size, as observed; ``None`` before any step."""
        with self.lock:
            work = self.workloads.get(workload)
            counts = dict(work.stats.batch_sizes) if work is not None else {}
        total = sum(counts.values())
        return {b: n / total for b, n in sorted(counts.items())} if total else None

    def identification(self) -> dict[str, dict[str, float]]:
        """Unnamed traffic by the workload it was identified as: request counts and mean confidence."""
        with self.lock:
            return self.identifier.summary()

    # -- the audit trail --------------------------------------------------------------------------------------------
    def _record(self, workload: str, decision: DecisionCreate) -> None:
        self.metrics.decisions.labels(workload, decision.kind).inc()
        log.info("%s %s: %s", workload, decision.kind, decision.reason)
        self.backlog.append((workload, decision))
        self._flush_backlog()

    def _flush_backlog(self) -> None:
        if self.db is None:
            self.backlog.clear()
            return
        while self.backlog:
            workload, decision = self.backlog[0]
            try:
                with self.db.session() as session:
                    record_decision(session, workload, decision)
            except StorageError as exc:
                self.metrics.fail_opens.labels("database_down").inc()
                log.warning("database down; %d decision(s) wait to be stored: %s", len(self.backlog), exc)
                return
            except ValueError as exc:  # an engine workload name storage does not accept: log it, never stall
                log.warning("decision for %r not stored: %s", workload, exc)
            self.backlog.popleft()
