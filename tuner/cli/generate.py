"""``spectune generate``: one prompt through the speculative engine, with its statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.errors import UsageError, user_errors
from tuner.cli.options import DRAFT_DTYPE_HELP


def generate(
    target: Annotated[str, typer.Option(help="registry name, Hugging Face directory or .gguf path")],
    max_new_tokens: Annotated[int, typer.Option(min=1)],
    prompt: Annotated[str | None, typer.Option(help="prompt text")] = None,
    prompt_file: Annotated[Path | None, typer.Option(help="file holding the prompt text")] = None,
    draft: Annotated[str | None, typer.Option(help="draft model (same tokenizer as the target)")] = None,
    method: Annotated[str, typer.Option(help="off | draft | ngram")] = "off",
    k: Annotated[int, typer.Option(help="speculative tokens per step (1..32)")] = 4,
    tree: Annotated[str, typer.Option(help="chain | 2,2,1 (branching per depth) | topk=4,budget=16")] = "chain",
    min_n: Annotated[int, typer.Option(help="n-gram lookup: shortest match")] = 1,
    max_n: Annotated[int, typer.Option(help="n-gram lookup: longest match")] = 4,
    ngram_match: Annotated[str, typer.Option(help="n-gram lookup: recent | first match")] = "recent",
    dtype: Annotated[str, typer.Option(help="float32 | bfloat16 | float16 (CUDA)")] = "float32",
    draft_dtype: Annotated[str | None, typer.Option(help=DRAFT_DTYPE_HELP)] = None,
    temperature: Annotated[float, typer.Option(min=0.0)] = 0.0,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0)] = 1.0,
    seed: Annotated[int | None, typer.Option()] = None,
    chat: Annotated[bool, typer.Option(help="apply the model's chat template")] = False,
    compare: Annotated[bool, typer.Option(help="also run without speculation and print both side by side")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Generate from one prompt with speculative decoding and report its statistics."""
    with user_errors():
        import torch

        from engine.config import SpecConfig, TreeShape
        from engine.engine import Request, SpecEngine
        from engine.models import load_pair
        from engine.prompts import encode_chat, encode_text
        from engine.sampling import SamplingParams

        if (prompt is None) == (prompt_file is None):
            raise UsageError("give exactly one of --prompt and --prompt-file")
        text = prompt if prompt is not None else prompt_file.read_text()
        config = SpecConfig(method=method, k=k, tree=TreeShape.parse(tree), min_n=min_n, max_n=max_n,
                            ngram_match=ngram_match)
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
        if config.method == "draft" and draft is None:
            raise UsageError("--method draft needs --draft")
        torch.set_grad_enabled(False)
        target_model, draft_model = load_pair(target, draft, dtype, draft_dtype)
        tok = target_model.tokenizer
        ids = encode_chat(tok, [{"role": "user", "content": text}]) if chat else encode_text(tok, text)
        engine = SpecEngine(target_model, draft_model, max_batch=1)
        runs = [("off", SpecConfig())] if compare and config.speculative else []
        runs.append(("spec", config))
        results = {}
        for name, cfg in runs:
            engine.validate(Request(name, ids, params, cfg))
            results[name] = engine.run([Request(name, ids, params, cfg)])[name]

    out_ids, summary = results["spec"]
    report = {
        "text": tok.decode(out_ids, skip_special_tokens=True) if tok is not None else "",
        "token_ids": out_ids,
        "stats": {
            "steps": summary.steps, "draft_tokens": summary.draft_tokens, "accepted_tokens": summary.accepted_tokens,
            "mean_acceptance_length": round(summary.mean_acceptance_length, 4),
            "accepted_per_position": summary.accepted_per_position, "draft_s": round(summary.draft_s, 4),
            "verify_s": round(summary.verify_s, 4), "tokens_per_s": round(summary.tokens_per_s, 3),
        },
    }
    if "off" in results:
        off_ids, off = results["off"]
        speedup = round(summary.tokens_per_s / off.tokens_per_s, 3) if off.tokens_per_s else None
        report["baseline"] = {"tokens_per_s": round(off.tokens_per_s, 3), "steps": off.steps, "speedup": speedup,
                              "identical": off_ids == out_ids}
    if as_json:
        print(json.dumps(report))
        return
    _print_report(report, config.label())


def _print_report(report: dict, label: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(report["text"])
    stats = report["stats"]
    table = Table(title="spectune generate")
    for column in ("config", "tokens/s", "steps", "mean acceptance length", "draft s", "verify s"):
        table.add_column(column)
    if "baseline" in report:
        base = report["baseline"]
        table.add_row("off", f"{base['tokens_per_s']:.2f}", str(base["steps"]), "1.00", "0", "")
    table.add_row(label, f"{stats['tokens_per_s']:.2f}", str(stats["steps"]),
                  f"{stats['mean_acceptance_length']:.2f}", f"{stats['draft_s']:.2f}", f"{stats['verify_s']:.2f}")
    console.print(table)
    if "baseline" in report:
        base = report["baseline"]
        console.print(f"speedup {base['speedup']}x, output identical to no speculation: {base['identical']}")
