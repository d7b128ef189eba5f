"""The server's settings: command-line options over ``SPECTUNE_*`` environment variables, validated at startup."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.models.loading import check_target_dtype

Dtype = Literal["float32", "bfloat16", "float16", "int8"]


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECTUNE_", extra="ignore")

    target: str = Field(description="registry name or path of the target model")
    draft: str | None = Field(default=None, description="registry name or path of the draft model")
    dtype: Dtype = "float32"
    draft_dtype: Dtype | None = Field(default=None, description="default: the target's dtype")
    host: str = "127.0.0.1"
    port: int = Field(default=8001, ge=0, le=65535)
    max_batch: int = Field(default=8, ge=1, le=256, description="requests in the running batch at most")
    profile_source: str | None = Field(default=None, description="sidecar URL or exported profile file")
    admin_token: SecretStr | None = Field(default=None, description="bearer token /admin requires (if set)")
    api_token: SecretStr | None = Field(default=None, description="bearer token sent to a sidecar profile source")
    stats_capacity: int = Field(default=10_000, ge=1, le=1_000_000, description="entries /stats keeps")
    profile_timeout_s: float = Field(default=5.0, gt=0, le=120)

    @field_validator("dtype", mode="after")
    @classmethod
    def _target_dtype(cls, value: str) -> str:
        try:
            check_target_dtype(value)
        except ValueError as exc:  # reported as "dtype: <why>", like the other fields' errors
            raise PydanticCustomError("target_dtype", str(exc).removeprefix("dtype: ")) from None
        return value

    @field_validator("admin_token", "api_token", mode="after")
    @classmethod
    def _empty_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value() else None
