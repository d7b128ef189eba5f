"""Load on the engine server: N concurrent streaming clients over loopback for a bounded time, speculation off vs on,
at concurrency 1, 2, 4, 8; cells interleaved and repeated. Prints aggregate tokens/s, p50/p99 request latency and
time to first token, and checks every greedy output against the same prompt served alone with speculation off.

    .venv/bin/python benchmarks/serve_load.py --quick   # smollm2-135m bf16, n-gram speculation (k=4)
    .venv/bin/python benchmarks/serve_load.py           # qwen2.5-coder-1.5b bf16 + qwen2.5-coder-0.5b draft (k=4)

The server is started as a real ``spectune engine serve`` subprocess (or ``--url`` points at a running one); off and
on are the same server with the benchmark workload's config switched through ``PUT /admin/spec-config``. Every request
asks for exactly ``--max-tokens`` tokens (``ignore_eos``), so off and on do the same work. A cell's clients keep
sending until ``--duration`` has passed; requests already sent finish, and tokens/s = their tokens / (last finish -
start). Writes benchmarks/results/serve_load[_quick].{md,json}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import Spread, interleaved  # noqa: E402
from benchmarks.prompts import EDIT_REQUEST, HUMANEVAL_MAIN, PROSE_QUESTION, humaneval_text  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOAD = "serve-load"


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    path: str  # /v1/completions (raw text) or /v1/chat/completions
    body: dict[str, Any]


def bench_prompts() -> list[BenchPrompt]:
    """A HumanEval completion, a copy-heavy code edit and a prose question, as the other benchmarks use them."""
    chat = {"edit": EDIT_REQUEST, "prose": PROSE_QUESTION}
    prompts = [BenchPrompt("humaneval", "/v1/completions", {"prompt": humaneval_text(HUMANEVAL_MAIN)})]
    prompts += [BenchPrompt(name, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]})
                for name, text in chat.items()]
    return prompts


@dataclass
class Sample:
    prompt: str
    start: float
    end: float
    ttft_s: float
    tokens: int
    drafts: int
    accepted: int
    token_ids: list[int]

    @property
    def latency_s(self) -> float:
        return self.end - self.start


@dataclass
class Cell:
    concurrency: int
    mode: str  # "off" | "on"
    rep: int
    requests: int
    tokens_per_s: float
    latencies: list[float]
    ttfts: list[float]
    drafts: int
    accepted: int
    mismatches: int  # greedy outputs that differ from the prompt served alone with speculation off (bf16 near-ties)


async def one_request(client: httpx.AsyncClient, prompt: BenchPrompt, max_tokens: int) -> Sample:
    body = prompt.body | {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                          "return_token_ids": True, "workload": WORKLOAD}
    start = time.perf_counter()
    ttft = None
    ids: list[int] = []
    final: dict[str, Any] | None = None
    async with client.stream("POST", prompt.path, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{prompt.name}: HTTP {response.status_code}: {(await response.aread()).decode()}")
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if "error" in chunk:
                raise RuntimeError(f"{prompt.name}: {chunk['error']['message']}")
            new = chunk["choices"][0].get("token_ids", [])
            if new and ttft is None:
                ttft = time.perf_counter() - start
            ids += new
            if chunk["choices"][0]["finish_reason"] is not None:
                final = chunk
    end = time.perf_counter()
    if final is None:
        raise RuntimeError(f"{prompt.name}: the stream ended without a final chunk")
    stats = final["spectune"]
    return Sample(prompt.name, start, end, ttft if ttft is not None else end - start,
                  final["usage"]["completion_tokens"], stats["drafts"], stats["accepted_tokens"], ids)


async def reference_outputs(url: str, prompts: list[BenchPrompt], max_tokens: int) -> dict[str, list[int]]:
    """Each prompt alone with speculation off (this also warms the server up)."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0)) as client:
        return {p.name: (await one_request(client, p, max_tokens)).token_ids for p in prompts}


async def run_cell(url: str, prompts: list[BenchPrompt], concurrency: int, duration_s: float,
                   max_tokens: int) -> list[Sample]:
    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600.0), limits=limits) as client:
        deadline = time.perf_counter() + duration_s

        async def loop(offset: int) -> None:
            i = offset
            while time.perf_counter() < deadline:
                samples.append(await one_request(client, prompts[i % len(prompts)], max_tokens))
                i += 1

        await asyncio.gather(*(loop(c) for c in range(concurrency)))
    return samples


