"""The n-gram drafter: prompt lookup over prompt + output, no model to load."""

from __future__ import annotations

from engine.drafters.base import Drafter, DraftInput
from engine.drafters.ngram import max_candidates_for, ngram_candidates, ngram_tree
from engine.tree import DraftTree


class NgramDrafter(Drafter):
    method = "ngram"

    def propose(self, inputs: list[DraftInput]) -> list[DraftTree]:
        trees = []
        for job in inputs:
            cfg = job.config
            candidates = ngram_candidates(job.tokens, job.depth, cfg.min_n, cfg.max_n, max_candidates_for(cfg.tree),
                                          cfg.ngram_match)
            trees.append(ngram_tree(candidates, cfg.tree, job.depth))
        return trees
