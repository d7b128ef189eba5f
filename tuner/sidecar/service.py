"""Wire a sidecar from its settings: the checked database, and with an engine URL the controller that steers it."""

from __future__ import annotations

from policies.cost_model import CostModel
from storage.db import default_url
from tuner.controller.estimate import Estimator, build_estimator
from tuner.controller.loop import Controller
from tuner.controller.retune import RecordedRetune, StudyRetune
from tuner.controller.stabilise import Stabiliser
from tuner.engines.spectune import SpectuneEngine
from tuner.sidecar.app import build_state
from tuner.sidecar.settings import Settings
from tuner.sidecar.state import SidecarState
from tuner.tuning.routes import StudyManager
from tuner.workloads import shipped_prompt_texts


def load_cost_model(settings: Settings, required: bool = True) -> CostModel | None:
    if settings.cost_model is None and not required:
        return None
    if settings.cost_model is None:
        raise ValueError("cost-model: the controller prices configs with a measured cost model; run `spectune "
                         "calibrate` and pass --cost-model FILE (or SPECTUNE_COST_MODEL)")
    try:
        return CostModel.from_json(settings.cost_model.expanduser().read_bytes())
    except OSError as exc:
        raise ValueError(f"cost-model: cannot read {settings.cost_model}: {exc.strerror}") from None


def build_service(settings: Settings) -> SidecarState:
    """The sidecar state with its study manager; a controller is attached when ``settings.engine_url`` is set (it
    needs a cost model)."""
    cost = load_cost_model(settings, required=settings.engine_url is not None)
    estimator = Estimator(build_estimator(settings.policy, cost)) if settings.engine_url and cost else None
    state = build_state(settings)
    token = settings.admin_token.get_secret_value() if settings.admin_token else None
    engine_url = settings.engine_url
    state.studies = StudyManager(settings.db_url or default_url(), traces_dir=settings.traces, cost_model=cost,
                                 engine_factory=(lambda: SpectuneEngine(engine_url, admin_token=token))
                                 if engine_url else None, prompts=shipped_prompt_texts)
    if estimator is not None and engine_url is not None:
        retuner = StudyRetune(state.studies, RecordedRetune(state.db), settings.retune_trials)
        state.controller = Controller(SpectuneEngine(engine_url, admin_token=token), estimator, state.db,
                                      metrics=state.metrics, stabiliser=Stabiliser(settings.stability),
                                      drift=settings.drift, retuner=retuner)
        state.studies.observed_mix = state.controller.batch_mix
    return state
