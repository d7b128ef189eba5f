"""One parser for the speculative-decoding counter family that llama.cpp, vLLM and spectune's own engine export.

All three use vLLM's names behind their own prefix (``llamacpp:``, ``vllm:``, ``spectune:``)::

    <prefix>spec_decode_num_drafts_total                               verify steps that carried a draft
    <prefix>spec_decode_num_draft_tokens_total                         draft tokens proposed
    <prefix>spec_decode_num_accepted_tokens_total                      draft tokens the target accepted
    <prefix>spec_decode_num_accepted_tokens_per_pos_total{position=i}  accepted tokens at draft position i (0-based)

Samples are summed over every label except ``position`` and, when asked, the workload label, so vLLM's
``model_name``/``engine`` labels fold away. Counters are cumulative; subtract two scrapes to measure an interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PREFIXES = ("llamacpp:", "vllm:", "spectune:")
WORKLOAD_LABEL = "workload"  # spectune's engine labels each series with the workload it served

_DRAFTS = "spec_decode_num_drafts"
_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
_ACCEPTED = "spec_decode_num_accepted_tokens"
_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
_ALL_WORKLOADS = ""


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format, or a spec-decode sample is malformed."""


@dataclass(frozen=True)
class SpecDecodeCounters:
    """Cumulative speculative-decoding counters (one engine, or one workload of it).

    Terms as in vLLM: *accepted* tokens are draft tokens the target agreed with; *mean acceptance length* =
    1 + accepted / drafts (it counts the bonus token).
    """

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = field(default_factory=tuple)

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    def __add__(self, other: SpecDecodeCounters) -> SpecDecodeCounters:
        return SpecDecodeCounters(
            self.num_drafts + other.num_drafts,
            self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            _combine(self.accepted_per_position, other.accepted_per_position, 1),
        )

    def __sub__(self, earlier: SpecDecodeCounters) -> SpecDecodeCounters:
        """What happened between the ``earlier`` scrape and this one; ValueError if a counter went backwards."""
        delta = SpecDecodeCounters(
            self.num_drafts - earlier.num_drafts,
            self.num_draft_tokens - earlier.num_draft_tokens,
            self.num_accepted_tokens - earlier.num_accepted_tokens,
            _combine(self.accepted_per_position, earlier.accepted_per_position, -1),
        )
        if min(delta.num_drafts, delta.num_draft_tokens, delta.num_accepted_tokens, *delta.accepted_per_position,
               0) < 0:
            raise ValueError("spec-decode counters went backwards between two scrapes (engine restarted?)")
        return delta


def _combine(a: tuple[int, ...], b: tuple[int, ...], sign: int) -> tuple[int, ...]:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


def parse_spec_decode(text: str, prefix: str, workload_label: str | None = None) -> dict[str, SpecDecodeCounters]:
    """Spec-decode counters from one ``/metrics`` scrape, keyed by workload.

    Without ``workload_label`` everything lands under the key ``""``. With it, each value of that label gets its own
    entry, and samples lacking the label go under ``""``. An engine that has not speculated yet may omit the family
    entirely; that yields ``{}``.

    >>> text = 'llamacpp:spec_decode_num_drafts_total 2\\nllamacpp:spec_decode_num_draft_tokens_total 6\\n'
    >>> parse_spec_decode(text, "llamacpp:")[""].num_draft_tokens
    6
    """
    if not prefix.endswith(":"):
        raise ValueError(f"prefix: {prefix!r} must end with ':' (one of {', '.join(PREFIXES)})")
    scalars: dict[str, dict[str, float]] = {}
    per_pos: dict[str, dict[int, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc}") from exc
    for family in families:
        if not family.name.startswith(prefix):
            continue
        short = family.name[len(prefix):].removesuffix("_total")
        if short not in (_DRAFTS, _DRAFT_TOKENS, _ACCEPTED, _PER_POS):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total") and sample.name != family.name:
                continue  # _created timestamps that prometheus_client-based exporters add
            key = sample.labels.get(workload_label, _ALL_WORKLOADS) if workload_label else _ALL_WORKLOADS
            if short == _PER_POS:
                position = _position(sample.labels)
                slot = per_pos.setdefault(key, {})
                slot[position] = slot.get(position, 0.0) + sample.value
            else:
                slot_s = scalars.setdefault(key, {})
                slot_s[short] = slot_s.get(short, 0.0) + sample.value
    return {key: _counters(scalars.get(key, {}), per_pos.get(key, {})) for key in sorted(scalars.keys() | per_pos)}


def _position(labels: dict[str, str]) -> int:
    try:
        position = int(labels["position"])
    except (KeyError, ValueError):
        raise MetricsParseError(f"per-position sample needs an integer 'position' label, got {labels}") from None
    if position < 0:
        raise MetricsParseError(f"per-position sample has a negative position {position}")
    return position


def _counters(scalars: dict[str, float], per_pos: dict[int, float]) -> SpecDecodeCounters:
    width = max(per_pos, default=-1) + 1
    return SpecDecodeCounters(
        num_drafts=round(scalars.get(_DRAFTS, 0.0)),
        num_draft_tokens=round(scalars.get(_DRAFT_TOKENS, 0.0)),
        num_accepted_tokens=round(scalars.get(_ACCEPTED, 0.0)),
        accepted_per_position=tuple(round(per_pos.get(i, 0.0)) for i in range(width)),
    )


def delta_by_workload(before: dict[str, SpecDecodeCounters],
                      after: dict[str, SpecDecodeCounters]) -> dict[str, SpecDecodeCounters]:
    """Per-workload counters between two scrapes; a workload first seen in ``after`` counts from zero."""
    return {key: counters - before.get(key, SpecDecodeCounters()) for key, counters in after.items()}
