"""Prompt sets: reading a prompt JSONL file, and the sets shipped with spectune (see README.md here for sources).

A prompt file holds one request per line: ``{"id": "...", "prompt": "raw text"}`` (encoded as is) or
``{"id": "...", "messages": [{"role": "user", "content": "..."}]}`` (through the model's chat template). ``id`` is
optional and defaults to the line number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, model_validator

SHIPPED = ("humaneval", "code-edit", "prose", "math")


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message names the file, line and field."""


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: StrictStr


class PromptRecord(BaseModel):
    """One request of a prompt file."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr | None = Field(default=None, min_length=1)
    prompt: StrictStr | None = Field(default=None, min_length=1)
    messages: list[Message] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> PromptRecord:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' and 'messages'")
        return self


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = "missing field" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def read_prompt_file(path: str | Path) -> list[PromptRecord]:
    """Every record of a prompt JSONL file, ids filled in; ``PromptFileError`` names ``file:line: field`` at fault."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PromptFileError(f"{path}: no such prompt file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"{path}: not a UTF-8 JSONL file ({exc.__class__.__name__})") from None
    records: list[PromptRecord] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise PromptFileError(f"{where}: expected a JSON object with 'prompt' or 'messages'")
        try:
            record = PromptRecord.model_validate(data)
        except ValidationError as exc:
            raise PromptFileError(f"{where}: {_describe(exc)}") from None
        if record.id is None:
            record = record.model_copy(update={"id": str(number)})
        if record.id in seen:
            raise PromptFileError(f"{where}: id: {record.id!r} repeats line {seen[record.id]}")
        seen[record.id] = number
        records.append(record)
    if not records:
        raise PromptFileError(f"{path}: no prompts in this file")
    return records


def shipped_prompts(name: str) -> Path:
    """The JSONL file of a shipped prompt set."""
    if name not in SHIPPED:
        raise PromptFileError(f"workload: no shipped prompt set {name!r} (shipped: {', '.join(SHIPPED)})")
    return Path(__file__).with_name(f"{name}.jsonl")


def prompt_texts(path: str | Path) -> list[str]:
    """A prompt file's requests as plain text: the raw prompt, or the messages' contents joined by newlines."""
    return [r.prompt if r.prompt is not None else "\n".join(m.content for m in r.messages or ())
            for r in read_prompt_file(path)]


def shipped_prompt_texts(workload: str) -> list[str]:
    """The shipped prompt set named like ``workload`` as plain text; empty when there is none."""
    return prompt_texts(shipped_prompts(workload)) if workload in SHIPPED else []
