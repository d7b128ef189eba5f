"""A stored profile (SpecConfig + optional batch-size schedule) as the launch arguments of other engines.

Shapes follow each engine's documentation:

- vLLM: ``--speculative-config JSON``; ``method`` ``"ngram"`` (``prompt_lookup_min/max``) or ``"draft_model"``
  (``model``), ``num_speculative_tokens``, and ``num_speculative_tokens_per_batch_size`` as ``[[lo, hi, k], ...]``
  (inclusive ranges; an open top range ends at 2**20).
- SGLang: ``--speculative-algorithm STANDALONE|NGRAM --speculative-num-steps --speculative-eagle-topk
  --speculative-num-draft-tokens`` (draft tokens count the root: a chain of k drafts verifies k + 1 tokens), n-gram
  windows as ``--speculative-ngram-min/max-match-window-size``.
- TensorRT-LLM: the LLM API ``speculative_config`` (``decoding_type`` ``DraftTarget`` or ``NGram``, ``max_draft_len``,
  ``max_concurrency``, ``draft_len_schedule`` = ``{batch_size: draft_len}`` from that batch size up, must hold
  ``{1: max_draft_len}``), as the ``--extra_llm_api_options`` YAML content.
- llama.cpp: upstream ``--draft-max/--draft-min`` plus the ``--spec-*`` flags of the version spectune builds
  (``tuner.engines.llamacpp_config.spec_flags``).

Every export lists the fields that do not translate; nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from engine.config import SpecConfig
from storage.schemas import Schedule, ScheduleEntry

ExportFormat = Literal["json", "vllm", "sglang", "trtllm", "llamacpp"]
FORMATS: tuple[str, ...] = ("json", "vllm", "sglang", "trtllm", "llamacpp")
DRAFT_PLACEHOLDER = "<draft-model>"
Range = tuple[int, int | None, SpecConfig]  # batch sizes lo..hi (hi None: no top) and the config in force


class Export(BaseModel):
    """One engine's launch arguments for a profile, and what could not be expressed."""

    model_config = ConfigDict(frozen=True)

    format: str
    args: list[str]  # command-line arguments, ready to append to the engine's launch command
    config: dict[str, Any]  # the same settings as the structured object the engine documents
    untranslated: list[str]  # "field: why" for every setting the engine cannot express


def _schedule_entries(schedule: Schedule | Sequence[ScheduleEntry | dict[str, Any]] | None) -> list[ScheduleEntry]:
    if schedule is None:
        return []
    if isinstance(schedule, Schedule):
        return list(schedule.root)
    return list(Schedule.model_validate([e.model_dump() if isinstance(e, ScheduleEntry) else e
                                         for e in schedule]).root)


def batch_ranges(config: SpecConfig, schedule: list[ScheduleEntry]) -> list[Range]:
    """Batch-size ranges with the config in force, from 1 upward: the schedule's entries (context bounds aside),
    the profile config elsewhere, ``off`` above its ``max_batch_size``."""
    bounds = {1}
    for e in schedule:
        bounds.add(e.min_batch)
        if e.max_batch is not None:
            bounds.add(e.max_batch + 1)
    if config.max_batch_size is not None:
        bounds.add(config.max_batch_size + 1)
    starts = sorted(bounds)
    ranges: list[Range] = []
    for i, lo in enumerate(starts):
        hi = starts[i + 1] - 1 if i + 1 < len(starts) else None
        entry = next((e for e in schedule if e.min_batch <= lo and (e.max_batch is None or lo <= e.max_batch)), None)
        cfg = entry.config if entry is not None else config.at_batch_size(lo)
        cfg = cfg.at_batch_size(lo)
        if ranges and ranges[-1][2] == cfg:
            ranges[-1] = (ranges[-1][0], hi, cfg)
        else:
            ranges.append((lo, hi, cfg))
    return ranges


def _context_caveat(schedule: list[ScheduleEntry]) -> list[str]:
    if any(e.min_context > 0 or e.max_context is not None for e in schedule):
        return ["schedule.context: ranges by context length have no equivalent; only batch-size ranges are exported"]
    return []


