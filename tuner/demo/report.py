"""``OUT/report.html``: per workload, should it speculate and how, with the measured table, what the controller and the
search did, and the plots (written next to it as PNGs); plus ``OUT/table.md``."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from policies.cost_model import CostModel
from storage.schemas import DecisionRecord
from tuner.demo.analysis import acceptance_curves, throughput_curves
from tuner.demo.plan import DEMO_STABILITY
from tuner.demo.plots import plot_acceptance, plot_decisions, plot_throughput
from tuner.demo.results import COLUMNS, PAYS, markdown_table
from tuner.traces import by_workload, load_traces

if TYPE_CHECKING:
    from tuner.demo.run import DemoRun

STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em}
td.n{text-align:right}th{background:#f3f3f3}img{max-width:100%;margin:.5em 0 1.5em}
.verdict{font-size:1.1em}.muted{color:#666;font-size:.9em}"""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int = 2) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td{' class=n' if i >= numeric_from else ''}>{html.escape(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(run: DemoRun, decisions: Sequence[DecisionRecord], traces_dir: Path, cost_path: Path) -> Path:
    """Plots, table.md and report.html in ``run.out``; returns the report's path."""
    plan, out = run.plan, run.out
    traces = by_workload(load_traces(traces_dir))
    cost = CostModel.from_json(cost_path.read_bytes())
    plot_acceptance(acceptance_curves(traces, plan.acceptance_k), out / "acceptance.png")
    plot_throughput(throughput_curves(traces, cost, plan.replay_ks, plan.replay_batch_sizes), out / "throughput.png")
    plot_decisions(decisions, plan.workloads, run.steering_phases, out / "decisions.png")
    (out / "table.md").write_text(markdown_table(run.rows))
    path = out / "report.html"
    path.write_text(_html(run, decisions))
    return path


def _html(run: DemoRun, decisions: Sequence[DecisionRecord]) -> str:
    plan, engine = run.plan, run.engine
    verdicts = "".join(f"<li><b>{html.escape(r.workload)}</b>: {html.escape(r.verdict())}</li>" for r in run.rows)
    controller = _table(("workload", "requests", "config at phase end", "controller's pick now",
                         "predicted gain over off"),
                        [(c.workload, str(c.requests), c.applied.label(),
                          c.recommended.label() if c.recommended else "- (no steps seen)",
                          f"{c.predicted_gain_over_off:+.0%}" if c.predicted_gain_over_off is not None else "-")
                         for c in run.controller], numeric_from=1)
    kinds = {k: sum(d.kind == k for d in decisions) for k in ("apply", "hold", "rollback", "drift", "retune")}
    searches = _table(("workload", "study", "trials", "profile version", "chosen config", "replay predicted speedup"),
                      [(r.workload, next((s.study_name for s in run.studies if s.workload == r.workload), "-"),
                        str(plan.trials), str(r.profile_version), r.config.label(),
                        f"{r.predicted_speedup:.2f}x" if r.predicted_speedup else "-") for r in run.rows],
                      numeric_from=2)
    phases = ", ".join(f"{p.name} {p.end - p.start:.0f} s" for p in run.phases)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>spectune demo</title>
<style>{STYLE}</style></head><body>
<h1>Should I speculate for this workload, and how?</h1>
<p class="muted">{html.escape(engine.get('target', plan.target))} target, draft
{html.escape(str(engine.get('draft', plan.draft)))}, {html.escape(engine.get('dtype', plan.dtype))} on
{html.escape(engine.get('hardware', '?'))}; demo plan <b>{plan.name}</b>, run {time.strftime('%Y-%m-%d %H:%M',
time.localtime(run.started))}, {time.time() - run.started:.0f} s until this report ({html.escape(phases)}).</p>
<ul class="verdict">{verdicts}</ul>
<h2>Measured: off vs tuned</h2>
{_table(COLUMNS, [r.cells() for r in run.rows])}
<p>Measured on the engine restarted with <code>--profile-source</code> on the sidecar, which applied each workload's
saved profile at startup. Each of the first {plan.prompts} prompts of every workload was sent {plan.rounds} time(s)
off and {plan.rounds} time(s) tuned, one request at a time, alternating which went first (off requests were served
under the workload name <code>WORKLOAD-off</code>, held at speculation off). Greedy, at most {plan.max_tokens} new
tokens. tokens/s = output tokens / the engine's decode seconds (draft + verify, prefill excluded), summed over the
requests; mean acceptance length = 1 + accepted / drafting steps of the tuned requests. "Speculate" needs a measured
speedup of at least {PAYS:.2f}x.</p>
<h2>Acceptance per position</h2>
<img src="acceptance.png" alt="acceptance per position per workload">
<p class="muted">From an exact replay of the outputs the engine gave in this demo: for a chain of depth
{plan.acceptance_k}, per draft position d, the share of decode steps drafting d or more tokens whose token at d was
accepted (an n-gram lookup that found nothing counts as a miss).</p>
<h2>Tokens/s vs k and batch size</h2>
<img src="throughput.png" alt="tokens/s vs k and batch size">
<p class="muted">Replay of this demo's traces, priced by the cost model calibrated at its start (not measured runs):
decode tokens/s of all requests together at batch sizes {', '.join(map(str, plan.replay_batch_sizes))} (a workload's
traces repeated to fill the batch), chains of depth k, off at the left.</p>
<h2>The controller</h2>
<img src="decisions.png" alt="the controller's decisions over time">
<p>For {plan.controller_s:.0f} s every workload sent its prompts at the same time to the engine while the sidecar's
controller priced configs from the live step statistics and applied changes per workload (windows shortened for the
demo: {html.escape(DEMO_STABILITY.model_dump_json())}). Decisions: {', '.join(f'{n} {k}' for k, n in kinds.items())}.
</p>
{controller}
<h2>The search</h2>
<p>Per workload, an Optuna search of {plan.trials} trials over method, k, tree and n-gram window, scored by replaying
the workload's traces at batch size 1 with the calibrated cost model, started through the sidecar's
<code>/v1/studies</code>; the best trial became the workload's active profile in <code>{html.escape(run.db_url)}</code>.
</p>
{searches}
</body></html>
"""
