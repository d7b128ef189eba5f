"""Walk a verified draft tree: which draft nodes the target accepts, and the bonus token after them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.sampling import SamplingParams, judge, sample, to_probs
from engine.tree import DraftTree


@dataclass
class Acceptance:
    path: list[int]  # accepted draft nodes, root's child first
    bonus: int  # the target's own token after the last accepted node


def accept_greedy(tree: DraftTree, target_argmax: list[int]) -> Acceptance:
    """``target_argmax[0]`` is the target's choice after the root, ``target_argmax[1 + i]`` after draft node i."""
    kids = tree.children()
    node, path = -1, []
    while True:
        choice = target_argmax[node + 1]
        nxt = next((c for c in kids[node] if tree.tokens[c] == choice), None)
        if nxt is None:
            return Acceptance(path, choice)
        path.append(nxt)
        node = nxt


def accept_sampled(tree: DraftTree, target_logits: torch.Tensor, params: SamplingParams,
                   generator: torch.Generator | None) -> Acceptance:
    """Rejection sampling down the tree; ``target_logits`` is ``[1 + nodes, vocab]`` (row 0 = after the root)."""
    kids = tree.children()
    node, path = -1, []
    p = to_probs(target_logits[0], params)
    while True:
        for child in kids[node]:
            q = tree.probs[child] if tree.probs is not None else None
            verdict = judge(p, tree.tokens[child], q, generator)
            if verdict.accepted:
                path.append(child)
                node = child
                p = to_probs(target_logits[child + 1], params)
                break
            p = verdict.residual
        else:
            return Acceptance(path, sample(p, generator))
