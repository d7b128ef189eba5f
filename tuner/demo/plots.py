"""The report's PNG plots: acceptance per position, tokens/s against k and batch size, and the controller's decisions
over time. Figures are built directly (no pyplot), so no display or global backend is involved."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from storage.schemas import DecisionRecord
from tuner.demo.analysis import AcceptanceCurve, ThroughputCurve

METHOD_STYLE = {"draft": "-", "ngram": "--"}
# drawn in this order: a hold at the same moment as a rollback must not hide it
KIND_STYLE = {"hold": ("o", "tab:gray"), "apply": ("^", "tab:green"), "rollback": ("v", "tab:red"),
              "drift": ("x", "tab:orange"), "retune": ("s", "tab:purple")}


@dataclass(frozen=True)
class Phase:
    name: str
    start: float  # time.time()
    end: float


def _panels(workloads: Sequence[str], height: float = 3.4) -> tuple[Figure, dict[str, Axes]]:
    fig = Figure(figsize=(4.2 * len(workloads), height))
    axes = fig.subplots(1, len(workloads), squeeze=False, sharey=True)
    return fig, dict(zip(workloads, axes[0]))


def plot_acceptance(curves: Sequence[AcceptanceCurve], path: Path) -> None:
    workloads = list(dict.fromkeys(c.workload for c in curves))
    fig, axes = _panels(workloads)
    for curve in curves:
        ax = axes[curve.workload]
        ax.plot(range(1, len(curve.rates) + 1), curve.rates, METHOD_STYLE[curve.method], marker="o", label=curve.method)
    for workload, ax in axes.items():
        ax.set(title=workload, xlabel="draft position", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend()
    axes[workloads[0]].set_ylabel("accepted share of decode steps")
    fig.suptitle("Acceptance per position (exact replay of the demo's outputs, chain drafts)", fontsize=10)
    _save(fig, path)


def plot_throughput(curves: Sequence[ThroughputCurve], path: Path) -> None:
    workloads = list(dict.fromkeys(c.workload for c in curves))
    ks = sorted({k for c in curves for k in c.ks if k > 0})
    positions = {k: i for i, k in enumerate([0, *ks])}  # evenly spaced: 0 (off), then each k
    batch_sizes = sorted({c.batch_size for c in curves})
    colors = {b: colormaps["viridis"](i / max(1, len(batch_sizes) - 1) * 0.85) for i, b in enumerate(batch_sizes)}
    off = {(c.workload, c.batch_size): c.tokens_per_s[0] for c in curves if c.method == "off"}
    fig, axes = _panels(workloads, 3.8)
    for curve in curves:
        if curve.method == "off":
            continue
        x = [positions[0], *(positions[k] for k in curve.ks)]
        y = [off[(curve.workload, curve.batch_size)], *curve.tokens_per_s]
        axes[curve.workload].plot(x, y, METHOD_STYLE[curve.method], marker=".", color=colors[curve.batch_size],
                                  label=f"{curve.method}, batch {curve.batch_size}")
    for workload, ax in axes.items():
        ax.set(title=workload, xlabel="k (speculative tokens per step)")
        ax.set_xticks(list(positions.values()), ["off", *map(str, ks)])
        ax.grid(alpha=0.3)
    axes[workloads[0]].set_ylabel("decode tokens/s (all requests together)")
    axes[workloads[-1]].legend(fontsize=7)
    fig.suptitle("Tokens/s vs k and batch size (replay of the demo's traces, priced by its calibrated cost model)",
                 fontsize=10)
    _save(fig, path)


def _epoch(decision: DecisionRecord) -> float:
    stamp = decision.created_at
    return (stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)).timestamp()


def plot_decisions(decisions: Sequence[DecisionRecord], workloads: Sequence[str], phases: Sequence[Phase],
                   path: Path) -> None:
    """A row per workload, a marker per decision, over ``phases`` (time counted from the first one's start)."""
    t0 = phases[0].start
    names = list(dict.fromkeys([*workloads, *(d.workload for d in decisions)]))
    rows = {name: i for i, name in enumerate(names)}
    fig = Figure(figsize=(11, 1.2 + 0.7 * len(names)))
    ax = fig.subplots()
    for i, phase in enumerate(phases):
        ax.axvspan(phase.start - t0, phase.end - t0, color=f"C{i}", alpha=0.08)
        ax.text((phase.start + phase.end) / 2 - t0, len(names) - 0.45, phase.name, ha="center", fontsize=7)
    for kind, (marker, color) in KIND_STYLE.items():
        mine = [d for d in decisions if d.kind == kind]
        if mine:
            ax.scatter([_epoch(d) - t0 for d in mine], [rows[d.workload] for d in mine], marker=marker, color=color,
                       label=kind, zorder=3)
    labelled = dict.fromkeys(names, 0)
    for d in decisions:
        if d.kind not in ("apply", "rollback") or d.to_config is None:
            continue
        label = f"{d.to_config.method} k={d.to_config.k}" if d.to_config.speculative else "off"
        above = labelled[d.workload] % 2 == 0  # a row's labels alternate above and below it, so neighbours do not clash
        labelled[d.workload] += 1
        ax.annotate(label, (_epoch(d) - t0, rows[d.workload]), textcoords="offset points",
                    xytext=(3, 7 if above else -14), fontsize=7)
    if not decisions:
        ax.text(0.5, 0.5, "no decisions: the controller saw too few steps to act", transform=ax.transAxes,
                ha="center", color="gray")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.2)
    ax.set_xlim(0, max(p.end for p in phases) - t0)
    ax.set_xlabel(f"seconds since the {phases[0].name} phase started")
    ax.grid(axis="x", alpha=0.3)
    if decisions:
        ax.legend(loc="lower right", fontsize=7)
    ax.set_title("The controller's decisions over time (GET /v1/decisions)", fontsize=10)
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
