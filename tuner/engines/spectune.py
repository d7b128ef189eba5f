"""The client for spectune's own engine server: live per-workload configs (``PUT /admin/spec-config``), cursor-paged
step statistics (``GET /stats``) and ``spectune:`` Prometheus counters.

Connect-only: ``start()`` waits for a server someone else launched (``spectune engine serve``) to answer its health
check; ``stop()`` closes the HTTP client and leaves the server running.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar

import httpx

from engine.config import SpecConfig
from engine.stats import StepStats
from tuner.engines.base import (
    Capabilities,
    Completion,
    EngineAdapter,
    EngineError,
    EngineStats,
    RequestTiming,
    UnsupportedConfigError,
)
from tuner.engines.prometheus import MetricsParseError, parse_spec_decode


@dataclass(frozen=True)
class StatsPage:
    """One ``GET /stats`` page: step statistics and finished-request summaries after a cursor."""

    epoch: str
    next_cursor: int
    dropped: int
    steps: tuple[StepStats, ...]
    requests: tuple[dict[str, Any], ...]


def step_from_json(data: Mapping[str, Any]) -> StepStats:
    # a field with a default (added after the first release) may be missing from an older server's page
    fields = {name: data[name] for name, f in StepStats.__dataclass_fields__.items()
              if name in data or f.default is MISSING}
    fields["accepted_per_position"] = tuple(fields["accepted_per_position"])
    return StepStats(**fields)


class SpectuneEngine(EngineAdapter):
    name = "spectune"
    capabilities: ClassVar[Capabilities] = Capabilities(live_config=True, per_workload_config=True, step_traces=True,
                                                        trees=True, methods=frozenset({"off", "draft", "ngram"}))

    def __init__(self, url: str, admin_token: str | None = None, timeout_s: float = 10.0,
                 startup_timeout_s: float = 60.0) -> None:
        self._url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._client = httpx.Client(base_url=self._url, headers=headers, timeout=timeout_s)
        self._startup_timeout_s = startup_timeout_s

    @property
    def base_url(self) -> str:
        return self._url

    def start(self) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        while not self.health():
            if time.monotonic() > deadline:
                raise EngineError(f"spectune engine at {self._url} not healthy after {self._startup_timeout_s}s")
            time.sleep(0.2)

    def stop(self) -> None:
        self._client.close()

    def health(self) -> bool:
        try:
            return self._client.get("/health", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def apply(self, workload: str, config: SpecConfig, extension: Mapping[str, Any] | None = None) -> None:
        if extension:
            raise UnsupportedConfigError("extension", f"spectune's engine takes no extension settings, got "
                                                      f"{sorted(extension)}")
        body = {"config": config.model_dump(mode="json")} | ({} if workload == "default" else {"workload": workload})
        response = self._request("PUT", "/admin/spec-config", json=body)
        if response.status_code == 422:
            error = response.json().get("error", {})
            raise UnsupportedConfigError(error.get("param") or "config", error.get("message", response.text))
        self._check(response)

    def spec_configs(self) -> dict[str, Any]:
        """``GET /admin/spec-config``: the default config and the per-workload ones."""
        response = self._request("GET", "/admin/spec-config")
        self._check(response)
        return response.json()

    def complete(self, prompt: str, *, workload: str, max_tokens: int) -> Completion:
        start = time.perf_counter()
        response = self._request("POST", "/v1/completions", json={
            "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "workload": workload})
        wall = time.perf_counter() - start
        self._check(response)
        body = response.json()
        info = body["spectune"]
        timing = RequestTiming(workload=workload, prompt_tokens=body["usage"]["prompt_tokens"],
                               output_tokens=body["usage"]["completion_tokens"], prompt_s=info["prefill_s"],
                               decode_s=info["draft_s"] + info["verify_s"], draft_tokens=info["draft_tokens"],
                               accepted_tokens=info["accepted_tokens"], wall_s=wall)
        return Completion(text=body["choices"][0]["text"], timing=timing)

    def stats_page(self, since: int = 0, limit: int = 1000) -> StatsPage:
        response = self._request("GET", "/stats", params={"since": since, "limit": limit})
        self._check(response)
        body = response.json()
        try:
            steps = tuple(step_from_json(s) for s in body["steps"])
        except (KeyError, TypeError) as exc:
            raise EngineError(f"{self._url}/stats: malformed step entry: {exc}") from exc
        return StatsPage(epoch=str(body["epoch"]), next_cursor=int(body["next_cursor"]), dropped=int(body["dropped"]),
                         steps=steps, requests=tuple(body["requests"]))

    def read_stats(self, since: int = 0) -> EngineStats:
        page = self.stats_page(since)
        metrics = self._request("GET", "/metrics")
        self._check(metrics)
        try:
            counters = parse_spec_decode(metrics.text, "spectune:", workload_label="workload")
        except MetricsParseError as exc:
            raise EngineError(f"{self._url}/metrics: {exc}") from exc
        requests = tuple(RequestTiming(
            workload=r["workload"], prompt_tokens=r["prompt_len"], output_tokens=r["output_len"],
            prompt_s=r["prefill_s"], decode_s=r["draft_s"] + r["verify_s"], draft_tokens=r["draft_tokens"],
            accepted_tokens=r["accepted_tokens"], wall_s=r.get("latency_s") or r["wall_s"]) for r in page.requests)
        return EngineStats(instance=page.epoch, counters=counters, requests=requests, cursor=page.next_cursor)

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise EngineError(f"{self._url}{path}: {type(exc).__name__}: {exc}") from exc

    def _check(self, response: httpx.Response) -> None:
        if response.status_code >= 400:
            raise EngineError(f"{response.request.method} {response.request.url.path} answered HTTP "
                              f"{response.status_code}: {response.text[:500]}")
