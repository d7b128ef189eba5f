"""Engine identity: the setup a profile was tuned on, so that it is never applied silently to another one."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, field_validator

_FIELDS = ("target", "draft", "dtype", "hardware")


class EngineIdentity(BaseModel):
    """Target model, draft model, dtype and hardware fingerprint; a field left ``None`` matches any engine.

    All fields ``None`` is the *portable* identity: such a profile applies to every engine. When several active profiles
    match an engine, the most specific one wins (see :meth:`specificity`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: str | None = Field(default=None, max_length=200)
    draft: str | None = Field(default=None, max_length=200)
    dtype: str | None = Field(default=None, max_length=32)
    hardware: str | None = Field(default=None, max_length=200)

    @field_validator(*_FIELDS, mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    @property
    def key(self) -> str:
        """Stable string key, e.g. ``["smollm2-135m",null,"bfloat16",null]``; one active profile per (workload, key)."""
        return json.dumps([getattr(self, f) for f in _FIELDS], separators=(",", ":"))

    @property
    def portable(self) -> bool:
        return all(getattr(self, f) is None for f in _FIELDS)

    def matches(self, engine: EngineIdentity) -> bool:
        """True when a profile tuned for ``self`` may be applied to ``engine``: every field ``self`` fixes is equal."""
        return all(getattr(self, f) is None or getattr(self, f) == getattr(engine, f) for f in _FIELDS)

    def specificity(self) -> tuple[int, tuple[bool, ...]]:
        """Sort key: more fixed fields first, then target > draft > dtype > hardware; an exact identity ranks first."""
        fixed = tuple(getattr(self, f) is not None for f in _FIELDS)
        return sum(fixed), fixed

    def __str__(self) -> str:
        if self.portable:
            return "portable"
        return " ".join(f"{f}={getattr(self, f)}" for f in _FIELDS if getattr(self, f) is not None)


PORTABLE = EngineIdentity()
