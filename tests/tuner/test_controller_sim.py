"""The controller on a simulated clock: tolerance band, asymmetric stabilisation windows, change budget, rollback of a
change that lowers measured goodput, drift triggering exactly one re-tune, and fail-open on engine and database
outages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.config import SpecConfig
from engine.stats import StepStats
from policies.cost_model import CostModel
from storage import migrate
from storage.db import Database
from storage.decisions import list_decisions
from storage.runs import list_runs
from tests.policies.synthetic import linear_cost
from tuner.controller.drift import DriftOptions
from tuner.controller.estimate import Estimator, build_estimator
from tuner.controller.identify import Identifier
from tuner.controller.loop import Controller
from tuner.controller.retune import RecordedRetune
from tuner.controller.stabilise import Stabiliser, StabilityOptions
from tuner.engines.base import EngineError
from tuner.engines.spectune import StatsPage

NGRAM4 = SpecConfig(method="ngram", k=4)
OFF = SpecConfig()
OPTIONS = StabilityOptions(off_window_s=20, on_window_s=60, change_window_s=30, rollback_window_s=40,
                           max_changes=2, rate_window_s=600, min_samples=32, block_s=1000)
# verify cost grows steeply with tokens, so speculation that is never accepted clearly loses
COST = linear_cost(base=0.02, per_token=0.004, draft=None)



# -- a simulated engine: real time cannot be simulated, so the real-process tests live in test_controller_live.py ----
# It runs whatever config the controller applied per workload, with acceptance scripted per workload and step times
# from the cost model, and pages its statistics the way ``GET /stats`` does.
CONTEXT = 128


@dataclass
class Behaviour:
    """How a workload's traffic behaves: draft tokens accepted per method and depth, and request lengths."""

    accept: Callable[[str, int], int]
    prompt_len: int = 100
    output_len: int = 64


class SimulatedEngine:
    def __init__(self, cost: CostModel, workloads: dict[str, Behaviour], steps_per_read: int = 40,
                 steps_per_request: int = 8) -> None:
        self.cost = cost
        self.workloads = workloads
        self.steps_per_read = steps_per_read
        self.steps_per_request = steps_per_request
        self.default = SpecConfig()
        self.configs: dict[str, SpecConfig] = {}
        self.applied: list[tuple[str, SpecConfig]] = []
        self.step = 0
        self.reachable = True

    def _guard(self) -> None:
        if not self.reachable:
            raise EngineError("simulated engine: connection refused")

    def spec_configs(self) -> dict[str, Any]:
        self._guard()
        return {"default": self.default.model_dump(mode="json"),
                "workloads": {n: c.model_dump(mode="json") for n, c in self.configs.items()}}

    def apply(self, workload: str, config: SpecConfig) -> None:
        self._guard()
        self.configs[workload] = config
        self.applied.append((workload, config))

    def stats_page(self, since: int = 0, limit: int = 1000) -> StatsPage:
        self._guard()
        steps, requests = [], []
        for name, behaviour in self.workloads.items():
            config = self.configs.get(name, self.default)
            for i in range(self.steps_per_read):
                self.step += 1
                steps.append(self._step(name, behaviour, config))
                if (i + 1) % self.steps_per_request == 0:
                    requests.append(self._request(name, behaviour, config))
        return StatsPage(epoch="sim", next_cursor=self.step, dropped=0, steps=tuple(steps), requests=tuple(requests))

    def _step(self, name: str, behaviour: Behaviour, config: SpecConfig) -> StepStats:
        depth = config.k if config.speculative else 0
        accepted = min(behaviour.accept(config.method, depth), depth) if depth else 0
        return StepStats(self.step, f"{name}-{self.step // self.steps_per_request}", name, 1, CONTEXT,
                         config.method if depth else "off", depth, depth, accepted,
                         tuple(1 if d < accepted else 0 for d in range(depth)), accepted + 1, 1 + depth, 1 + depth,
                         self.cost.draft_s(1, depth, CONTEXT, config.method) if depth else 0.0,
                         self.cost.verify_s(1, 1 + depth, CONTEXT), float(self.step))

    def _request(self, name: str, behaviour: Behaviour, config: SpecConfig) -> dict[str, Any]:
        depth = config.k if config.speculative else 0
        accepted = min(behaviour.accept(config.method, depth), depth) if depth else 0
        return {"workload": name, "prompt_len": behaviour.prompt_len, "output_len": behaviour.output_len,
                "draft_tokens": depth * self.steps_per_request, "accepted_tokens": accepted * self.steps_per_request}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'c.db'}")
    migrate.upgrade(database)
    yield database
    database.dispose()


