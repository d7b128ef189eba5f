"""The engine server on the real SmolLM2-135M: concurrent chat requests under different speculation configs each get
exactly what ``spectune generate`` gives for that prompt alone."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.engine.server_harness import ServerProcess, sse_events

pytestmark = pytest.mark.model

MODEL = "smollm2-135m"
PROMPTS = ["Write a Python function that reverses a string.", "What is the capital of France?",
           "List three colours.", "Explain recursion in one sentence."]
MAX_TOKENS = 24


def generate_alone(prompt: str) -> list[int]:
    spectune = Path(sys.executable).with_name("spectune")
    out = subprocess.run([str(spectune), "generate", "--target", MODEL, "--prompt", prompt, "--chat",
                          "--max-new-tokens", str(MAX_TOKENS), "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["token_ids"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(["--target", MODEL, "--max-batch", "4"], tmp_path_factory.mktemp("smollm") / "server.log",
                         {"OMP_NUM_THREADS": "2"})
    yield proc
    proc.stop()


def test_concurrent_chat_requests_match_spectune_generate(server):
    with ThreadPoolExecutor(1) as background:
        expected_future = background.submit(lambda: [generate_alone(p) for p in PROMPTS])
        with httpx.Client(base_url=server.url, timeout=300) as client:
            config = {"method": "ngram", "k": 4, "max_n": 3}
            assert client.put("/admin/spec-config", json={"workload": "code", "config": config}).status_code == 200

            def chat(i: int) -> dict:
                body = {"messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": MAX_TOKENS,
                        "temperature": 0, "return_token_ids": True, "workload": "code" if i % 2 else "default"}
                response = client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text
                return response.json()

            with ThreadPoolExecutor(len(PROMPTS)) as pool:
                bodies = list(pool.map(chat, range(len(PROMPTS))))
            body = {"messages": [{"role": "user", "content": PROMPTS[0]}], "max_tokens": MAX_TOKENS,
                    "temperature": 0, "stream": True}
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                events = list(sse_events(response.iter_lines()))
    expected = expected_future.result()
    for i, body in enumerate(bodies):
        assert body["choices"][0]["token_ids"] == expected[i], PROMPTS[i]
        assert body["choices"][0]["message"]["content"].strip()
    assert any(b["spectune"]["drafts"] > 0 for b in bodies[1::2])
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert streamed == bodies[0]["choices"][0]["message"]["content"] and events[-1] == "[DONE]"
