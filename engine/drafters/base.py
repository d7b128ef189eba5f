"""The drafter interface: one small class per ``method``, as in vLLM's proposers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from engine.config import SpecConfig
from engine.sampling import SamplingParams
from engine.tree import DraftTree


@dataclass
class DraftInput:
    """One request's drafting job for this step."""

    row: int  # the request's row in the running batch
    tokens: list[int]  # prompt + output so far; the last one is the root of the draft tree
    config: SpecConfig
    depth: int  # draft depth for this step (k capped by the tokens still allowed)
    params: SamplingParams
    generator: torch.Generator | None


class Drafter(ABC):
    """Proposes draft trees for a batch. The engine owns the batch: it calls ``admit`` when requests join (in row
    order, appended after the current rows), ``retain`` when some leave, ``propose`` once per step for the rows using
    this drafter's method, and ``commit`` with each proposed row's accepted nodes after verification.
    Single-threaded."""

    method: str

    @abstractmethod
    def propose(self, inputs: list[DraftInput]) -> list[DraftTree]:
        """One tree per input, in order; an empty tree means nothing to propose (the step decodes one token)."""

    def admit(self, prompts: list[list[int]]) -> None:
        """New rows joined the batch. Stateless drafters have nothing to set up."""

    def retain(self, rows: list[int]) -> None:
        """Only ``rows`` stay in the batch, in this order."""

    def commit(self, accepted: dict[int, list[int]]) -> None:
        """``accepted[row]`` = the accepted nodes of the tree proposed for ``row`` this step."""
