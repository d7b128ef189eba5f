"""A real engine server in a subprocess on a free loopback port, and a tiny random model with a tokenizer for it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

from tests.engine.tiny import tiny_model

VOCAB = 96
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE without merges over printable ASCII: one token per character (``Ġ`` is the space), so the
    random model's output is character soup that still exercises real incremental detokenization."""
    chars = ["Ġ"] + [chr(c) for c in range(33, 127) if chr(c) != "`"]
    vocab = {token: i for i, token in enumerate(["<pad>", *chars, "</s>"])}
    assert len(vocab) == VOCAB
    backend = Tokenizer(BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tiny_server_model(directory: Path, seed: int = 0) -> Path:
    """A tiny random Qwen2 in float32 with ``tiny_tokenizer()``, saved so the server can load it by path. (transformers
    picks the tokenizer class from the model type, so the tokenizer must be one Qwen2Tokenizer rebuilds faithfully.)"""
    tiny_model(seed, vocab=VOCAB, dtype=torch.float32).model.save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``spectune engine serve ...`` in a subprocess; ``url`` once healthy. Logs go to ``log_path``. Tiny models
    want ``OMP_NUM_THREADS=1`` in ``env`` (thread hand-offs dominate their steps)."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None,
                 startup_timeout_s: float = 180.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        spectune = Path(sys.executable).with_name("spectune")
        full_env = os.environ | (env or {})
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([str(spectune), "engine", "serve", *args, "--port", str(self.port),
                                      "--log-level", "warning"], stdout=self._log, stderr=subprocess.STDOUT,
                                     env=full_env)
        self._wait_healthy(startup_timeout_s)

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout_s}s:\n{self.logs()}")

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def sse_events(lines: Iterable[str]) -> Iterator[dict | str]:
    """The ``data:`` payloads of a server-sent-event stream as they arrive: JSON objects, and ``"[DONE]"``."""
    for line in lines:
        if line.startswith("data: "):
            payload = line.removeprefix("data: ")
            yield payload if payload == "[DONE]" else json.loads(payload)
