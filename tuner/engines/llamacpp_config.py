"""SpecConfig -> ``llama-server`` speculation flags, for the llama.cpp version spectune builds (commit 0c1e570).

Mapping (speculation is fixed per server process in this version; the per-request fields are compiled out):

- ``method="off"``   -> no speculation flags.
- ``method="draft"`` -> ``-md DRAFT --spec-type draft-simple --spec-draft-n-max k --spec-draft-n-min 0``; the draft
  drafts one chain, so ``tree`` must be a chain. ``min_n``/``max_n`` are n-gram fields and play no part.
- ``method="ngram"`` -> ``--spec-type ngram-simple --spec-ngram-simple-size-n N --spec-ngram-simple-size-m k``.
  llama.cpp looks up one fixed n-gram length, so ``min_n`` must equal ``max_n`` (= N).

llama.cpp's own modes and knobs that SpecConfig has no field for go in the ``llamacpp`` extension
(``LlamaCppExtension``), e.g. ``{"spec_type": "ngram-mod"}``: k is then ngram-mod's draft cap
(``--spec-ngram-mod-n-max``) and N its lookup length (``--spec-ngram-mod-n-match``). Lengths always come from
SpecConfig, so a profile means the same thing on every engine; its bounds (k <= 32, N <= 16) exclude llama.cpp's
ngram-mod defaults (n_match 24, n_max 64).
A config that cannot be expressed raises UnsupportedConfigError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.config import SpecConfig
from tuner.engines.base import UnsupportedConfigError

SpecType = Literal["draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"]

_TYPES_BY_METHOD: dict[str, tuple[str, ...]] = {
    "draft": ("draft-simple",),
    "ngram": ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"),
}
_NGRAM_MAP_PREFIX = {"ngram-simple": "ngram-simple", "ngram-map-k": "ngram-map-k", "ngram-map-k4v": "ngram-map-k4v"}


class LlamaCppExtension(BaseModel):
    """llama.cpp settings SpecConfig has no field for. Stored next to a profile's SpecConfig under ``llamacpp``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec_type: SpecType | None = Field(default=None, description="llama.cpp drafter; default from method")
    draft_p_min: float | None = Field(default=None, ge=0.0, le=1.0,
                                      description="draft-simple: stop drafting below this draft probability")
    draft_n_min: int | None = Field(default=None, ge=0, le=32,
                                    description="draft-simple: shortest draft worth verifying")
    ngram_min_hits: int | None = Field(default=None, ge=1, le=64,
                                       description="ngram-simple/-map-k/-map-k4v: hits before an n-gram drafts")
    ngram_mod_n_min: int | None = Field(default=None, ge=0, le=32, description="ngram-mod: shortest draft proposed")

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> LlamaCppExtension:
        """Validate an extension dict; errors name ``llamacpp.<field>``."""
        try:
            return cls.model_validate(dict(raw or {}))
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise UnsupportedConfigError(f"llamacpp.{field}" if field else "llamacpp", err["msg"]) from None

    @property
    def empty(self) -> bool:
        return not self.model_dump(exclude_none=True)


