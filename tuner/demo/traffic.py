"""The demo's requests: the shipped prompt sets as token ids, sent greedily to the engine's ``/v1/completions`` with a
workload name, and each answer kept as a ``Sample`` (its output ids and the engine's per-request statistics).

Prompts go as token ids (chat prompts through the target's chat template), so the traces built from the answers hold
exactly what the engine saw.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from tqdm import tqdm

from engine.models.loaded import LoadedModel
from tuner.record import encode_prompt
from tuner.workloads import read_prompt_file, shipped_prompts


class TrafficError(RuntimeError):
    """The engine refused or failed a request."""


@dataclass(frozen=True)
class DemoPrompt:
    workload: str
    id: str
    ids: tuple[int, ...]


@dataclass(frozen=True)
class Sample:
    """One answered request. ``arm`` is the phase's role for it: controller, off or tuned."""

    workload: str
    prompt_id: str
    arm: str
    sent_as: str  # the workload name the engine served it under
    started: float  # time.time() when sent
    output_ids: tuple[int, ...]
    finish_reason: str
    prefill_s: float
    decode_s: float  # the engine's draft + verify time for this request
    wall_s: float
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]

    @property
    def tokens(self) -> int:
        return len(self.output_ids)


def load_prompts(target: LoadedModel, workloads: Sequence[str], per_workload: int) -> dict[str, list[DemoPrompt]]:
    """The first ``per_workload`` prompts of each shipped set, encoded for ``target``."""
    out = {}
    for workload in workloads:
        records = read_prompt_file(shipped_prompts(workload))[:per_workload]
        out[workload] = [DemoPrompt(workload, r.id or "", tuple(encode_prompt(target, r))) for r in records]
    return out


class TrafficClient:
    """Greedy completions on one engine; thread-safe (one httpx client shared by the senders)."""

    def __init__(self, url: str, max_tokens: int, timeout_s: float = 900.0) -> None:
        self.max_tokens = max_tokens
        self._client = httpx.Client(base_url=url, timeout=timeout_s)

    def send(self, prompt: DemoPrompt, arm: str, sent_as: str, max_tokens: int | None = None) -> Sample:
        started = time.time()
        try:
            response = self._client.post("/v1/completions", json={
                "prompt": list(prompt.ids), "max_tokens": max_tokens or self.max_tokens, "temperature": 0.0,
                "workload": sent_as, "return_token_ids": True})
        except httpx.HTTPError as exc:
            raise TrafficError(f"engine: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise TrafficError(f"engine answered HTTP {response.status_code}: {response.text[:300]}")
        return _sample(prompt, arm, sent_as, started, time.time() - started, response.json())

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TrafficClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sample(prompt: DemoPrompt, arm: str, sent_as: str, started: float, wall_s: float, body: dict[str, Any]) -> Sample:
    info = body["spectune"]
    return Sample(workload=prompt.workload, prompt_id=prompt.id, arm=arm, sent_as=sent_as, started=started,
                  output_ids=tuple(body["choices"][0]["token_ids"]), finish_reason=info["finish_reason"],
                  prefill_s=info["prefill_s"], decode_s=info["draft_s"] + info["verify_s"], wall_s=wall_s,
                  drafts=info["drafts"], draft_tokens=info["draft_tokens"], accepted_tokens=info["accepted_tokens"],
                  accepted_per_position=tuple(info["accepted_per_position"]))


def concurrent_traffic(client: TrafficClient, prompts: dict[str, list[DemoPrompt]], seconds: float,
                       progress: bool = True) -> list[Sample]:
    """One sender per workload, all at once: each sends every one of its prompts once, then cycles through them
    again until ``seconds`` have passed; requests in flight then finish."""
    samples: list[Sample] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def sender(mine: list[DemoPrompt]) -> None:
        sent = 0
        try:
            while not stop.is_set() and (sent < len(mine) or time.monotonic() < deadline):
                sample = client.send(mine[sent % len(mine)], "controller", mine[0].workload)
                sent += 1
                with lock:
                    samples.append(sample)
        except BaseException as exc:  # reported by the caller's thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=sender, args=(mine,), daemon=True, name=f"traffic-{name}")
               for name, mine in prompts.items()]
    for thread in threads:
        thread.start()
    try:
        _tick_until(lambda: not any(t.is_alive() for t in threads), seconds, lambda: len(samples), progress)
    finally:
        stop.set()  # on Ctrl-C the senders end with their current request (or when the engine is stopped)
    if errors:
        raise errors[0]
    return samples


def _tick_until(done: Callable[[], bool], seconds: float, count: Callable[[], int], progress: bool) -> None:
    """A bar over the phase's seconds (then over the requests still finishing) until ``done()``."""
    start = time.monotonic()
    with tqdm(total=round(seconds), desc="controller phase", unit="s", disable=not progress, file=sys.stderr,
              bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total} s{postfix}") as bar:
        while not done():
            elapsed = min(round(time.monotonic() - start), bar.total)
            bar.update(elapsed - bar.n)
            bar.set_postfix_str(f"{count()} requests" + (", finishing" if elapsed >= bar.total else ""))
            time.sleep(0.5)
        bar.update(bar.total - bar.n)
        bar.set_postfix_str(f"{count()} requests")


def interleaved(client: TrafficClient, prompts: dict[str, list[DemoPrompt]], rounds: int,
                off_name: Callable[[str], str], progress: bool = True) -> list[Sample]:
    """Every prompt once off (sent as ``off_name(workload)``) and once tuned (as its workload), one request at a time,
    alternating which goes first, ``rounds`` times."""
    plan = []
    for r in range(rounds):
        for workload, mine in prompts.items():
            for i, prompt in enumerate(mine):
                pair = [("off", off_name(workload)), ("tuned", workload)]
                plan += [(prompt, arm, name) for arm, name in (pair if (i + r) % 2 == 0 else pair[::-1])]
    samples = []
    for prompt, arm, name in tqdm(plan, desc="measure off vs tuned", unit="req", disable=not progress,
                                  file=sys.stderr):
        samples.append(client.send(prompt, arm, name))
    return samples
