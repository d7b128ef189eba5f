"""The demo's answer per workload: the config its profile chose, tokens/s measured off and tuned on the same prompts,
the speedup, the mean acceptance length, and a one-line verdict. Printed as a table and written as Markdown."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from engine.config import SpecConfig
from storage.schemas import ProfileRecord
from tuner.demo.traffic import Sample

PAYS = 1.05  # a measured speedup below this is within run-to-run noise on a shared CPU: not worth speculating for
COLUMNS = ("workload", "chosen config", "tokens/s off", "tokens/s tuned", "speedup", "mean acceptance length")


@dataclass(frozen=True)
class Row:
    workload: str
    config: SpecConfig  # the active profile the restarted engine applied at startup
    profile_version: int
    tokens_per_s_off: float  # output tokens / the engine's decode seconds, over the arm's requests
    tokens_per_s_tuned: float
    mean_acceptance_length: float | None  # of the tuned requests; None when they drafted nothing
    predicted_speedup: float | None  # the replay search's, stored with the profile
    requests: int  # per arm

    @property
    def speedup(self) -> float:
        return self.tokens_per_s_tuned / self.tokens_per_s_off if self.tokens_per_s_off > 0 else 0.0

    def verdict(self) -> str:
        label = self.config.label()
        if not self.config.speculative:
            return (f"do not speculate: no config beat off in the replay search (off vs off measured "
                    f"{self.speedup:.2f}x, the noise level)")
        predicted = f", replay predicted {self.predicted_speedup:.2f}x" if self.predicted_speedup else ""
        if self.speedup >= PAYS:
            mal = f", mean acceptance length {self.mean_acceptance_length:.2f}" if self.mean_acceptance_length else ""
            return f"speculate: {label} - {self.speedup:.2f}x measured{mal}"
        return f"do not speculate: the tuned {label} measured {self.speedup:.2f}x here{predicted}"

    def cells(self) -> tuple[str, ...]:
        mal = f"{self.mean_acceptance_length:.2f}" if self.mean_acceptance_length is not None else "-"
        return (self.workload, self.config.label(), f"{self.tokens_per_s_off:.2f}", f"{self.tokens_per_s_tuned:.2f}",
                f"{self.speedup:.2f}x", mal)


def decode_rate(samples: Sequence[Sample]) -> float:
    seconds = sum(s.decode_s for s in samples)
    return sum(s.tokens for s in samples) / seconds if seconds > 0 else 0.0


def mean_acceptance_length(samples: Sequence[Sample]) -> float | None:
    drafts = sum(s.drafts for s in samples)
    return 1.0 + sum(s.accepted_tokens for s in samples) / drafts if drafts else None


def predicted_speedup(profile: ProfileRecord) -> float | None:
    buckets = profile.measurements.buckets if profile.measurements is not None else []
    if not buckets or not buckets[0].tokens_per_s_off:
        return None
    return buckets[0].tokens_per_s / buckets[0].tokens_per_s_off


def build_rows(samples: Sequence[Sample], profiles: dict[str, ProfileRecord]) -> list[Row]:
    """One row per workload from the measurement's off and tuned samples."""
    rows = []
    for workload, profile in profiles.items():
        off = [s for s in samples if s.workload == workload and s.arm == "off"]
        tuned = [s for s in samples if s.workload == workload and s.arm == "tuned"]
        rows.append(Row(workload, profile.config, profile.version, decode_rate(off), decode_rate(tuned),
                        mean_acceptance_length(tuned), predicted_speedup(profile), len(tuned)))
    return rows


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def print_table(rows: Sequence[Row], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*row.cells())
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(table)
    for row in rows:
        console.print(f"{row.workload}: {row.verdict()}", highlight=False)