def _controller(engine: SimulatedEngine, db: Database | None, clock: Clock,
                drift: DriftOptions | None = None) -> Controller:
    estimator = Estimator(build_estimator("goodput:methods=ngram,ks=2+4+8", COST))
    return Controller(engine, estimator, db, stabiliser=Stabiliser(OPTIONS), drift=drift,
                      retuner=RecordedRetune(db) if db is not None else None, clock=clock)


def _run(controller: Controller, clock: Clock, seconds: float, every: float = 5.0) -> None:
    end = clock.now + seconds
    while clock.now < end:
        clock.now += every
        controller.tick()


def _kinds(db: Database, workload: str) -> list[str]:
    with db.session() as s:
        return [d.kind for d in reversed(list_decisions(s, workload))]


# -- the stabiliser alone --------------------------------------------------------------------------------------------
def test_tolerance_band_and_asymmetric_windows() -> None:
    stab = Stabiliser(OPTIONS)
    inside = stab.consider("w", OFF, NGRAM4, gain=0.09, now=0)
    assert not inside.apply and "tolerance band" in inside.reason
    assert not stab.consider("w", OFF, NGRAM4, gain=0.5, now=0).apply
    assert not stab.consider("w", OFF, NGRAM4, gain=0.5, now=59).apply  # turning on waits on_window_s
    assert stab.consider("w", OFF, NGRAM4, gain=0.5, now=60).apply
    stab2 = Stabiliser(OPTIONS)
    assert not stab2.consider("w", NGRAM4, OFF, gain=0.5, now=0).apply
    assert stab2.consider("w", NGRAM4, OFF, gain=0.5, now=20).apply  # turning off needs only off_window_s
    # a recommendation that dips into the band restarts the window
    stab3 = Stabiliser(OPTIONS)
    stab3.consider("w", OFF, NGRAM4, gain=0.5, now=0)
    stab3.consider("w", OFF, NGRAM4, gain=0.05, now=30)
    assert not stab3.consider("w", OFF, NGRAM4, gain=0.5, now=61).apply


def test_change_budget_and_rollback_verdicts() -> None:
    stab = Stabiliser(OPTIONS)
    k8 = SpecConfig(method="ngram", k=8)
    for i, (current, target) in enumerate(((OFF, NGRAM4), (NGRAM4, k8))):
        t0 = i * 200.0
        stab.consider("w", current, target, 0.5, t0)
        assert stab.consider("w", current, target, 0.5, t0 + 60).apply
        stab.applied("w", current, target, t0 + 60, baseline=100.0, baseline_samples=100)
        assert stab.check_rollback("w", 100.0, 100, t0 + 70) is None  # still inside the rollback window
        kept = stab.check_rollback("w", 95.0, 100, t0 + 100)
        assert kept is not None and not kept.apply
    stab.consider("w", k8, OFF, 0.5, 400)
    over = stab.consider("w", k8, OFF, 0.5, 420)
    assert not over.apply and "2 changes" in over.reason
    assert stab.consider("w", k8, OFF, 0.5, 661).apply  # the first change left the rate window
    stab.applied("w", k8, OFF, 661, baseline=100.0, baseline_samples=100)
    back = stab.check_rollback("w", 80.0, 100, 701)
    assert back is not None and back.apply and "-20.0%" in back.reason
    blocked = stab.consider("w", k8, OFF, 0.9, 702)
    assert not blocked.apply and "rolled back" in blocked.reason


