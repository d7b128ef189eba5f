"""Batched KV cache with tree-shaped pending tokens and per-row compaction.

Layout per model: one preallocated slab per layer for keys and one for values, ``[batch, kv_heads, capacity,
head_dim]``; the first ``used`` slots are filled and forwards write their new entries in place (no per-forward
concatenation). The first ``committed_slots`` columns hold each row's committed tokens (``committed_valid`` marks real
entries: rows are left-padded, and rows that accepted fewer tokens than their neighbours in a step leave a gap).
Columns after them hold *pending* nodes appended by forwards in the current step (draft tokens, a verified tree), each
attending to its row's committed prefix plus its pending ancestors. ``commit`` moves, per row, the chosen pending path
into the committed region and drops every other pending entry, so a rejected token is never attended; gaps are
repacked away once they exceed a fraction of the width, so memory stays proportional to the accepted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass
class Nodes:
    """Tokens fed to one forward. ``parents`` index the row's pending nodes (existing ones first, then these new ones in
    order); -1 attaches a node directly to the committed prefix. Padding nodes have ``valid`` False."""

    tokens: torch.Tensor  # [batch, q] long
    parents: torch.Tensor  # [batch, q] long
    valid: torch.Tensor  # [batch, q] bool

    @classmethod
    def trees(cls, rows: list[tuple[list[int], list[int]]], device: torch.device) -> Nodes:
        """Build from per-row ``(tokens, parents)``; parents are pending-column indices (-1 = committed prefix)."""
        width = max((len(tokens) for tokens, _ in rows), default=0)
        tokens = torch.zeros(len(rows), width, dtype=torch.long)
        parents = torch.full((len(rows), width), -1, dtype=torch.long)
        valid = torch.zeros(len(rows), width, dtype=torch.bool)
        for b, (row_tokens, row_parents) in enumerate(rows):
            n = len(row_tokens)
            if n:
                tokens[b, :n] = torch.tensor(row_tokens, dtype=torch.long)
                parents[b, :n] = torch.tensor(row_parents, dtype=torch.long)
                valid[b, :n] = True
        return cls(tokens.to(device), parents.to(device), valid.to(device))

    @classmethod
    def chains(cls, rows: list[list[int]], offset: int, device: torch.device) -> Nodes:
        """One chain per row hanging off the committed prefix; ``offset`` = pending columns already in the cache."""
        return cls.trees([(row, [-1] + list(range(offset, offset + len(row) - 1))) if row else ([], [])
                          for row in rows], device)


class BatchKV:
    """The KV cache of one model for the running batch. Not thread-safe; owned by the engine's stepping thread."""

    def __init__(self, model, batch_size: int = 0, decoder=None):
        self.model = model
        # what runs the layers: ``model.get_decoder()`` or a faster equivalent (``LoadedModel.decoder``)
        self.decoder = decoder if decoder is not None else model.get_decoder()
        # a decoder with its own ``head`` (engine.models.packed) computes the logits too
        self.head = getattr(self.decoder, "head", None) or model.get_output_embeddings()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.num_layers = model.config.get_text_config(decoder=True).num_hidden_layers
        self.keys: list[torch.Tensor] | None = None  # slabs [batch, kv_heads, capacity, head_dim]
        self.values: list[torch.Tensor] | None = None
        self.used = 0
        self.committed_valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._reset_pending()

    def _reset_pending(self) -> None:
        b = self.batch_size
        self.pending_valid = torch.zeros(b, 0, dtype=torch.bool, device=self.device)
        self.pending_anc = torch.zeros(b, 0, 0, dtype=torch.bool, device=self.device)  # [b, node, ancestor-or-self]
        self.pending_depth = torch.zeros(b, 0, dtype=torch.long, device=self.device)
        self.used = self.committed_slots

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def pending_width(self) -> int:
        return int(self.pending_valid.shape[1])

    @property
    def committed_slots(self) -> int:
        return int(self.committed_valid.shape[1])

    def filled(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of ``layer``'s filled slots."""
        return self.keys[layer][:, :, : self.used], self.values[layer][:, :, : self.used]

    def forward(self, nodes: Nodes) -> torch.Tensor:
        """Run the model on ``nodes`` as new pending tokens; returns final hidden states ``[batch, q, hidden]``."""
        b, q = nodes.tokens.shape
        p = self.pending_valid.shape[1]
        depth_new = torch.zeros(b, q, dtype=torch.long, device=self.device)
        anc = torch.zeros(b, q, p + q, dtype=torch.bool, device=self.device)
        pend_depth = torch.cat([self.pending_depth, depth_new], 1)
        old_rows = torch.cat([self.pending_anc, torch.zeros(b, p, q, dtype=torch.bool, device=self.device)], 2)
        anc_all = torch.cat([old_rows, anc], 1)  # [b, p+q, p+q]
        rows = torch.arange(b, device=self.device)
        for j in range(q):
            parent = nodes.parents[:, j]
            has_parent = parent >= 0
            safe = parent.clamp(min=0)
            parent_anc = anc_all[rows, safe] & has_parent[:, None]
            parent_anc[:, p + j] = True
            anc_all[:, p + j] = parent_anc
            pend_depth[:, p + j] = torch.where(has_parent, pend_depth[rows, safe] + 1, 0)
        new_anc = anc_all[:, p:]  # [b, q, p+q]
        valid = nodes.valid
        prefix = self.committed_valid[:, None, :].expand(b, q, -1) & valid[:, :, None]
        allowed = torch.cat([prefix, new_anc], 2)  # padding nodes hang off nothing: they attend to themselves only
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)
        positions = self.lengths[:, None] + pend_depth[:, p:]
        cache = DynamicCache()
        cache.layers = [_SlabLayer(self, layer) for layer in range(self.num_layers)]
        out = self.decoder(input_ids=nodes.tokens, attention_mask=mask[:, None], position_ids=positions,
                                       cache=cache, use_cache=True)
        self.used += q
        self.pending_valid = torch.cat([self.pending_valid, valid], 1)
        self.pending_anc = anc_all
        self.pending_depth = pend_depth
        return out.last_hidden_state

    def _append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one forward's new entries after the filled slots of ``layer``; returns the filled views including
        them. Every layer of a forward writes at the same offset (``used`` moves on once the forward is done)."""
        end = self.used + keys.shape[2]
        if self.keys is None:
            self.keys = [None] * self.num_layers
            self.values = [None] * self.num_layers
        if self.keys[layer] is None or end > self.keys[layer].shape[2]:
            self.keys[layer] = _grow(self.keys[layer], keys, self.used, end)
            self.values[layer] = _grow(self.values[layer], values, self.used, end)
        self.keys[layer][:, :, self.used:end] = keys
        self.values[layer][:, :, self.used:end] = values
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)

    def commit(self, keep: list[list[int]]) -> None:
        """Append each row's ``keep`` pending nodes (indices in pending order, forming a path) to its committed
        prefix and drop all other pending entries."""
        if self.keys is None:
            self._reset_pending()
            return
        c = self.committed_slots
        kept = [len(k) for k in keep]
        width = max(kept, default=0)
        index = torch.zeros(self.batch_size, width, dtype=torch.long, device=self.device)
        valid = torch.zeros(self.batch_size, width, dtype=torch.bool, device=self.device)
        for b, row in enumerate(keep):
            if row:
                index[b, : len(row)] = torch.tensor(row, dtype=torch.long, device=self.device)
                valid[b, : len(row)] = True
        if width:
            for slabs in (self.keys, self.values):
                for slab in slabs:
                    slab[:, :, c:c + width] = _gather_slots(slab[:, :, c:self.used], index)
        self.committed_valid = torch.cat([self.committed_valid, valid], 1)
        self.lengths = self.lengths + torch.tensor(kept, dtype=torch.long, device=self.device)
        self._reset_pending()
        longest = int(self.lengths.max()) if self.batch_size else 0
        if self.committed_slots - longest > max(REPACK_MIN_GAP, longest // REPACK_FRACTION):
            self._repack()

    def _repack(self) -> None:
        """Close the gaps rows left when they accepted fewer tokens than their neighbours: each row's committed
        entries move, in order, to the right end of a region as wide as the longest row."""
        width = int(self.lengths.max())
        index = torch.zeros(self.batch_size, width, dtype=torch.long, device=self.device)
        valid = torch.zeros(self.batch_size, width, dtype=torch.bool, device=self.device)
        for b in range(self.batch_size):
            slots = self.committed_valid[b].nonzero().squeeze(1)
            n = slots.shape[0]
            index[b, width - n:] = slots
            valid[b, width - n:] = True
        for slabs in (self.keys, self.values):
            for layer, slab in enumerate(slabs):
                slabs[layer] = _gather_slots(slab[:, :, : self.committed_slots], index)
        self.committed_valid = valid
        self._reset_pending()

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (in that order), trimming left padding no remaining row needs. Drops pending nodes."""
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        valid = self.committed_valid.index_select(0, idx)
        used = valid.any(0).nonzero()
        start = int(used[0]) if used.numel() else valid.shape[1]
        if self.keys is not None:
            self.keys = [k.index_select(0, idx)[:, :, start:self.committed_slots] for k in self.keys]
            self.values = [v.index_select(0, idx)[:, :, start:self.committed_slots] for v in self.values]
        self.committed_valid = valid[:, start:]
        self.lengths = self.lengths.index_select(0, idx)
        self._reset_pending()

    def prefill(self, prompts: list[list[int]]) -> None:
        """Append one row per prompt holding all of it in the cache. Each prompt runs in its own forward: prompts
        padded to the longest would multiply prefill compute by the length spread, which dominates a batched run."""
        for prompt in prompts:
            fresh = BatchKV(self.model, 1, self.decoder)
            if prompt:
                fresh.forward(Nodes.chains([prompt], 0, fresh.device))
                fresh.commit([list(range(len(prompt)))])
            self.extend(fresh)

    def extend(self, other: BatchKV) -> None:
        """Append ``other``'s rows (committed state only) after this cache's rows, left-padding the shorter side."""
        self._become([self, other])

    def add_empty_rows(self, n: int) -> None:
        """Append ``n`` rows holding nothing yet."""
        self._become([self, BatchKV(self.model, n, self.decoder)])

    def feed_alone(self, rows: dict[int, list[int]]) -> None:
        """Feed each of ``rows`` its tokens in a forward of its own and commit them. A long catch-up fed in the
        batch's forward would be padded across every row. Call between steps: pending nodes are dropped."""
        pieces = [self.copy_rows([b]) for b in range(self.batch_size)]
        for b, tokens in rows.items():
            if tokens:
                pieces[b].forward(Nodes.chains([tokens], 0, self.device))
                pieces[b].commit([list(range(len(tokens)))])
        self._become(pieces)

    def copy_rows(self, rows: list[int]) -> BatchKV:
        """A new cache holding a copy of ``rows``' committed state."""
        out = BatchKV(self.model, 0, self.decoder)
        out.keys, out.values = self.keys, self.values
        out.committed_valid, out.lengths = self.committed_valid, self.lengths
        out.select(rows)  # index_select copies: ``out`` shares no storage with this cache
        return out

    def _become(self, pieces: list[BatchKV]) -> None:
        """Hold the rows of ``pieces`` (committed state only), in order, each left-padded to the widest."""
        width = max(p.committed_slots for p in pieces)
        like = next((p.keys for p in pieces if p.keys is not None), None)
        if like is not None:
            pads = [width - p.committed_slots for p in pieces]
            for name in ("keys", "values"):
                per_piece = [p._committed(getattr(p, name), like) for p in pieces]
                setattr(self, name, [torch.cat([_left_pad(t, n) for t, n in zip(layer, pads)], 0)
                                     for layer in zip(*per_piece)])
        self.committed_valid = torch.cat([torch.nn.functional.pad(p.committed_valid, (width - p.committed_slots, 0))
                                          for p in pieces], 0)
        self.lengths = torch.cat([p.lengths for p in pieces])
        self._reset_pending()

    def _committed(self, slabs: list[torch.Tensor] | None, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """This cache's committed entries per layer (zeros shaped after ``like`` when it holds none yet)."""
        if slabs is None:
            return [t.new_zeros(self.batch_size, t.shape[1], self.committed_slots, t.shape[3]) for t in like]
        return [t[:, :, : self.committed_slots] for t in slabs]


REPACK_MIN_GAP = 32  # gap slots tolerated before a repack, at least ...
REPACK_FRACTION = 8  # ... and at most 1/8 of the longest row


class _SlabLayer(DynamicLayer):
    """A cache layer that writes a forward's keys and values into ``BatchKV``'s slabs instead of concatenating."""

    def __init__(self, kv: BatchKV, layer: int) -> None:
        super().__init__()
        self.kv, self.layer = kv, layer
        self.is_initialized = True
        self.device = kv.device
        if kv.keys is not None and kv.keys[layer] is not None:
            self.keys, self.values = kv.filled(layer)
        else:
            self.keys = self.values = torch.zeros(kv.batch_size, 0, 0, 0, device=kv.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self.keys, self.values = self.kv._append(self.layer, key_states, value_states)
        return self.keys, self.values


def _gather_slots(region: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Slots ``index[b]`` of every row b of ``region`` ([batch, heads, slots, dim]; ``index``: [batch, n])."""
    return region.gather(2, index[:, None, :, None].expand(-1, region.shape[1], -1, region.shape[3]))


def _grow(slab: torch.Tensor | None, like: torch.Tensor, used: int, needed: int) -> torch.Tensor:
    """A slab with room for ``needed`` slots plus headroom, holding ``slab``'s first ``used`` slots."""
    capacity = needed + max(64, needed // 4)
    b, heads, _, dim = like.shape
    out = like.new_empty(b, heads, capacity, dim)
    if slab is not None and used:
        out[:, :, :used] = slab[:, :, :used]
    return out


def _left_pad(t: torch.Tensor, n: int) -> torch.Tensor:
    return torch.nn.functional.pad(t, (0, 0, n, 0)) if n else t
