"""Request and response bodies: the OpenAI completions/chat subset the server speaks, and the admin API."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from engine.config import SpecConfig

WorkloadName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
"""Workload names become Prometheus label values and storage keys: short and plain."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = True  # usage is always in the last chunk; accepted for client compatibility


class GenerationFields(BaseModel):
    """What completions and chat completions share. Unknown fields are rejected rather than silently ignored."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1, description="default: 16 for completions, 256 for chat")
    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0)
    stop: Annotated[list[str], Field(max_length=4)] = Field(
        default_factory=list, description="a string or up to 4 strings; the text ends before the first one")
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1, description="only one choice per request")
    user: str | None = None
    workload: WorkloadName | None = Field(default=None, description="default: X-Spectune-Workload header, else default")
    ignore_eos: bool = Field(default=False, description="vLLM extension: keep generating past end-of-sequence")
    return_token_ids: bool = Field(default=False, description="vLLM extension: add token ids to the response")

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else [] if value is None else value


class CompletionRequest(GenerationFields):
    prompt: str | list[int] = Field(description="text, or token ids")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str
    name: str | None = None


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage] = Field(min_length=1)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SpecConfigUpdate(BaseModel):
    """``PUT /admin/spec-config``: without ``workload`` the default config changes."""

    model_config = ConfigDict(extra="forbid")

    workload: WorkloadName | None = None
    config: SpecConfig


class SpecConfigTable(BaseModel):
    default: dict[str, Any]
    workloads: dict[str, dict[str, Any]]
