"""Text and chat messages to prompt token ids."""

from __future__ import annotations

from typing import Any


class PromptError(ValueError):
    """A prompt the tokenizer cannot turn into ids (no tokenizer, no chat template)."""


def encode_text(tokenizer: Any, text: str) -> list[int]:
    if tokenizer is None:
        raise PromptError("prompt: this model has no tokenizer; pass token ids instead of text")
    return list(tokenizer.encode(text))


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Apply the model's chat template with the assistant turn opened."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise PromptError("messages: the model's tokenizer has no chat template")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))
