"""Whether a draft model can propose tokens for a target: both must speak the same vocabulary."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from engine.models.loaded import LoadedModel


class IncompatibleModelsError(ValueError):
    """The draft's tokenizer or vocabulary differs from the target's."""


@dataclass(frozen=True)
class VocabFingerprint:
    """What identifies a model's vocabulary: the logit width and a short hash of the token -> id dict."""

    name: str
    size: int  # config.vocab_size, the width of the logits
    digest: str | None  # None for tokenizer-less (in-memory test) models

    def describe(self) -> str:
        return f"{self.name!r} (vocab {self.size}, hash {self.digest or 'n/a: no tokenizer'})"


def vocab_fingerprint(loaded: LoadedModel) -> VocabFingerprint:
    digest = None
    if loaded.tokenizer is not None:
        vocab = sorted(loaded.tokenizer.get_vocab().items())
        digest = hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:12]
    return VocabFingerprint(name=loaded.name, size=loaded.vocab_size, digest=digest)


def _same_vocabulary(target: LoadedModel, draft: LoadedModel) -> bool:
    if target.vocab_size != draft.vocab_size:
        return False
    if target.tokenizer is None or draft.tokenizer is None or target.tokenizer is draft.tokenizer:
        return True
    return target.tokenizer.get_vocab() == draft.tokenizer.get_vocab()


def check_draft_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise IncompatibleModelsError unless ``draft`` has the target's vocabulary.

    Logit widths must match (verification compares distributions position by position); token dicts are compared
    too when both models carry a tokenizer, since equal sizes do not mean equal tokens.
    """
    if _same_vocabulary(target, draft):
        return
    t, d = vocab_fingerprint(target), vocab_fingerprint(draft)  # hashing a 150k vocab takes ~1 s: only on failure
    raise IncompatibleModelsError(f"draft {d.describe()} does not share the vocabulary of target {t.describe()}; "
                                  "speculative decoding needs identical tokenizers")
