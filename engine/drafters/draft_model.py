"""The draft-model drafter: a small LM with its own batched KV cache, kept in step with the target's accepted tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.drafters.base import Drafter, DraftInput
from engine.drafters.catch_up import catches_up_alone
from engine.kv import BatchKV, Nodes
from engine.sampling import sample, to_probs
from engine.tree import DraftTree


@dataclass
class _RowDraft:
    """Drafting state of one row during one step."""

    job: DraftInput
    tree: DraftTree = field(default_factory=DraftTree)
    catch_up: int = 0  # pending columns holding already-emitted tokens
    column: dict[int, int] = field(default_factory=dict)  # tree node -> pending column, for nodes fed to the draft
    score: dict[int, float] = field(default_factory=dict)  # tree node -> log prob of its path (dynamic trees)
    frontier: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # (node, logits after it); node -1 = root


class DraftModelDrafter(Drafter):
    """Rows join with an empty draft cache: a row's first draft pass feeds it the prompt and whatever was emitted
    since, like any other catch-up, so a request that never drafts never pays for the draft model's prefill."""

    method = "draft"

    def __init__(self, model, decoder=None) -> None:
        self.kv = BatchKV(model, decoder=decoder)
        self._rows: dict[int, _RowDraft] = {}

    def admit(self, prompts: list[list[int]]) -> None:
        self.kv.add_empty_rows(len(prompts))

    def retain(self, rows: list[int]) -> None:
        self.kv.select(rows)

    def propose(self, inputs: list[DraftInput]) -> list[DraftTree]:
        states = {job.row: _RowDraft(job) for job in inputs}
        self._rows = states
        lengths = self.kv.lengths.tolist()
        behind = {b: st.job.tokens[lengths[b]:-1] for b, st in states.items()
                  if catches_up_alone(self.kv.batch_size, len(st.job.tokens) - lengths[b])}
        if behind:
            self.kv.feed_alone(behind)
            lengths = self.kv.lengths.tolist()
        catch_up = [states[b].job.tokens[lengths[b]:] if b in states else [] for b in range(self.kv.batch_size)]
        hidden = self.kv.forward(Nodes.chains(catch_up, 0, self.kv.device))
        last = [(b, len(catch_up[b]) - 1) for b in states]
        logits = self._logits(hidden, last)
        for (b, col), row_logits in zip(last, logits):
            states[b].catch_up = col + 1
            states[b].frontier = [(-1, row_logits)]
        max_depth = max(job.depth for job in inputs)
        for depth in range(1, max_depth + 1):
            to_feed: dict[int, list[int]] = {}
            for b, st in states.items():
                if depth <= st.job.depth:
                    to_feed[b] = self._expand(st, depth)
            if depth == max_depth or not any(to_feed.values()):
                break
            offset = self.kv.pending_width
            rows = []
            for b in range(self.kv.batch_size):
                nodes = [n for n in to_feed.get(b, []) if depth < states[b].job.depth]
                parents = [self._parent_column(states[b], n) for n in nodes]
                rows.append(([states[b].tree.tokens[n] for n in nodes], parents))
                for j, n in enumerate(nodes):
                    states[b].column[n] = offset + j
            hidden = self.kv.forward(Nodes.trees(rows, self.kv.device))
            where = [(b, j) for b, (tokens, _) in enumerate(rows) for j in range(len(tokens))]
            logits = self._logits(hidden, where)
            frontier: dict[int, list[tuple[int, torch.Tensor]]] = {b: [] for b in states}
            for (b, j), node_logits in zip(where, logits):
                frontier[b].append((self._node_at(states[b], offset + j), node_logits))
            for b, st in states.items():
                st.frontier = frontier[b]
        return [self._finish(states[job.row]) for job in inputs]

    def commit(self, accepted: dict[int, list[int]]) -> None:
        keep = []
        for b in range(self.kv.batch_size):
            st = self._rows.get(b)
            if st is None:
                keep.append([])
                continue
            cols = list(range(st.catch_up))
            for node in accepted.get(b, []):
                if node not in st.column:
                    break
                cols.append(st.column[node])
            keep.append(cols)
        self.kv.commit(keep)
        self._rows = {}

    def _logits(self, hidden: torch.Tensor, where: list[tuple[int, int]]) -> torch.Tensor:
        if not where:
            return hidden.new_zeros(0, 0)
        b = torch.tensor([w[0] for w in where], device=hidden.device)
        j = torch.tensor([w[1] for w in where], device=hidden.device)
        return self.kv.logits(hidden[b, j]).float()

    def _parent_column(self, st: _RowDraft, node: int) -> int:
        parent = st.tree.parents[node]
        return st.catch_up - 1 if parent < 0 else st.column[parent]

    @staticmethod
    def _node_at(st: _RowDraft, column: int) -> int:
        return next(n for n, c in st.column.items() if c == column)

    def _expand(self, st: _RowDraft, depth: int) -> list[int]:
        """Add this depth's children of the frontier to the tree; return the nodes to feed next."""
        job, tree = st.job, st.job.config.tree
        if tree.top_k is not None:
            return self._expand_dynamic(st, tree.top_k)
        width = tree.branching_at(depth)
        added = []
        for node, logits in st.frontier:
            if width == 1 and not job.params.greedy and tree.is_chain:
                q = to_probs(logits, job.params)
                added.append(st.tree.add(sample(q, job.generator), node, q))
            else:
                for token in logits.topk(width).indices.tolist():
                    added.append(st.tree.add(token, node))
        return added

    @staticmethod
    def _expand_dynamic(st: _RowDraft, top_k: int) -> list[int]:
        candidates = []
        for node, logits in st.frontier:
            logp = torch.log_softmax(logits, -1)
            top = logp.topk(top_k)
            base = st.score.get(node, 0.0)
            candidates += [(base + float(v), int(t), node) for v, t in zip(top.values, top.indices)]
        added = []
        for score, token, parent in candidates:
            node = st.tree.add(token, parent)
            st.score[node] = score
            added.append(node)
        return sorted(added, key=lambda n: -st.score[n])[:top_k]

    @staticmethod
    def _finish(st: _RowDraft) -> DraftTree:
        """Dynamic trees keep the ``budget`` nodes with the best path probability (an ancestor-closed set)."""
        budget = st.job.config.tree.budget
        if budget is None or len(st.tree) <= budget:
            return st.tree
        depths = st.tree.depths()
        keep = sorted(sorted(range(len(st.tree)), key=lambda n: (-st.score[n], depths[n]))[:budget])
        remap = {old: new for new, old in enumerate(keep)}
        pruned = DraftTree()
        for old in keep:
            parent = st.tree.parents[old]
            pruned.add(st.tree.tokens[old], remap[parent] if parent >= 0 else -1)
        st.column = {remap[n]: c for n, c in st.column.items() if n in remap}
        st.tree = pruned
        return pruned
