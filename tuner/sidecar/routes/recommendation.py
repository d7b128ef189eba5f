"""``GET /v1/recommendation``: the config the controller's estimator would run for a workload at a batch size and
context length, its predicted gain over no speculation and over the current config, and the evidence behind it."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Query

from tuner.sidecar.deps import State, TokenAuth
from tuner.sidecar.errors import ApiError
from tuner.sidecar.schemas import Predicted, RecommendationPublic

router = APIRouter(prefix="/v1", tags=["recommendation"], dependencies=[TokenAuth])


@router.get("/recommendation")
def recommendation(state: State, workload: Annotated[str, Query(min_length=1, max_length=200)],
                   batch_size: Annotated[int | None, Query(ge=1, le=4096)] = None,
                   context_len: Annotated[int | None, Query(ge=0, le=1_048_576)] = None) -> RecommendationPublic:
    """Without ``batch_size`` / ``context_len`` the workload's most frequent batch size and median context apply."""
    controller = state.controller
    if controller is None:
        raise ApiError(404, f"workload: no statistics observed for {workload!r}: this sidecar steers no engine "
                            "(start it with --engine-url)", "workload")
    with controller.lock:
        work = controller.workloads.get(workload)
        if work is None or work.stats.steps_seen == 0:
            raise ApiError(404, f"workload: no statistics observed for {workload!r} yet", "workload")
        batch = batch_size or work.stats.typical_batch_size()
        context = context_len if context_len is not None else work.stats.typical_context_len()
        rec = controller.recommend(workload, batch, context)
        evidence = controller.evidence(workload, rec)
    gain = rec.gain_over_current
    return RecommendationPublic(
        workload=workload, batch_size=batch, context_len=context, config=rec.config, current=rec.current,
        predicted=Predicted(tokens_per_s=rec.tokens_per_s, tokens_per_s_off=rec.tokens_per_s_off,
                            tokens_per_s_current=rec.tokens_per_s_current, gain_over_off=rec.gain_over_off,
                            gain_over_current=gain if math.isfinite(gain) else None),
        evidence=evidence)
