"""``spectune calibrate``: measure this engine's forward times and save its cost model as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.errors import UsageError, user_errors
from tuner.cli.options import DRAFT_DTYPE_HELP


def calibrate(
    target: Annotated[str, typer.Option(help="registry name, Hugging Face directory or .gguf path")],
    out: Annotated[Path, typer.Option(help="cost model JSON file to write")],
    draft: Annotated[str | None, typer.Option(help="draft model; without it only n-gram and off are priced")] = None,
    dtype: Annotated[str, typer.Option(help="float32 | bfloat16 | float16 (CUDA)")] = "float32",
    draft_dtype: Annotated[str | None, typer.Option(help=DRAFT_DTYPE_HELP)] = None,
    quick: Annotated[bool, typer.Option(help="a tiny grid (batch 1-2, 1-2 tokens, short contexts) for tests")] = False,
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads while timing")] = None,
) -> None:
    """Time target and draft forwards over batch size x tokens per request x context length; fit the cost model."""
    with user_errors():
        import torch

        from engine.models import load_pair
        from tuner.calibrate import FULL, QUICK
        from tuner.calibrate import calibrate as run_calibration

        if out.is_dir():
            raise UsageError(f"--out: {out} is a directory; give a JSON file path")
        if threads is not None:
            torch.set_num_threads(threads)
        torch.set_grad_enabled(False)
        target_model, draft_model = load_pair(target, draft, dtype, draft_dtype)
        cost = run_calibration(target_model, draft_model, QUICK if quick else FULL, progress=True,
                               device=str(target_model.device))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(cost.to_json())
    print(f"cost model for {cost.engine.target} (draft {cost.engine.draft}, {cost.engine.dtype}) -> {out}")