def set_config(url: str, token: str | None, config: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.put(f"{url}/admin/spec-config", json={"workload": WORKLOAD, "config": config}, headers=headers,
                         timeout=30)
    response.raise_for_status()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args: argparse.Namespace, token: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    spectune = Path(sys.executable).with_name("spectune")
    cmd = [str(spectune), "engine", "serve", "--target", args.target, "--dtype", args.dtype, "--port", str(port),
           "--max-batch", str(args.max_batch), "--log-level", "warning"]
    if args.draft:
        cmd += ["--draft", args.draft]
    env = os.environ | {"SPECTUNE_ADMIN_TOKEN": token, "OMP_NUM_THREADS": str(args.threads)}
    log = open(RESULTS / "serve_load_server.log", "w")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited with {proc.returncode}; see {log.name}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("error: the server did not become healthy within 15 minutes")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarize(cells: list[Cell], concurrencies: list[int]) -> list[dict[str, Any]]:
    rows = []
    for c in concurrencies:
        tps = {}
        for mode in ("off", "on"):
            mine = [cell for cell in cells if cell.concurrency == c and cell.mode == mode]
            latencies = [x for cell in mine for x in cell.latencies]
            drafts, accepted = sum(cell.drafts for cell in mine), sum(cell.accepted for cell in mine)
            tps[mode] = Spread.of([cell.tokens_per_s for cell in mine])
            rows.append({"concurrency": c, "mode": mode, "requests": sum(cell.requests for cell in mine),
                         "tokens_per_s": tps[mode], "p50_latency_s": percentile(latencies, 0.5),
                         "p99_latency_s": percentile(latencies, 0.99),
                         "ttft_s": Spread.of([statistics.median(cell.ttfts) for cell in mine]),
                         "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
                         "mismatches": sum(cell.mismatches for cell in mine)})
        rows[-1]["speedup"] = tps["on"].median / tps["off"].median if tps["off"].median else None
    return rows


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "",
             "| concurrency | speculation | requests | tokens/s | p50 latency s | p99 latency s | TTFT s | "
             "mean acc. len | speedup | outputs != alone |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mal = f"{r['mean_acceptance_length']:.2f}" if r["mean_acceptance_length"] else "-"
        speedup = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        lines.append(f"| {r['concurrency']} | {r['mode']} | {r['requests']} | {r['tokens_per_s'].fmt(1)} | "
                     f"{r['p50_latency_s']:.2f} | {r['p99_latency_s']:.2f} | {r['ttft_s'].fmt(3)} | {mal} | "
                     f"{speedup} | {r['mismatches']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smollm2-135m with n-gram speculation, short cells")
    parser.add_argument("--target", default=None)
    parser.add_argument("--draft", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--spec", default=None, help="the 'on' SpecConfig as JSON")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--duration", type=float, default=None, help="seconds each cell keeps sending")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")),
                        help="the server's torch threads (OMP_NUM_THREADS)")
    parser.add_argument("--url", default=None, help="use this running server (its admin token: SPECTUNE_ADMIN_TOKEN)")
    args = parser.parse_args()
    quick = args.quick
    args.target = args.target or ("smollm2-135m" if quick else "qwen2.5-coder-1.5b")
    args.draft = args.draft or (None if quick else "qwen2.5-coder-0.5b")
    on = json.loads(args.spec) if args.spec else ({"method": "draft", "k": 4} if args.draft else
                                                  {"method": "ngram", "k": 4, "min_n": 1, "max_n": 4})
    duration = args.duration or (15.0 if quick else 60.0)
    repeats = args.repeats or (2 if quick else 1)
    max_tokens = args.max_tokens or (32 if quick else 48)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    RESULTS.mkdir(exist_ok=True)

    load_start = os.getloadavg()
    wall_start = time.perf_counter()
    proc = None
    if args.url:
        url, token = args.url.rstrip("/"), os.environ.get("SPECTUNE_ADMIN_TOKEN")
    else:
        token = secrets.token_hex(16)
        proc, url = start_server(args, token)
    try:
        prompts = bench_prompts()
        set_config(url, token, {"method": "off"})
        reference = asyncio.run(reference_outputs(url, prompts, max_tokens))
        cells = []
        grid = [(c, mode) for c in concurrencies for mode in ("off", "on")]
        for rep, (c, mode) in interleaved(grid, repeats):
            set_config(url, token, on if mode == "on" else {"method": "off"})
            samples = asyncio.run(run_cell(url, prompts, c, duration, max_tokens))
            start, end = min(s.start for s in samples), max(s.end for s in samples)
            cell = Cell(c, mode, rep, len(samples), sum(s.tokens for s in samples) / (end - start),
                        [s.latency_s for s in samples], [s.ttft_s for s in samples], sum(s.drafts for s in samples),
                        sum(s.accepted for s in samples),
                        sum(s.token_ids != reference[s.prompt] for s in samples))
            cells.append(cell)
            print(f"rep {rep} concurrency {c} {mode:>3}: {cell.requests} requests, {cell.tokens_per_s:.1f} tok/s, "
                  f"p50 latency {percentile(cell.latencies, 0.5):.2f}s", flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)

    rows = summarize(cells, concurrencies)
    load_end = os.getloadavg()
    draft = f" + draft `{args.draft}`" if args.draft else ""
    loads = [" / ".join(f"{x:.1f}" for x in load) for load in (load_start, load_end)]
    header = (f"`{' '.join(sys.argv)}`: `{args.target}`{draft} {args.dtype}, {args.threads} server thread(s), on = "
              f"`{json.dumps(on)}`, {max_tokens} tokens per request (ignore_eos), max batch {args.max_batch}, "
              f"{duration:.0f} s per cell, {repeats} interleaved repeat(s); tokens/s and TTFT: median (min-max) over "
              f"repeats; latencies pooled. Load average (1/5/15 min) at start {loads[0]}, at end {loads[1]}; wall "
              f"{time.perf_counter() - wall_start:.0f} s.")
    table = markdown(rows, header)
    print()
    print(table)
    name = "serve_load_quick" if quick else "serve_load"
    (RESULTS / f"{name}.md").write_text(table + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(
        {"args": vars(args), "on": on, "cells": [asdict(c) for c in cells],
         "rows": [r | {"tokens_per_s": asdict(r["tokens_per_s"]), "ttft_s": asdict(r["ttft_s"])} for r in rows]},
        indent=2) + "\n")


if __name__ == "__main__":
    main()
