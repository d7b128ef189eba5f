"""A target and its optional draft, loaded as every command needs them: on one device, with one vocabulary."""

from __future__ import annotations

from pathlib import Path

from engine.models.compat import check_draft_compatible
from engine.models.loaded import LoadedModel
from engine.models.loading import check_target_dtype, load_model


def load_pair(target: str | Path, draft: str | Path | None, dtype: str = "float32", draft_dtype: str | None = None,
              progress: bool = True) -> tuple[LoadedModel, LoadedModel | None]:
    """The target in ``dtype`` (int8 refused, see ``check_target_dtype``) and the draft, if any, in ``draft_dtype``
    (default ``dtype``) on the target's device; ``IncompatibleModelsError`` where their vocabularies differ."""
    check_target_dtype(dtype)
    target_model = load_model(target, dtype=dtype, progress=progress)
    if draft is None:
        return target_model, None
    draft_model = load_model(draft, dtype=draft_dtype or dtype, device=target_model.device, progress=progress)
    check_draft_compatible(target_model, draft_model)
    return target_model, draft_model