# -- the controller on the simulated engine ---------------------------------------------------------------------------
def test_converges_to_ngram_where_it_pays_and_rolls_back_where_it_does_not(db: Database) -> None:
    clock = Clock()
    engine = SimulatedEngine(COST, {"code": Behaviour(lambda method, k: k),  # every draft accepted
                                    "noise": Behaviour(lambda method, k: 0)})
    controller = _controller(engine, db, clock)
    _run(controller, clock, 55)
    assert engine.applied == []  # nothing before the turn-on window has passed
    _run(controller, clock, 20)
    assert {name for name, _ in engine.applied} == {"code", "noise"}  # the prior says n-gram may pay for both
    _run(controller, clock, 120)
    assert engine.configs["code"].method == "ngram"
    assert engine.configs["noise"] == OFF  # measured goodput fell: rolled back
    assert controller.metrics.rollbacks.labels("noise")._value.get() == 1
    assert _kinds(db, "noise")[:3] == ["hold", "apply", "rollback"]
    assert "rollback" not in _kinds(db, "code")
    with db.session() as s:
        rollback = list_decisions(s, "noise", kind="rollback")[0]
    assert rollback.evidence["measured_tokens_per_s"] < rollback.evidence["baseline_tokens_per_s"]
    assert rollback.to_config == OFF and rollback.from_config.method == "ngram"
    _run(controller, clock, 600)
    assert engine.configs["noise"] == OFF  # the rolled-back config stays blocked; no flip-flop
    assert sum(1 for name, _ in engine.applied if name == "noise") == 2
    with db.session() as s:
        apply = list_decisions(s, "code", kind="apply")[-1]
    assert apply.evidence["traffic"]["steps"] > 0 and apply.predicted_gain > OPTIONS.tolerance
    assert controller.batch_mix("code") == {1: 1.0}  # every simulated step runs alone; studies score at this mix
    assert controller.batch_mix("never-seen") is None


def test_drift_triggers_exactly_one_retune(db: Database) -> None:
    clock = Clock()
    code = Behaviour(lambda method, k: k)
    engine = SimulatedEngine(COST, {"code": code})
    controller = _controller(engine, db, clock, DriftOptions(window=16, acceptance_delta=0.3, length_ratio=2.0))
    _run(controller, clock, 300)
    assert engine.configs["code"].method == "ngram" and "drift" not in _kinds(db, "code")
    code.accept = lambda method, k: 0  # the workload changes: acceptance collapses, outputs get 4x longer
    code.output_len *= 4
    _run(controller, clock, 200)
    kinds = _kinds(db, "code")
    assert kinds.count("retune") == 1 and kinds.count("drift") >= 1
    with db.session() as s:
        runs = list_runs(s, "code")
    assert [(r.kind, r.status) for r in runs] == [("online", "running")]
    code.output_len //= 8  # a second drift while that re-tune still runs starts no other one
    _run(controller, clock, 200)
    assert _kinds(db, "code").count("retune") == 1 and _kinds(db, "code").count("drift") >= 2


def test_fail_open_engine_unreachable_backs_off_and_recovers(db: Database) -> None:
    clock = Clock()
    engine = SimulatedEngine(COST, {"code": Behaviour(lambda method, k: k)})
    controller = _controller(engine, db, clock)
    engine.reachable = False
    _run(controller, clock, 30, every=1.0)
    failures = controller.metrics.fail_opens.labels("engine_unreachable")._value.get()
    assert 3 <= failures <= 6  # backing off: 1, 2, 4, 8, 16 s, not one try per second
    engine.reachable = True
    _run(controller, clock, 120)
    assert engine.configs["code"].method == "ngram"


