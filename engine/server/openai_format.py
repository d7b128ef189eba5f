"""Between OpenAI bodies and engine requests: prompts to ids, sampling fields to ``SamplingParams``, and outputs to
response bodies and server-sent-event chunks."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from engine.prompts import encode_chat, encode_text
from engine.sampling import SamplingParams
from engine.server.errors import ApiError
from engine.server.scheduler import Final
from engine.server.schemas import ChatCompletionRequest, CompletionRequest, GenerationFields

DEFAULT_MAX_TOKENS = {"completion": 16, "chat": 256}


def prompt_ids(tokenizer: Any, body: CompletionRequest | ChatCompletionRequest) -> list[int]:
    """Token ids of a completion prompt (text or ids) or of chat messages under the model's chat template."""
    if isinstance(body, ChatCompletionRequest):
        return encode_chat(tokenizer, [m.model_dump(exclude_none=True) for m in body.messages])
    return list(body.prompt) if isinstance(body.prompt, list) else encode_text(tokenizer, body.prompt)


def sampling_params(body: GenerationFields, kind: str, prompt_len: int, max_context: int) -> SamplingParams:
    """The engine's parameters; a ``max_tokens`` that cannot fit the context is refused here, naming the field."""
    max_tokens = body.max_tokens or min(DEFAULT_MAX_TOKENS[kind], max(1, max_context - prompt_len))
    if prompt_len + max_tokens > max_context:
        raise ApiError(400, f"max_tokens: {max_tokens} + {prompt_len} prompt tokens exceed the model context of "
                            f"{max_context} tokens", "max_tokens")
    return SamplingParams(max_new_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed,
                          ignore_eos=body.ignore_eos)


@dataclass(frozen=True)
class Envelope:
    """What every body and chunk of one response shares."""

    id: str
    kind: str  # "completion" | "chat"
    model: str
    created: int
    return_token_ids: bool

    @classmethod
    def of(cls, request_id: str, kind: str, model: str, body: GenerationFields) -> Envelope:
        return cls(request_id, kind, model, int(time.time()), body.return_token_ids)

    def _object(self, chunk: bool) -> str:
        base = "text_completion" if self.kind == "completion" else "chat.completion"
        return base + (".chunk" if chunk and self.kind == "chat" else "")

    def _choice(self, text: str, token_ids: list[int], finish_reason: str | None, chunk: bool) -> dict[str, Any]:
        if self.kind == "completion":
            choice: dict[str, Any] = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        elif chunk:
            choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        if self.return_token_ids:
            choice["token_ids"] = token_ids
        return choice

    def _head(self, chunk: bool) -> dict[str, Any]:
        return {"id": self.id, "object": self._object(chunk), "created": self.created, "model": self.model}

    def body(self, text: str, token_ids: list[int], final: Final, prompt_len: int) -> dict[str, Any]:
        return self._head(False) | {"choices": [self._choice(text, token_ids, final.finish_reason, False)],
                                    **_accounting(final, prompt_len)}

    def chunk(self, text: str, token_ids: list[int], final: Final | None = None, prompt_len: int = 0) -> str:
        data = self._head(True) | {"choices": [self._choice(text, token_ids, final and final.finish_reason, True)]}
        if final is not None:
            data |= _accounting(final, prompt_len)
        return sse(data)

    def role_chunk(self) -> str:
        """Chat streams open with the assistant's role, as OpenAI's do."""
        data = self._head(True) | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                "finish_reason": None}]}
        return sse(data)


def _accounting(final: Final, prompt_len: int) -> dict[str, Any]:
    completion = final.summary.output_len
    usage = {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion}
    spectune = final.summary.to_dict() | {"finish_reason": final.finish_reason, "ttft_s": final.ttft_s,
                                          "latency_s": final.latency_s}
    return {"usage": usage, "spectune": spectune}


def sse(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


SSE_DONE = "data: [DONE]\n\n"
