"""Session-wide test settings."""

from __future__ import annotations

import signal

import torch

# Tiny models spend their time in OpenMP thread hand-offs when the two cores are shared (a server subprocess, a
# parallel build): one intra-op thread makes them 30x faster here and changes no result.
torch.set_num_threads(1)
torch.set_grad_enabled(False)

# A job started as `cmd &` from a script (as some CI runners start theirs) inherits SIGINT ignored, and so would every
# CLI the tests start and then Ctrl-C; a handler, unlike an ignored signal, is reset to the default at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
