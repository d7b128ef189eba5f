"""What one demo run does: models, workloads, request sizes, phase lengths and search size (``FULL`` and ``QUICK``).

Sizes are set so the full run (qwen2.5-coder-1.5b bf16 + 0.5B draft, about 3.5 tokens/s target alone) finishes
within 15 minutes on 2 CPU cores; the quick run (SmolLM2-135M drafting for itself) within a few.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.calibrate import Grid
from tuner.controller.stabilise import StabilityOptions

# The controller's production windows (90 s before turning speculation on, 60 s rollback checks) are longer than the
# whole traffic phase here; these keep its logic and shrink its clock.
DEMO_STABILITY = StabilityOptions(off_window_s=4.0, on_window_s=6.0, change_window_s=6.0, rollback_window_s=10.0,
                                  min_samples=16, max_changes=4, rate_window_s=600.0, block_s=120.0)


@dataclass(frozen=True)
class DemoPlan:
    name: str
    target: str
    draft: str | None
    dtype: str
    workloads: tuple[str, ...]  # shipped prompt sets, one workload each
    prompts: int  # first N prompts of each set, the same ones in every phase
    max_tokens: int  # new tokens per request at most
    controller_s: float  # how long the controller phase sends traffic (requests in flight then finish)
    trials: int  # replay trials of each workload's Optuna search
    rounds: int  # interleaved off/tuned passes over the prompts in the measurement
    calibration: Grid  # the cost model's grid, measured at the start
    replay_ks: tuple[int, ...] = (1, 2, 4, 8, 16)  # the report's tokens/s-vs-k curves
    replay_batch_sizes: tuple[int, ...] = (1, 2, 4)
    acceptance_k: int = 8  # depth of the report's acceptance-per-position curves


FULL = DemoPlan(
    name="full", target="qwen2.5-coder-1.5b", draft="qwen2.5-coder-0.5b", dtype="bfloat16",
    workloads=("humaneval", "code-edit", "prose"), prompts=2, max_tokens=64, controller_s=150.0, trials=30, rounds=1,
    calibration=Grid(batch_sizes=(1, 2, 4), tokens=(1, 2, 4, 8, 16), draft_tokens=(1,), context_lens=(128, 512),
                     warmup=1, repeats=1))

QUICK = DemoPlan(
    name="quick", target="smollm2-135m", draft="smollm2-135m", dtype="bfloat16",
    workloads=("humaneval", "code-edit", "prose"), prompts=3, max_tokens=64, controller_s=45.0, trials=30, rounds=1,
    calibration=Grid(batch_sizes=(1, 2, 4), tokens=(1, 2, 4, 8, 16), draft_tokens=(1,), context_lens=(128, 512),
                     warmup=1, repeats=3))
