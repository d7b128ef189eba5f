"""A model ready for the engine: weights, tokenizer and the facts the engine needs about them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LoadedModel:
    """A causal LM in eval mode plus its tokenizer (None for tokenizer-less test models)."""

    name: str  # registry name or path it was loaded from
    model: Any  # transformers PreTrainedModel
    tokenizer: Any | None
    eos_token_ids: frozenset[int] = field(default_factory=frozenset)
    precision: str = "float32"  # the load dtype, or "int8" for dynamic int8 weights
    # a faster equivalent of ``model.get_decoder()`` for the engine's forwards (engine.models.fused for int8,
    # engine.models.packed for bfloat16 on CPU), or None
    fast_decoder: Any | None = None

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any | None = None, name: str = "in-memory",
                   precision: str | None = None, fast_decoder: Any | None = None) -> LoadedModel:
        model.eval()
        for param in model.parameters():
            param.requires_grad_(False)
        eos = getattr(model.generation_config, "eos_token_id", None) if hasattr(model, "generation_config") else None
        if eos is None and tokenizer is not None:
            eos = tokenizer.eos_token_id
        eos_ids = frozenset([eos] if isinstance(eos, int) else (eos or []))
        if precision is None:
            precision = str(next(model.parameters()).dtype).removeprefix("torch.")
        return cls(name=name, model=model, tokenizer=tokenizer, eos_token_ids=eos_ids, precision=precision,
                   fast_decoder=fast_decoder)

    @property
    def decoder(self) -> Any:
        """What the engine runs the layers with."""
        return self.fast_decoder if self.fast_decoder is not None else self.model.get_decoder()

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
