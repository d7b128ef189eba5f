"""The batched tree cache computes the same logits as transformers' own full forward (fp32, within 1e-4), through
transformers' decoder and through the fused one (``engine.models.fused``, here with float projections)."""

from __future__ import annotations

import pytest
import torch

from engine.kv import BatchKV, Nodes
from engine.models.fused import FusedDecoder, fuse_projections
from engine.models.loaded import LoadedModel
from tests.engine.tiny import tiny_model


@pytest.fixture(scope="module", params=["qwen2", "llama", "qwen2 fused", "llama fused"])
def model(request) -> LoadedModel:
    arch, _, fused = request.param.partition(" ")
    loaded = tiny_model(5, arch=arch, dtype=torch.float32, layers=3)
    if fused:
        loaded.fast_decoder = FusedDecoder(loaded.model, fuse_projections(loaded.model))
    return loaded


def full_logits(model: LoadedModel, ids: list[int]) -> torch.Tensor:
    return model.model(torch.tensor([ids])).logits[0]


def test_ragged_prefill_and_chain_match_full_forward(model):
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    kv = BatchKV(model.model, len(prompts), model.decoder)
    hidden = kv.forward(Nodes.chains(prompts, 0, kv.device))
    logits = kv.logits(hidden)
    for b, p in enumerate(prompts):
        assert torch.allclose(logits[b, : len(p)], full_logits(model, p), atol=1e-4)
    kv.commit([list(range(len(p))) for p in prompts])
    nxt = [[20, 21], [22], [23, 24]]
    logits = kv.logits(kv.forward(Nodes.chains(nxt, 0, kv.device)))
    for b, (p, n) in enumerate(zip(prompts, nxt)):
        assert torch.allclose(logits[b, : len(n)], full_logits(model, p + n)[len(p):], atol=1e-4)


def test_tree_nodes_match_their_root_to_node_chains(model):
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    kv = BatchKV(model.model, 1, model.decoder)
    kv.forward(Nodes.chains([prompt], 0, kv.device))
    kv.commit([list(range(len(prompt)))])
    tokens, parents = [30, 31, 32, 33, 34, 35], [-1, 0, 0, 1, 1, 3]
    logits = kv.logits(kv.forward(Nodes.trees([(tokens, parents)], kv.device)))[0]
    for node in range(len(tokens)):
        path, n = [], node
        while n >= 0:
            path.append(tokens[n])
            n = parents[n]
        assert torch.allclose(logits[node], full_logits(model, prompt + path[::-1])[-1], atol=1e-4)


def test_commit_keeps_only_the_accepted_path(model):
    prompt = [7, 7, 8, 9]
    kv = BatchKV(model.model, 1, model.decoder)
    kv.forward(Nodes.chains([prompt], 0, kv.device))
    kv.commit([list(range(len(prompt)))])
    tokens, parents = [40, 41, 42, 43], [-1, -1, 1, 2]  # two branches; keep 41 -> 42
    kv.forward(Nodes.trees([(tokens, parents)], kv.device))
    kv.commit([[1, 2]])
    assert kv.committed_slots == len(prompt) + 2
    logits = kv.logits(kv.forward(Nodes.chains([[50]], 0, kv.device)))[0, 0]
    assert torch.allclose(logits, full_logits(model, prompt + [41, 42, 50])[-1], atol=1e-4)


def test_select_and_extend_keep_rows_intact(model):
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10]]
    kv = BatchKV(model.model, 0, model.decoder)
    kv.prefill(prompts)
    kv.select([2, 0])  # drop the long row: padding it needed is trimmed
    assert kv.committed_slots == 3
    logits = kv.logits(kv.forward(Nodes.chains([[11], [12]], 0, kv.device)))
    assert torch.allclose(logits[0, 0], full_logits(model, [10, 11])[-1], atol=1e-4)
    assert torch.allclose(logits[1, 0], full_logits(model, [1, 2, 3, 12])[-1], atol=1e-4)


def test_uneven_acceptance_leaves_bounded_gaps_and_right_logits(model):
    # row 0 accepts 3 of 3 pending tokens every step, row 1 none: row 1 gets gaps until a repack closes them
    kv = BatchKV(model.model, 0, model.decoder)
    kv.prefill([[1, 2, 3], [4, 5]])
    seqs = [[1, 2, 3], [4, 5]]
    repacked = False
    for step in range(30):
        new = [[10 + step % 7, 20 + step % 5, 30 + step % 3], [40 + step % 4]]
        kv.forward(Nodes.chains(new, 0, kv.device))
        kv.commit([[0, 1, 2], [0]])
        seqs[0] += new[0]
        seqs[1] += new[1]
        longest = int(kv.lengths.max())
        assert kv.committed_slots - longest <= max(32, longest // 8) + 3
        repacked |= kv.committed_slots == longest
    assert repacked and kv.lengths.tolist() == [len(s) for s in seqs]
    logits = kv.logits(kv.forward(Nodes.chains([[60], [61]], 0, kv.device)))
    assert torch.allclose(logits[0, 0], full_logits(model, seqs[0] + [60])[-1], atol=1e-4)
    assert torch.allclose(logits[1, 0], full_logits(model, seqs[1] + [61])[-1], atol=1e-4)


def test_a_row_fed_alone_joins_the_batch_with_the_right_logits(model):
    kv = BatchKV(model.model, 0, model.decoder)
    kv.prefill([[1, 2, 3], [4, 5, 6, 7, 8], [9]])
    behind = {0: list(range(20, 45)), 2: [50, 51]}  # row 1 is fed nothing
    kv.feed_alone(behind)
    assert kv.lengths.tolist() == [28, 5, 3]
    logits = kv.logits(kv.forward(Nodes.chains([[60], [61, 62], [63]], 0, kv.device)))
    assert torch.allclose(logits[0, 0], full_logits(model, [1, 2, 3] + behind[0] + [60])[-1], atol=1e-4)
    assert torch.allclose(logits[1, :2], full_logits(model, [4, 5, 6, 7, 8, 61, 62])[-2:], atol=1e-4)
    assert torch.allclose(logits[2, 0], full_logits(model, [9, 50, 51, 63])[-1], atol=1e-4)
