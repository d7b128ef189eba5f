"""llama.cpp's ``llama-server`` behind the engine interface.

Speculation is fixed per server process in the llama.cpp version spectune builds (the per-request ``speculative.*``
fields are compiled out), so ``apply`` relaunches the server with new flags and keeps it when the flags repeat.
Statistics come from ``/metrics`` (the ``llamacpp:spec_decode_*`` counters, engine-wide, so keyed by ``""``) and from
each response's ``timings``. The ``llamacpp`` extension (``LlamaCppExtension``) carries llama.cpp-only settings.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import httpx

from engine.config import SpecConfig
from tuner.engines.base import (
    Capabilities,
    Completion,
    EngineAdapter,
    EngineError,
    EngineStats,
    RequestTiming,
)
from tuner.engines.llamacpp_config import LlamaCppExtension, spec_flags
from tuner.engines.llamacpp_install import find_llama_server
from tuner.engines.llamacpp_server import LlamaServerProcess, ServerOptions, free_port, server_command
from tuner.engines.prometheus import SpecDecodeCounters, parse_spec_decode

METRICS_PREFIX = "llamacpp:"
_PORT_ATTEMPTS = 3  # a free port can be taken between probing it and the server binding it


def resolve_gguf(name_or_path: str, field: str = "model") -> Path:
    """A registered model name (fetched into the model cache if needed) or an existing ``.gguf`` file."""
    from engine.models.registry import REGISTRY, get_spec

    if name_or_path in REGISTRY:
        from engine.models.fetch import ensure_gguf

        return ensure_gguf(get_spec(name_or_path))
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path.resolve()
    raise ValueError(f"{field}: {name_or_path!r} is neither a registered model ({', '.join(REGISTRY)}) "
                     "nor an existing .gguf file")


class LlamaCppEngine(EngineAdapter):
    """Launches and steers one ``llama-server`` on loopback. Configs take effect by relaunching it."""

    name: ClassVar[str] = "llama.cpp"
    capabilities: ClassVar[Capabilities] = Capabilities(
        live_config=False, per_workload_config=False, step_traces=False, trees=False,
        methods=frozenset({"off", "draft", "ngram"}))

    def __init__(self, options: ServerOptions, draft_model: Path | None = None, binary: Path | None = None,
                 request_timeout_s: float = 600.0) -> None:
        self.options = options
        self.draft_model = draft_model
        self.binary = binary
        self.request_timeout_s = request_timeout_s
        self._flags: list[str] = []
        self._served: set[str] = set()  # workloads whose config the running flags express
        self._process: LlamaServerProcess | None = None
        self._requests: list[RequestTiming] = []

    @property
    def base_url(self) -> str:
        if self._process is None:
            raise EngineError("llama-server is not running; call start() or apply() first")
        return self._process.url

    @property
    def command(self) -> list[str]:
        """The argv of the running server."""
        if self._process is None:
            raise EngineError("llama-server is not running")
        return list(self._process.command)

    @property
    def process(self) -> LlamaServerProcess | None:
        return self._process

    def flags_for(self, config: SpecConfig, extension: Mapping[str, Any] | None = None) -> list[str]:
        """The speculation flags ``config`` maps to; UnsupportedConfigError naming the field otherwise.

        The draft model is loaded only for method draft, so one engine can try draft, n-gram and off configs."""
        draft = str(self.draft_model) if self.draft_model is not None and config.method == "draft" else None
        return spec_flags(config, LlamaCppExtension.parse(extension), draft_model=draft,
                          threads=self.options.threads, parallel=self.options.parallel)

    def start(self) -> None:
        """Launch with the last applied config (none applied: speculation off)."""
        if self._process is None or not self._process.running():
            self._launch(self._flags)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    def health(self) -> bool:
        return self._process is not None and self._process.running() and self._process.healthy()

    def apply(self, workload: str, config: SpecConfig, extension: Mapping[str, Any] | None = None) -> None:
        """Serve ``workload`` with ``config``: relaunch unless the running server already has exactly these flags."""
        flags = self.flags_for(config, extension)
        if self._process is not None and self._process.running() and flags == self._flags:
            self._served.add(workload)
            return
        self.stop()
        self._launch(flags)
        self._flags, self._served = flags, {workload}

    def complete(self, prompt: str, *, workload: str, max_tokens: int) -> Completion:
        """One greedy chat request; its timing is also kept for ``read_stats``."""
        if self._served and workload not in self._served:
            raise EngineError(f"llama-server runs the config of {sorted(self._served)}, not of workload "
                              f"{workload!r}; apply() its config first")
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0.0,
                # a warm prompt cache would make prefill timings depend on the previous request
                "cache_prompt": False}
        started = time.perf_counter()
        response = self._post("/v1/chat/completions", body)
        timing = _timing(workload, response, wall_s=time.perf_counter() - started)
        self._requests.append(timing)
        return Completion(text=response["choices"][0]["message"]["content"], timing=timing)

    def read_stats(self, since: int = 0) -> EngineStats:
        if self._process is None:
            raise EngineError("llama-server is not running")
        counters = parse_spec_decode(self.metrics_text(), METRICS_PREFIX)
        return EngineStats(instance=self._process.instance, counters={"": counters.get("", SpecDecodeCounters())},
                           requests=tuple(self._requests[since:]), cursor=len(self._requests))

    def metrics_text(self) -> str:
        return self._get("/metrics").text

    def props(self) -> dict[str, Any]:
        """The server's ``/props`` (model, build, ``speculative.types``, default generation settings)."""
        return self._get("/props").json()

    def _launch(self, flags: list[str]) -> None:
        binary = self.binary or find_llama_server()
        for attempt in range(_PORT_ATTEMPTS):
            port = self.options.port or free_port()
            process = LlamaServerProcess(server_command(binary, self.options, port, flags), port)
            try:
                process.wait_healthy(self.options.startup_timeout_s)
            except EngineError:
                lost_port = "couldn't bind" in process.log_tail()
                process.stop()
                if lost_port and self.options.port is None and attempt + 1 < _PORT_ATTEMPTS:
                    continue
                raise
            self._process = process
            return

    def _get(self, path: str) -> httpx.Response:
        try:
            response = httpx.get(f"{self.base_url}{path}", timeout=30.0)
        except httpx.HTTPError as exc:
            raise EngineError(f"GET {path} failed: {exc}") from exc
        _raise_for_status(path, response)
        return response

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = httpx.post(f"{self.base_url}{path}", json=body, timeout=self.request_timeout_s)
        except httpx.HTTPError as exc:
            raise EngineError(f"POST {path} failed: {exc}") from exc
        _raise_for_status(path, response)
        return response.json()


def _raise_for_status(path: str, response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise EngineError(f"{path} answered {response.status_code}: {response.text[:500]}")


def _timing(workload: str, response: dict[str, Any], wall_s: float) -> RequestTiming:
    timings = response.get("timings")
    if not isinstance(timings, dict):
        raise EngineError("llama-server response has no 'timings' object")
    return RequestTiming(
        workload=workload,
        prompt_tokens=int(timings["prompt_n"]),
        output_tokens=int(timings["predicted_n"]),
        prompt_s=float(timings["prompt_ms"]) / 1e3,
        decode_s=float(timings["predicted_ms"]) / 1e3,
        draft_tokens=int(timings.get("draft_n", 0)),  # absent when nothing was drafted
        accepted_tokens=int(timings.get("draft_n_accepted", 0)),
        wall_s=wall_s,
    )