def spec_flags(config: SpecConfig, extension: LlamaCppExtension | None = None, *, draft_model: str | None = None,
               threads: int | None = None, parallel: int = 1) -> list[str]:
    """The ``llama-server`` arguments that run ``config``; UnsupportedConfigError when it cannot be expressed.

    ``parallel`` is the server's slot count (``-np``): llama.cpp cannot switch speculation off above a batch size, so
    ``max_batch_size`` must not be below it.
    """
    ext = extension or LlamaCppExtension()
    if not config.speculative:
        if not ext.empty:
            raise UnsupportedConfigError("llamacpp", "method is off; llama.cpp settings need method draft or ngram")
        return []
    if config.max_batch_size is not None and config.max_batch_size < parallel:
        raise UnsupportedConfigError(
            "max_batch_size", f"llama.cpp cannot turn speculation off above a batch size; the server runs {parallel} "
            f"slot(s), so max_batch_size must be >= {parallel} or unset")
    if not config.tree.is_chain:
        raise UnsupportedConfigError("tree", f"llama.cpp drafts a single chain; tree {config.tree} is not supported")
    spec_type = ext.spec_type or _TYPES_BY_METHOD[config.method][0]
    if spec_type not in _TYPES_BY_METHOD[config.method]:
        raise UnsupportedConfigError(
            "llamacpp.spec_type", f"{spec_type} does not fit method {config.method!r} "
            f"(use one of {', '.join(_TYPES_BY_METHOD[config.method])})")
    _check_applicable(ext, spec_type)
    if spec_type == "draft-simple":
        return _draft_flags(config, ext, draft_model, threads)
    if draft_model is not None:
        raise UnsupportedConfigError("draft", f"a draft model is only used by method draft, not {config.method!r}")
    if config.min_n != config.max_n:
        raise UnsupportedConfigError(
            "min_n", f"llama.cpp {spec_type} looks up one fixed n-gram length; set min_n = max_n "
            f"(got {config.min_n}..{config.max_n})")
    if spec_type == "ngram-mod":
        flags = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", str(config.max_n),
                 "--spec-ngram-mod-n-max", str(config.k)]
        n_min = ext.ngram_mod_n_min if ext.ngram_mod_n_min is not None else 0
        if n_min > config.k:
            raise UnsupportedConfigError("llamacpp.ngram_mod_n_min", f"{n_min} exceeds the draft cap k={config.k}")
        return [*flags, "--spec-ngram-mod-n-min", str(n_min)]
    if spec_type == "ngram-simple" and config.k < config.max_n:
        # common_ngram_simple_draft() returns nothing when the m-gram is shorter than the n-gram.
        raise UnsupportedConfigError("k", f"ngram-simple never drafts when k ({config.k}) < the n-gram length "
                                          f"max_n ({config.max_n})")
    prefix = _NGRAM_MAP_PREFIX[spec_type]
    flags = ["--spec-type", spec_type, f"--spec-{prefix}-size-n", str(config.max_n), f"--spec-{prefix}-size-m",
             str(config.k)]
    if ext.ngram_min_hits is not None:
        flags += [f"--spec-{prefix}-min-hits", str(ext.ngram_min_hits)]
    return flags


def _draft_flags(config: SpecConfig, ext: LlamaCppExtension, draft_model: str | None, threads: int | None) -> list[str]:
    if draft_model is None:
        raise UnsupportedConfigError("draft", "method draft needs a draft model GGUF (--draft)")
    n_min = ext.draft_n_min if ext.draft_n_min is not None else 0
    if n_min > config.k:
        raise UnsupportedConfigError("llamacpp.draft_n_min", f"{n_min} exceeds the draft length k={config.k}")
    flags = ["-md", draft_model, "--spec-type", "draft-simple", "--spec-draft-n-max", str(config.k),
             "--spec-draft-n-min", str(n_min)]
    if ext.draft_p_min is not None:
        flags += ["--spec-draft-p-min", str(ext.draft_p_min)]
    if threads is not None:
        flags += ["--spec-draft-threads", str(threads), "--spec-draft-threads-batch", str(threads)]
    return flags


def _check_applicable(ext: LlamaCppExtension, spec_type: str) -> None:
    owners = {
        "draft_p_min": ("draft-simple",),
        "draft_n_min": ("draft-simple",),
        "ngram_min_hits": ("ngram-simple", "ngram-map-k", "ngram-map-k4v"),
        "ngram_mod_n_min": ("ngram-mod",),
    }
    for field, types in owners.items():
        if getattr(ext, field) is not None and spec_type not in types:
            raise UnsupportedConfigError(f"llamacpp.{field}", f"only applies to {', '.join(types)}, not {spec_type}")
