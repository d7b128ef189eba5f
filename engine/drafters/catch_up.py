"""When a drafting row's draft cache is far behind, it catches up in a forward of its own.

After steps with another method (or off), the draft model's cache lacks the tokens those steps emitted. The draft
pass feeds them in its first forward, which is padded to the widest row: one row missing 40 tokens would make every
row of the batch a 40-token forward. Such a row is fed all but its root alone first. The engine, replay and the
goodput policy all follow this rule, so they price the same forwards.
"""

from __future__ import annotations

ALONE_AFTER = 16  # a row missing more tokens than this catches up alone


def catches_up_alone(batch_size: int, missing: int) -> bool:
    """Whether a drafting row whose draft cache lacks ``missing`` tokens (the root included) is fed all but the root
    in a forward of its own before the batch's draft pass. At batch 1 there is nothing to pad."""
    return batch_size > 1 and missing > ALONE_AFTER
