"""What the demo asks of the sidecar over HTTP, answered as the sidecar's own schemas: start a replay search and
follow it, the active profiles, the controller's decisions and recommendations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from storage.schemas import DecisionRecord, ProfileRecord
from tuner.sidecar.schemas import RecommendationPublic
from tuner.tuning.routes import StudyRequest, StudyStatus

MAX_DECISIONS = 1000


class SidecarError(RuntimeError):
    """The sidecar refused a request or a search failed; the message says which."""


class SidecarClient:
    def __init__(self, url: str, token: str) -> None:
        self._client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SidecarError(f"sidecar {path}: {type(exc).__name__}: {exc}") from exc

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return _checked(self._send(method, path, **kwargs))

    def start_study(self, request: StudyRequest) -> StudyStatus:
        return StudyStatus.model_validate(self._call("POST", "/v1/studies", json=request.model_dump(mode="json")))

    def study(self, name: str) -> StudyStatus:
        return StudyStatus.model_validate(self._call("GET", f"/v1/studies/{name}"))

    def wait_studies(self, names: list[str], on_poll: Callable[[list[StudyStatus]], None],
                     interval_s: float = 0.5) -> list[StudyStatus]:
        """Poll until no study is running; a failed or stopped one raises ``SidecarError``."""
        while True:
            states = [self.study(name) for name in names]
            on_poll(states)
            if all(s.state not in ("running", "stopping") for s in states):
                break
            time.sleep(interval_s)
        for status in states:
            if status.state != "succeeded":
                raise SidecarError(f"study {status.study_name} {status.state}: {status.error or 'no profile saved'}")
        return states

    def active_profile(self, workload: str, identity: dict[str, str]) -> ProfileRecord:
        """The active profile that applies to an engine of this identity (target, draft, dtype, hardware)."""
        return ProfileRecord.model_validate(self._call("GET", f"/v1/profiles/{workload}", params=identity))

    def decisions(self) -> list[DecisionRecord]:
        """Every workload's decisions, oldest first."""
        rows = self._call("GET", "/v1/decisions", params={"limit": MAX_DECISIONS})
        return sorted((DecisionRecord.model_validate(r) for r in rows), key=lambda d: d.id)

    def recommendation(self, workload: str) -> RecommendationPublic | None:
        """The controller's current pick for the workload, or None before it has seen any of its steps."""
        response = self._send("GET", "/v1/recommendation", params={"workload": workload})
        return None if response.status_code == 404 else RecommendationPublic.model_validate(_checked(response))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checked(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise SidecarError(f"sidecar {response.request.method} {response.request.url.path} answered HTTP "
                           f"{response.status_code}: {response.text[:300]}")
    return response.json()
