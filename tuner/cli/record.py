"""``spectune record``: record one workload's traces (target output + the draft's view of it) for replay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.errors import UsageError, user_errors
from tuner.cli.options import DRAFT_DTYPE_HELP


def record(
    target: Annotated[str, typer.Option(help="registry name, Hugging Face directory or .gguf path")],
    workload: Annotated[str, typer.Option(help="workload name the traces are stored under")],
    out: Annotated[Path, typer.Option(help="directory to write <workload>.jsonl into")],
    max_new_tokens: Annotated[int, typer.Option(min=1, help="new tokens per request at most")] = 128,
    prompts: Annotated[Path | None, typer.Option(help="prompt JSONL ('prompt' or 'messages' per line); default: "
                                                  "the shipped set named by --workload")] = None,
    draft: Annotated[str | None, typer.Option(help="draft model (same tokenizer as the target)")] = None,
    method: Annotated[str, typer.Option(help="draft | ngram (ngram records without a draft model)")] = "draft",
    k_max: Annotated[int, typer.Option(min=1, max=32, help="largest k / tree branching the traces must score: "
                                       "draft ranks are recorded exactly below it")] = 16,
    limit: Annotated[int | None, typer.Option(min=1, help="record only the first N prompts")] = None,
    batch: Annotated[int, typer.Option(min=1, max=64, help="requests generated together")] = 4,
    dtype: Annotated[str, typer.Option(help="float32 | bfloat16 | float16 (CUDA)")] = "float32",
    draft_dtype: Annotated[str | None, typer.Option(help=DRAFT_DTYPE_HELP)] = None,
) -> None:
    """Record traces of the target's greedy output and the draft's teacher-forced ranks, for `spectune replay`."""
    with user_errors():
        import torch

        from engine.models import load_pair
        from tuner.record import encode_prompt
        from tuner.record import record as record_traces
        from tuner.traces import write_traces
        from tuner.workloads import read_prompt_file, shipped_prompts

        if method not in ("draft", "ngram"):
            raise UsageError(f"--method: {method!r} is not one of draft, ngram")
        if method == "draft" and draft is None:
            raise UsageError("--method draft needs --draft (or record with --method ngram)")
        if method == "ngram" and draft is not None:
            raise UsageError("--method ngram records without a draft model; drop --draft")
        records = read_prompt_file(prompts if prompts is not None else shipped_prompts(workload))[:limit]
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out: {out} exists and is not a directory")
        torch.set_grad_enabled(False)
        target_model, draft_model = load_pair(target, draft, dtype, draft_dtype)
        ids = [encode_prompt(target_model, r) for r in records]
        for r, prompt in zip(records, ids):
            total = len(prompt) + max_new_tokens
            if total > target_model.max_context:
                raise UsageError(f"prompt {r.id!r}: {len(prompt)} tokens + --max-new-tokens exceed the model "
                                 f"context of {target_model.max_context}")
        traces = record_traces(target_model, draft_model, workload, [r.id or "" for r in records], ids,
                               max_new_tokens, rank_cap=k_max, max_batch=batch, progress=True)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{workload}.jsonl"
        write_traces(path, traces)
    emitted = sum(len(t.output_ids) for t in traces)
    print(f"recorded {len(traces)} requests, {emitted} output tokens -> {path}")
