"""Models for the engine: the registry of shipped models, fetching and converting them, loading, compatibility."""

from engine.models.cache import cache_root, gguf_path
from engine.models.compat import IncompatibleModelsError, check_draft_compatible
from engine.models.fetch import ModelFetchError, fetch_model
from engine.models.gguf import GgufError
from engine.models.identity import hardware_fingerprint, model_identity
from engine.models.loaded import LoadedModel
from engine.models.loading import check_target_dtype, load_model
from engine.models.pair import load_pair
from engine.models.registry import REGISTRY, ModelNotFoundError, ModelSpec

__all__ = [
    "REGISTRY",
    "GgufError",
    "IncompatibleModelsError",
    "LoadedModel",
    "ModelFetchError",
    "ModelNotFoundError",
    "ModelSpec",
    "cache_root",
    "check_draft_compatible",
    "check_target_dtype",
    "fetch_model",
    "gguf_path",
    "hardware_fingerprint",
    "load_model",
    "load_pair",
    "model_identity",
]
