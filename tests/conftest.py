"""Session-wide test settings."""

from __future__ import annotations

import torch

# Tiny models spend their time in OpenMP thread hand-offs when the two cores are shared (a server subprocess, a
# parallel build): one intra-op thread makes them 30x faster here and changes no result.
torch.set_num_threads(1)
torch.set_grad_enabled(False)
