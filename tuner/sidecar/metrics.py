"""The sidecar's Prometheus metrics, in a registry of its own (several sidecars or tests in one process never share
counters): decisions, rollbacks, fail-opens and tuning progress."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class SidecarMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.decisions = Counter("spectune_sidecar:decisions", "Controller decisions by kind.", ["workload", "kind"],
                                 registry=r)
        self.rollbacks = Counter("spectune_sidecar:rollbacks", "Changes rolled back for lowering measured goodput.",
                                 ["workload"], registry=r)
        self.fail_opens = Counter("spectune_sidecar:fail_opens",
                                  "Times the controller carried on without a part (engine unreachable, database down).",
                                  ["reason"], registry=r)
        self.polls = Counter("spectune_sidecar:polls", "Successful reads of the engine's /stats.", registry=r)
        self.tuning_runs = Gauge("spectune_sidecar:tuning_runs", "Tuning runs in the database by status.", ["status"],
                                 registry=r)
        self.study_trials = Gauge("spectune_sidecar:study_trials_done", "Finished trials per Optuna study.",
                                  ["study"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