def _speculative_ranges(config: SpecConfig, schedule: list[ScheduleEntry]) -> tuple[
        list[Range], SpecConfig | None, list[str]]:
    """The ranges, the one speculative config they share (method, tree and n-gram window; k may vary), and the
    fields that differ between ranges (engines launch one method)."""
    ranges = batch_ranges(config, schedule)
    on = [cfg for _, _, cfg in ranges if cfg.speculative]
    if not on:
        return ranges, None, []
    base = max(on, key=lambda c: c.k)
    notes = []
    for cfg in on:
        for field in ("method", "tree", "min_n", "max_n", "ngram_match"):
            if getattr(cfg, field) != getattr(base, field):
                notes.append(f"schedule.{field}: ranges use different values ({getattr(cfg, field)} vs "
                             f"{getattr(base, field)}); exported with {base.label()}'s, only k varies by batch size")
    if base.method == "ngram" and base.ngram_match == "first":
        notes.append("ngram_match: the engine's prompt lookup picks matches its own way; 'first' not expressed")
    return ranges, base, sorted(set(notes))


def _vllm(ranges: list[Range], base: SpecConfig, notes: list[str], draft_model: str) -> Export:
    spec: dict[str, Any] = {"num_speculative_tokens": base.k}
    if base.method == "ngram":
        spec |= {"method": "ngram", "prompt_lookup_min": base.min_n, "prompt_lookup_max": base.max_n}
    else:
        spec |= {"method": "draft_model", "model": draft_model}
    if not base.tree.is_chain:
        notes.append(f"tree: vLLM {spec['method']} drafts a single chain; tree {base.tree} exported as a chain of "
                     f"k={base.k}")
    if len(ranges) > 1 or ranges[-1][2] != base:
        spec["num_speculative_tokens_per_batch_size"] = [
            [lo, hi if hi is not None else 1 << 20, cfg.k if cfg.speculative else 0] for lo, hi, cfg in ranges]
    return Export(format="vllm", args=["--speculative-config", json.dumps(spec, separators=(",", ":"))],
                  config=spec, untranslated=notes)


def _sglang(ranges: list[Range], base: SpecConfig, notes: list[str], draft_model: str) -> Export:
    if len(ranges) > 1:
        notes.append("schedule: SGLang launches one speculation setting for every batch size; exported the "
                     f"deepest ({base.label()}), batch-size ranges dropped")
    settings: dict[str, Any]
    if base.method == "ngram":
        settings = {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": base.k + 1,
                    "speculative_ngram_min_match_window_size": base.min_n,
                    "speculative_ngram_max_match_window_size": base.max_n}
    else:
        tree = base.tree
        if tree.top_k is not None:  # the same dynamic tree SGLang drafts: top-k frontier per step, best budget kept
            topk, nodes = tree.top_k, tree.budget or tree.max_nodes(base.k)
        else:
            topk, nodes = max(tree.branching_at(d) for d in range(1, base.k + 1)), tree.max_nodes(base.k)
            if not tree.is_chain:
                notes.append(f"tree: SGLang drafts dynamic trees (eagle_topk frontier nodes per step, the best "
                             f"num_draft_tokens kept); static tree {tree} approximated by eagle_topk={topk} and "
                             f"its {nodes} nodes as the budget")
        settings = {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": draft_model,
                    "speculative_num_steps": base.k, "speculative_eagle_topk": topk,
                    "speculative_num_draft_tokens": nodes + 1 if topk > 1 else base.k + 1}
    args = []
    for key, value in settings.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return Export(format="sglang", args=args, config=settings, untranslated=notes)


