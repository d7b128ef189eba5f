"""Drift: a workload's acceptance or length distribution moving away from the reference taken when its config settled.

The reference is the mean acceptance rate (accepted / draft tokens) and the mean log prompt and output lengths over
``window`` requests. Drift is an absolute acceptance change above ``acceptance_delta`` or a length change by more than
a factor ``length_ratio`` (compared in log space).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field


class DriftOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int = Field(default=32, ge=4, le=512, description="requests per compared window")
    acceptance_delta: float = Field(default=0.25, gt=0.0, le=1.0)
    length_ratio: float = Field(default=2.0, gt=1.0)


@dataclass(frozen=True)
class Profile:
    acceptance: float | None
    log_prompt_len: float
    log_output_len: float

    @classmethod
    def of(cls, requests: list[dict[str, float]]) -> Profile:
        rates = [r["acceptance"] for r in requests if not math.isnan(r["acceptance"])]
        return cls(acceptance=sum(rates) / len(rates) if rates else None,
                   log_prompt_len=sum(math.log1p(r["prompt_len"]) for r in requests) / len(requests),
                   log_output_len=sum(math.log1p(r["output_len"]) for r in requests) / len(requests))

    def as_dict(self) -> dict[str, float | None]:
        return {"acceptance": self.acceptance, "mean_log_prompt_len": self.log_prompt_len,
                "mean_log_output_len": self.log_output_len}


def drift_reasons(reference: Profile, recent: Profile, options: DriftOptions) -> list[str]:
    """Why ``recent`` has drifted from ``reference`` (empty: it has not)."""
    reasons = []
    if reference.acceptance is not None and recent.acceptance is not None \
            and abs(recent.acceptance - reference.acceptance) > options.acceptance_delta:
        reasons.append(f"acceptance {reference.acceptance:.2f} -> {recent.acceptance:.2f}")
    limit = math.log(options.length_ratio)
    for name, before, after in (("prompt length", reference.log_prompt_len, recent.log_prompt_len),
                                ("output length", reference.log_output_len, recent.log_output_len)):
        if abs(after - before) > limit:
            reasons.append(f"{name} x{math.exp(after - before):.2f}")
    return reasons
