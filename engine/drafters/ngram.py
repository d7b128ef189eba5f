"""N-gram prompt lookup: propose the tokens that followed earlier occurrences of the context's last n tokens.

Pure numpy, deterministic in the tokens so far, so replay recomputes exactly what the engine proposed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.config import NgramMatch, TreeShape
from engine.tree import DraftTree

SUFFIX_MATCH_CAP = 16


def ngram_candidates(tokens: Sequence[int] | np.ndarray, k: int, min_n: int, max_n: int,
                     max_candidates: int = 1, match: NgramMatch = "recent") -> list[list[int]]:
    """Continuations of earlier matches of the last n tokens, longest n first, then the most recent match first
    (``match="first"``: the earliest first).

    Example: tokens ``[5, 6, 7, 9, 5, 6]`` with k=2, n in 1..2: the suffix ``[5, 6]`` occurred at 0, followed by
    ``[7, 9]`` -> ``[[7, 9]]``. Duplicate continuations are skipped; at most ``max_candidates`` are returned.
    """
    arr = np.asarray(tokens, dtype=np.int64)
    length = arr.shape[0]
    found: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        windows = sliding_window_view(arr[: length - 1], n)  # a match must end before the last token
        starts = np.flatnonzero((windows == arr[length - n:]).all(axis=1))
        for start in starts[::-1] if match == "recent" else starts:
            cont = arr[start + n: start + n + k]
            key = tuple(int(t) for t in cont)
            if not key or key in seen:
                continue
            seen.add(key)
            found.append(list(key))
            if len(found) >= max_candidates:
                return found
    return found


def suffix_match_len(tokens: Sequence[int] | np.ndarray, cap: int = SUFFIX_MATCH_CAP) -> int:
    """Length of the longest suffix of ``tokens`` (at most ``cap``) that also occurs earlier, ending before the last
    token: 0 when the last token is new. It tells how well the text so far predicts what comes next (an n-gram
    lookup continuing a 9-token match is accepted far more often than one continuing a 1-token match).

    >>> suffix_match_len([5, 6, 7, 9, 5, 6])
    2
    """
    arr = np.asarray(tokens, dtype=np.int64)
    length = arr.shape[0]
    ends = np.flatnonzero(arr[: length - 1] == arr[length - 1]) if length > 1 else arr[:0]
    n = 0
    while ends.size and n < cap:
        n += 1
        ends = ends[ends >= n]  # occurrences that can be extended one token further back
        ends = ends[arr[ends - n] == arr[length - 1 - n]]
    return n


def ngram_tree(candidates: list[list[int]], tree: TreeShape, k: int) -> DraftTree:
    """Merge candidate continuations (best first) into a trie obeying ``tree``'s shape and depth ``k``.

    A chain keeps only the first candidate; ``branching`` caps children per node at each depth; ``top_k``/``budget``
    caps children per node at top_k and the total at budget nodes.
    """
    out = DraftTree()
    child_of: dict[tuple[int, int], int] = {}
    for cand in candidates:
        parent = -1
        for depth, token in enumerate(cand[:k], start=1):
            node = child_of.get((parent, token))
            if node is None:
                siblings = sum(1 for (p, _) in child_of if p == parent)
                limit = tree.top_k if tree.top_k is not None else tree.branching_at(depth)
                if siblings >= limit or (tree.budget is not None and len(out) >= tree.budget):
                    break
                node = out.add(token, parent)
                child_of[(parent, token)] = node
            parent = node
    return out


def max_candidates_for(tree: TreeShape) -> int:
    """How many distinct continuations are worth collecting for this tree shape."""
    if tree.top_k is not None:
        return tree.top_k
    return max(tree.branching or (1,))