def _trtllm(ranges: list[Range], base: SpecConfig, notes: list[str], draft_model: str) -> Export:
    spec: dict[str, Any]
    if base.method == "ngram":
        spec = {"decoding_type": "NGram", "max_draft_len": base.k, "max_matching_ngram_size": base.max_n}
        if base.min_n != 1:
            notes.append(f"min_n: TensorRT-LLM NGram matches down to 1 token; min_n={base.min_n} not expressed")
    else:
        spec = {"decoding_type": "DraftTarget", "max_draft_len": base.k, "speculative_model": draft_model}
    if not base.tree.is_chain:
        notes.append(f"tree: TensorRT-LLM {spec['decoding_type']} drafts a single chain; tree {base.tree} exported "
                     f"as a chain of k={base.k}")
    first_off = next((lo for lo, _, cfg in ranges if not cfg.speculative), None)
    if first_off is not None and all(not cfg.speculative for lo, _, cfg in ranges if lo >= first_off):
        spec["max_concurrency"] = first_off - 1
    if len({cfg.k if cfg.speculative else 0 for _, _, cfg in ranges}) > 1:
        spec["draft_len_schedule"] = {lo: cfg.k if cfg.speculative else 0 for lo, _, cfg in ranges}
        if spec["draft_len_schedule"][1] != base.k:
            notes.append(f"draft_len_schedule: TensorRT-LLM requires {{1: max_draft_len}}; batch size 1 runs "
                         f"k={spec['draft_len_schedule'][1]}, not the deepest k={base.k}")
    options = {"speculative_config": spec}
    return Export(format="trtllm", args=["--extra_llm_api_options", "<file with config as YAML>"], config=options,
                  untranslated=notes)


def _llamacpp(ranges: list[Range], base: SpecConfig, notes: list[str], draft_model: str) -> Export:
    from tuner.engines.base import UnsupportedConfigError
    from tuner.engines.llamacpp_config import spec_flags

    if len(ranges) > 1:
        notes.append("schedule: llama-server fixes one config at launch; exported the deepest "
                     f"({base.label()}), batch-size ranges dropped")
    chain = base.model_copy(update={"max_batch_size": None})
    if not chain.tree.is_chain:
        notes.append(f"tree: llama.cpp drafts a single chain; tree {chain.tree} exported as a chain of k={chain.k}")
        chain = chain.model_copy(update={"tree": type(chain.tree)()})
    settings: dict[str, Any] = {"draft_max": chain.k, "draft_min": 0}
    args = ["--draft-max", str(chain.k), "--draft-min", "0"]
    if chain.method == "draft":
        args = ["-md", draft_model, *args]
    else:
        if chain.min_n != chain.max_n:
            notes.append(f"min_n: llama.cpp looks up one n-gram length; exported n={chain.max_n} "
                         f"(window {chain.min_n}..{chain.max_n})")
            chain = chain.model_copy(update={"min_n": chain.max_n})
    try:
        settings["spec_flags"] = spec_flags(chain, draft_model=draft_model if chain.method == "draft" else None)
    except UnsupportedConfigError as exc:
        notes.append(f"{exc.field}: {exc}")
        settings["spec_flags"] = []
    if chain.method == "ngram":
        args = settings["spec_flags"]
    return Export(format="llamacpp", args=args, config=settings, untranslated=notes)


def export_profile(config: SpecConfig, schedule: Schedule | Sequence[ScheduleEntry | dict[str, Any]] | None,
                   format: str, *, draft_model: str | None = None) -> Export:
    """``config`` (and its batch-size ``schedule``) as launch arguments for ``format``; ValueError naming ``format``
    for an unknown one. ``draft_model`` fills the draft path where an engine needs one."""
    entries = _schedule_entries(schedule)
    draft = draft_model or DRAFT_PLACEHOLDER
    if format == "json":
        body = {"config": config.model_dump(mode="json"),
                "schedule": [e.model_dump(mode="json") for e in entries] or None}
        return Export(format="json", args=[], config=body, untranslated=[])
    builders = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm, "llamacpp": _llamacpp}
    if format not in builders:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    ranges, base, notes = _speculative_ranges(config, entries)
    notes += _context_caveat(entries)
    if base is None:  # speculation off at every batch size: no arguments to add
        return Export(format=format, args=[], config={}, untranslated=notes)
    return builders[format](ranges, base, notes, draft)
