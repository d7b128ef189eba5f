"""The sidecar's settings: command-line options over ``SPECTUNE_*`` environment variables, validated at startup."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tuner.controller.drift import DriftOptions
from tuner.controller.stabilise import StabilityOptions


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECTUNE_", extra="ignore")

    api_token: SecretStr | None = Field(default=None, description="bearer token every /v1 route requires (if set)")
    db_url: str | None = Field(default=None, description="database URL; default a SQLite file in the data directory")
    engine_url: str | None = Field(default=None, description="spectune engine server to steer (none: API only)")
    admin_token: SecretStr | None = Field(default=None, description="bearer token the engine's /admin requires")
    host: str = "127.0.0.1"
    port: int = Field(default=8002, ge=0, le=65535)
    policy: str = Field(default="goodput", description="goodput SPEC the controller prices configs with")
    cost_model: Path | None = Field(default=None, description="cost model JSON (spectune calibrate)")
    traces: Path | None = Field(default=None, description="recorded traces directory for replay searches")
    retune_trials: int = Field(default=50, ge=1, le=10_000, description="trials of a drift-triggered re-tune")
    poll_interval_s: float = Field(default=1.0, gt=0, le=600)
    stability: StabilityOptions = Field(default_factory=StabilityOptions,
                                        description='JSON, e.g. SPECTUNE_STABILITY=\'{"on_window_s": 30}\'')
    drift: DriftOptions = Field(default_factory=DriftOptions, description="JSON, like stability")

    @field_validator("api_token", "admin_token", mode="after")
    @classmethod
    def _empty_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        return value if value is not None and value.get_secret_value() else None
