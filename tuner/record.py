"""Record traces: the target's greedy output for each prompt, plus the draft model's teacher-forced view of every
output position (see ``tuner.traces`` for the format).

Two passes per batch of requests:

1. the engine generates the target's greedy output (n-gram speculation makes it faster and, greedy verification
   being lossless, does not change the text);
2. one teacher-forced draft forward over ``prompt + output`` per request (batched, right-padded): along the true path
   the draft's context at output position j *is* the true prefix, so its logits there give the rank of the true
   token (how many tokens the draft scores strictly higher; what decides which chain depths and tree branches hit)
   and its confidence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from engine.config import SpecConfig
from engine.engine import Request, SpecEngine
from engine.models import model_identity
from engine.models.loaded import LoadedModel
from engine.prompts import encode_chat, encode_text
from engine.sampling import SamplingParams
from tuner.traces import TRACE_VERSION, Trace
from tuner.workloads import PromptRecord

# what the recorder generates with: speculation only for speed (greedy output is the same whatever the config)
GENERATION_CONFIG = SpecConfig(method="ngram", k=8)


@dataclass(frozen=True)
class DraftView:
    """The draft's teacher-forced view of one output: per position, the true token's rank (capped), the draft's top
    probability and its probability of the true token."""

    rank: tuple[int, ...]
    top_prob: tuple[float, ...]
    true_prob: tuple[float, ...]


def encode_prompt(loaded: LoadedModel, record: PromptRecord) -> list[int]:
    """Token ids of one prompt record: raw text as is, messages through the chat template."""
    if record.messages is not None:
        return encode_chat(loaded.tokenizer, [m.model_dump() for m in record.messages])
    return encode_text(loaded.tokenizer, record.prompt or "")


def generate_greedy(target: LoadedModel, prompts: Sequence[list[int]], max_new_tokens: int, max_batch: int,
                    on_done: Callable[[], None] | None = None) -> list[list[int]]:
    """The engine's greedy output for each prompt, ``max_batch`` requests at a time (continuous batching)."""
    engine = SpecEngine(target, policy=None, max_batch=max_batch)
    params = SamplingParams(max_new_tokens=max_new_tokens)
    for i, prompt in enumerate(prompts):
        engine.add(Request(str(i), list(prompt), params, GENERATION_CONFIG))
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while engine.has_work():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
            if out.finished and on_done is not None:
                on_done()
    return [outputs[str(i)] for i in range(len(prompts))]


def draft_views(draft: LoadedModel, pairs: Sequence[tuple[list[int], list[int]]], rank_cap: int) -> list[DraftView]:
    """One batched teacher-forced draft forward over ``prompt + output`` for each ``(prompt, output)`` pair."""
    seqs = [prompt + output for prompt, output in pairs]
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, seq in enumerate(seqs):  # right padding keeps every real token's position at its index
        ids[b, : len(seq)] = torch.tensor(seq)
        mask[b, : len(seq)] = 1
    device = draft.device
    hidden = draft.model.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
    views = []
    for b, (prompt, output) in enumerate(pairs):
        start = len(prompt) - 1  # the hidden state after prompt + output[:j] predicts output[j]
        # the engine's draft ranks float logits of the model's own-dtype lm head; so do we
        logits = draft.model.get_output_embeddings()(hidden[b, start: start + len(output)]).float()  # [n, vocab]
        true_ids = torch.tensor(output, device=device)[:, None]
        true_logit = logits.gather(1, true_ids)
        rank = (logits > true_logit).sum(1).clamp(max=rank_cap)
        probs = torch.softmax(logits, -1)
        views.append(DraftView(rank=tuple(int(r) for r in rank.tolist()),
                               top_prob=tuple(min(float(p), 1.0) for p in probs.max(1).values.tolist()),
                               true_prob=tuple(min(float(p), 1.0) for p in probs.gather(1, true_ids)[:, 0].tolist())))
    return views


def make_traces(target: LoadedModel, draft: LoadedModel | None, workload: str, request_ids: Sequence[str],
                prompts: Sequence[list[int]], outputs: Sequence[list[int]], max_new_tokens: int, rank_cap: int,
                views: Sequence[DraftView] | None) -> list[Trace]:
    """Assemble validated traces from recorded outputs (and draft views when a draft was used)."""
    traces = []
    for i, (rid, prompt, output) in enumerate(zip(request_ids, prompts, outputs, strict=True)):
        view = views[i] if views is not None else None
        traces.append(Trace(
            version=TRACE_VERSION, workload=workload, request_id=rid, prompt_ids=tuple(prompt),
            output_ids=tuple(output), max_new_tokens=max_new_tokens, eos_token_ids=tuple(sorted(target.eos_token_ids)),
            target=model_identity(target), draft=model_identity(draft) if draft is not None else None,
            dtype=target.precision, rank_cap=rank_cap, draft_rank=view.rank if view else None,
            draft_top_prob=view.top_prob if view else None, draft_true_prob=view.true_prob if view else None))
    return traces


def record(target: LoadedModel, draft: LoadedModel | None, workload: str, request_ids: Sequence[str],
           prompts: Sequence[list[int]], max_new_tokens: int, rank_cap: int = 16, max_batch: int = 4,
           progress: bool = False) -> list[Trace]:
    """Generate and record one workload's traces; ``draft`` None records n-gram-only traces."""
    from tqdm import tqdm

    total = len(prompts) * (2 if draft is not None else 1)
    with tqdm(total=total, desc=f"record {workload}", unit="req", disable=not progress) as bar:
        outputs = generate_greedy(target, prompts, max_new_tokens, max_batch, on_done=lambda: bar.update(1))
        views = None
        if draft is not None:
            views = []
            for start in range(0, len(prompts), max_batch):
                chunk = list(zip(prompts, outputs))[start: start + max_batch]
                with torch.no_grad():
                    views += draft_views(draft, chunk, rank_cap)
                bar.update(len(chunk))
    return make_traces(target, draft, workload, request_ids, prompts, outputs, max_new_tokens, rank_cap, views)
