"""Token ids -> text, incrementally, with OpenAI ``stop`` strings.

Decoding a growing id list from scratch every step is quadratic; decoding only the new ids breaks words and multi-byte
characters that span tokens. ``TextStream`` decodes a small window (as HF text-generation-inference does): the text of
``ids[prefix:]`` minus the text of ``ids[prefix:read]`` is what the new ids add, held back while it ends in an
incomplete character. A few prompt ids seed the window so the first token decodes in context (leading spaces).
"""

from __future__ import annotations

from typing import Any

_PROMPT_CONTEXT = 5
_INCOMPLETE = "\ufffd"


class TextStream:
    """Turns a request's output ids into text deltas, stopping at the first ``stop`` string (which is not included).

    While a stop string could still be completing, up to ``max(len(stop)) - 1`` characters are held back, so a
    streaming client never sees text that is later cut.
    """

    def __init__(self, tokenizer: Any, prompt_ids: list[int], stop: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        self._ids = list(prompt_ids[-_PROMPT_CONTEXT:])
        self._prefix = 0
        self._read = len(self._ids)
        self._text = ""  # all decoded output text (cut at a stop string once one matched)
        self._sent = 0  # characters of _text already handed out
        self.stopped = False

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, new_ids: list[int]) -> str:
        """Feed newly generated ids; return the text that may be shown now."""
        if self.stopped:
            return ""
        self._ids += new_ids
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) > len(before) and not after.endswith(_INCOMPLETE):
            self._append(after[len(before):])
            self._prefix, self._read = self._read, len(self._ids)
        hold = 0 if self.stopped else max((len(s) for s in self.stop), default=1) - 1
        return self._take(len(self._text) - hold)

    def finish(self) -> str:
        """The rest of the text once generation has ended (incomplete characters included as U+FFFD)."""
        if not self.stopped:
            tail = self._decode(self._ids[self._prefix:])[len(self._decode(self._ids[self._prefix:self._read])):]
            self._append(tail)
        return self._take(len(self._text))

    def _append(self, delta: str) -> None:
        start = max(0, len(self._text) - max((len(s) for s in self.stop), default=0))
        self._text += delta
        hits = [i for i in (self._text.find(s, start) for s in self.stop) if i >= 0]
        if hits:
            self._text = self._text[:min(hits)]
            self.stopped = True

    def _take(self, end: int) -> str:
        if end <= self._sent:
            return ""
        delta, self._sent = self._text[self._sent:end], end
        return delta
