"""Would a pruned draft vocabulary pay? The int8 draft's LM head cost at several vocabulary sizes against its
one-token decoder forward, and the share of the target's recorded output tokens a vocabulary of the first N token ids
(byte-level BPE ids run roughly from frequent to rare) could not propose.

A pruned draft head (logits only for kept ids) stays lossless under verification, but a target token outside the kept
ids is a forced miss at that position. The saving is the head's share of a draft forward; the loss is that share of
positions cutting a chain short.

    .venv/bin/python benchmarks/draft_vocab.py [--draft qwen2.5-coder-0.5b] [--traces benchmarks/results/traces]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/policies.py would shadow the ``policies`` package

import torch  # noqa: E402

from engine.models.loading import load_model  # noqa: E402
from tuner.traces import load_traces  # noqa: E402

SIZES = (16384, 32768, 65536)
CONTEXT = 200


def ms_per_call(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    started = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - started) / reps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", default="qwen2.5-coder-0.5b")
    parser.add_argument("--traces", type=Path, default=Path(__file__).resolve().parent / "results" / "traces")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    warnings.simplefilter("ignore")  # torch.ao's notice that eager quantization moves to torchao

    traces = sorted(args.traces.rglob("*.jsonl"))
    print("| traces | output tokens | " + " | ".join(f"ids >= {n}" for n in SIZES) + " |")
    print("|---|---|" + "---|" * len(SIZES))
    special = None
    for path in traces:
        loaded = load_traces(path)
        special = special or min(min(t.eos_token_ids, default=1 << 30) for t in loaded)
        tokens = [t for trace in loaded for t in trace.output_ids if t < special]  # special tokens are always kept
        shares = [sum(t >= n for t in tokens) / len(tokens) for n in SIZES]
        print(f"| {path.relative_to(args.traces)} | {len(tokens)} | " + " | ".join(f"{s:.1%}" for s in shares) + " |")

    fp32 = load_model(args.draft, dtype="float32", progress=False)
    head = fp32.model.get_output_embeddings()
    heads = {}
    for n in (head.out_features, *SIZES):
        linear = torch.nn.Linear(head.in_features, n, bias=False)
        linear.weight.data = head.weight.data[:n].clone()
        heads[n] = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear},
                                                          dtype=torch.qint8)
    del fp32
    draft = load_model(args.draft, dtype="int8", progress=False)
    decoder = draft.model.get_decoder()
    cache = decoder(input_ids=torch.randint(0, 30000, (1, CONTEXT)), use_cache=True).past_key_values
    token = torch.randint(0, 30000, (1, 1))

    def one_token() -> None:
        decoder(input_ids=token, past_key_values=cache, use_cache=True)
        cache.crop(-1)

    forward_ms = ms_per_call(one_token, args.reps)
    hidden = torch.randn(1, head.in_features)
    print(f"\nint8 draft, one token at a {CONTEXT}-token context, {args.threads} threads: decoder {forward_ms:.1f} ms")
    print("| head vocabulary | head ms | share of decoder + head |")
    print("|---|---|---|")
    for n, module in heads.items():
        ms = ms_per_call(lambda module=module: module(hidden), args.reps)
        print(f"| {n} | {ms:.2f} | {ms / (forward_ms + ms):.1%} |")


if __name__ == "__main__":
    main()
