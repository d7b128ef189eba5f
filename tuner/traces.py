"""Recorded traces: what the target emitted for each request, plus the draft model's view of every output position.

A trace directory holds ``*.jsonl`` files, one request per line::

    {"version": 1, "workload": "code", "request_id": "he-0", "prompt_ids": [...], "output_ids": [...],
     "max_new_tokens": 128, "eos_token_ids": [2], "target": "...", "draft": "..." | null, "dtype": "bfloat16",
     "rank_cap": 16, "draft_rank": [...] | null, "draft_top_prob": [...] | null, "draft_true_prob": [...] | null}

``draft_rank[j]`` is the rank (0 = the draft's argmax) of ``output_ids[j]`` in the draft's distribution given
``prompt + output[:j]`` (teacher forced; ``rank_cap`` means "rank_cap or worse"), ``draft_top_prob[j]`` the draft's
largest probability there and ``draft_true_prob[j]`` its probability of the true token. The output is a greedy run of
the engine, so it ends with a stop token (and holds no earlier one) or has exactly ``max_new_tokens`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator

TRACE_VERSION = 1

TokenId = Annotated[StrictInt, Field(ge=0)]
Prob = Annotated[StrictFloat, Field(ge=0.0, le=1.0)]


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file, line and field."""


class Trace(BaseModel):
    """One recorded request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: StrictInt
    workload: StrictStr = Field(min_length=1)
    request_id: StrictStr = Field(min_length=1)
    prompt_ids: tuple[TokenId, ...] = Field(min_length=1)
    output_ids: tuple[TokenId, ...] = Field(min_length=1)
    max_new_tokens: StrictInt = Field(ge=1)
    eos_token_ids: tuple[TokenId, ...]
    target: StrictStr = Field(min_length=1)
    draft: StrictStr | None
    dtype: StrictStr = Field(min_length=1)
    rank_cap: StrictInt = Field(ge=1)
    draft_rank: tuple[TokenId, ...] | None
    draft_top_prob: tuple[Prob, ...] | None
    draft_true_prob: tuple[Prob, ...] | None

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data and data["version"] != TRACE_VERSION:
            raise ValueError(f"version: trace version {data['version']!r} is not supported (expected "
                             f"{TRACE_VERSION})")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Trace:
        n = len(self.output_ids)
        if n > self.max_new_tokens:
            raise ValueError(f"output_ids: {n} tokens, more than max_new_tokens={self.max_new_tokens}")
        stops = set(self.eos_token_ids)
        early = next((j for j, t in enumerate(self.output_ids[:-1]) if t in stops), None)
        if early is not None:
            raise ValueError(f"output_ids: stop token {self.output_ids[early]} at position {early} before the end")
        if n < self.max_new_tokens and self.output_ids[-1] not in stops:
            raise ValueError(f"output_ids: {n} tokens end before max_new_tokens={self.max_new_tokens} without a "
                             f"stop token from eos_token_ids")
        per_position = {"draft_rank": self.draft_rank, "draft_top_prob": self.draft_top_prob,
                        "draft_true_prob": self.draft_true_prob}
        if self.draft is None:
            given = [name for name, value in per_position.items() if value is not None]
            if given:
                raise ValueError(f"{given[0]}: given without a draft model (draft is null)")
        elif self.draft_rank is None:
            raise ValueError("draft_rank: required when draft is set")
        for name, value in per_position.items():
            if value is not None and len(value) != n:
                raise ValueError(f"{name}: {len(value)} entries, but output_ids has {n}")
        if self.draft_rank is not None and any(r > self.rank_cap for r in self.draft_rank):
            raise ValueError(f"draft_rank: entries must not exceed rank_cap={self.rank_cap}")
        return self

    @property
    def has_draft(self) -> bool:
        return self.draft_rank is not None

    @property
    def stop_ids(self) -> frozenset[int]:
        return frozenset(self.eos_token_ids)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            parts.append(f"{loc}: missing field")
        elif loc:
            parts.append(f"{loc}: {msg}")
        else:
            parts.append(msg)
    return "; ".join(parts)


def parse_trace_line(line: str, where: str) -> Trace:
    """One JSONL line as a ``Trace``; ``where`` (``file:line``) prefixes any error."""
    try:
        return Trace.model_validate_json(line)
    except ValidationError as exc:
        if exc.errors()[0]["type"] == "json_invalid":
            raise TraceError(f"{where}: not valid JSON ({exc.errors()[0]['ctx']['error']})") from None
        raise TraceError(f"{where}: {_describe(exc)}") from None


def _read_file(path: Path) -> list[tuple[str, Trace]]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                where = f"{path}:{number}"
                out.append((where, parse_trace_line(line, where)))
    return out


def load_traces(path: str | Path) -> list[Trace]:
    """Every trace in a directory of ``*.jsonl`` files (sorted by name) or in one ``.jsonl`` file, in file order.
    Raises ``TraceError`` naming the file, line and field of the first bad record."""
    root = Path(path)
    if root.is_dir():
        files = sorted(root.glob("*.jsonl"))
        if not files:
            raise TraceError(f"{root}: no *.jsonl trace files in this directory")
    elif root.is_file():
        files = [root]
    else:
        raise TraceError(f"{root}: no such trace directory or file")
    traces: list[Trace] = []
    seen: dict[tuple[str, str], str] = {}
    for file in files:
        for where, trace in _read_file(file):
            key = (trace.workload, trace.request_id)
            if key in seen:
                raise TraceError(f"{where}: request_id: {trace.request_id!r} repeats {seen[key]} in workload "
                                 f"{trace.workload!r}")
            seen[key] = where
            traces.append(trace)
    if not traces:
        raise TraceError(f"{root}: no traces (the files are empty)")
    return traces


def write_traces(path: str | Path, traces: Iterable[Trace]) -> None:
    """Write ``traces`` as one JSONL file (what the recorder does, per workload)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for trace in traces:
            fh.write(trace.model_dump_json() + "\n")


def by_workload(traces: Iterable[Trace]) -> dict[str, list[Trace]]:
    """Traces grouped by workload, groups and traces in first-seen order."""
    groups: dict[str, list[Trace]] = {}
    for trace in traces:
        groups.setdefault(trace.workload, []).append(trace)
    return groups