def test_fail_open_database_down_keeps_configs_and_stores_the_backlog_later(tmp_path: Path) -> None:
    clock = Clock()
    db = Database(f"sqlite:///{tmp_path / 'late.db'}")  # no schema yet: every write fails
    engine = SimulatedEngine(COST, {"code": Behaviour(lambda method, k: k)})
    controller = _controller(engine, db, clock)
    _run(controller, clock, 120)
    assert engine.configs["code"].method == "ngram"  # steering goes on without the audit trail
    assert controller.metrics.fail_opens.labels("database_down")._value.get() >= 1
    waiting = len(controller.backlog)
    assert waiting >= 2
    migrate.upgrade(db)
    _run(controller, clock, 5)
    assert not controller.backlog
    assert _kinds(db, "code")[:2] == ["hold", "apply"]
    db.dispose()


def test_unnamed_traffic_is_identified_by_its_features_with_a_confidence() -> None:
    clock = Clock()
    engine = SimulatedEngine(COST, {"code": Behaviour(lambda m, k: k, prompt_len=400, output_len=60),
                                    "chat": Behaviour(lambda m, k: 0, prompt_len=30, output_len=300),
                                    "default": Behaviour(lambda m, k: k, prompt_len=380, output_len=70)})
    controller = _controller(engine, None, clock)
    _run(controller, clock, 30)
    found = controller.identification()
    assert set(found) == {"code"} and found["code"]["requests"] >= 10
    assert found["code"]["mean_confidence"] > 0.8


def test_identification_confidence_drops_between_similar_workloads() -> None:
    identifier = Identifier()
    for _ in range(5):
        identifier.learn("a", {"prompt_len": 100.0, "output_len": 50.0, "acceptance": 0.8})
        identifier.learn("b", {"prompt_len": 120.0, "output_len": 50.0, "acceptance": 0.7})
        identifier.learn("far", {"prompt_len": 5000.0, "output_len": 900.0, "acceptance": 0.0})
    close = identifier.assign({"prompt_len": 105.0, "output_len": 50.0, "acceptance": 0.78})
    clear = identifier.assign({"prompt_len": 4800.0, "output_len": 1000.0, "acceptance": 0.05})
    assert close is not None and close.workload == "a" and 0.4 < close.confidence < 0.7
    assert clear is not None and clear.workload == "far" and clear.confidence > 0.9


def test_the_estimator_prices_draft_cache_fills_from_the_prompt_lengths_its_steps_carry():
    # feeding the draft model is dear here, so filling a 200-token prompt into its cache costs what several steps do
    cost, draft = linear_cost(draft_per_token=0.004), SpecConfig(method="draft", k=2)

    def draft_score(prompt_len: int) -> float:
        estimator = Estimator(build_estimator("goodput", cost))
        for step in range(1, 200):  # requests of 50 fully accepted steps, 3 tokens each
            output_len = step % 50 * 3
            estimator.observe(StepStats(step, f"r{step // 50}", "w", 1, prompt_len + output_len, "draft", 2, 2, 2,
                                        (1, 1), 3, 3, 3, 0.01, 0.03, float(step), step % 50 == 49, prompt_len,
                                        output_len, 150), draft)
        return estimator.score("w", draft, 1, 256)

    assert draft_score(200) < 0.95 * draft_score(0)  # a step that does not say its prompt length prices no fill


def test_the_estimator_keeps_one_estimate_per_workload():
    # steps reach the controller without a suffix match, so per-bucket tables would all be bucket 0's
    estimator = Estimator(build_estimator("goodput:methods=ngram", COST))
    ngram = SpecConfig(method="ngram", k=2)
    for step in range(1, 20):
        estimator.observe(StepStats(step, "r", "w", 1, 100 + step, "ngram", 2, 2, 1, (1, 0), 2, 3, 3, 0.0, 0.03,
                                    float(step)), ngram)
    assert estimator.policy.options.match_buckets == ()
    assert not estimator.policy._workload("w").matched
    with pytest.raises(ValueError, match="match_buckets does not apply to the controller"):
        build_estimator("goodput:match_buckets=2+8", COST)
    assert build_estimator("goodput:match_buckets=none", COST).options.match_buckets == ()
