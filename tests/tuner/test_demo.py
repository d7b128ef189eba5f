"""``spectune demo``: the quick demo end to end with tiny settings (table, report files, no process left), Ctrl-C stops
every service it started, a service that cannot start is a one-line error, and the verdict follows the measurement."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.config import OFF, SpecConfig
from tuner.demo.processes import ServiceError, Services
from tuner.demo.results import Row, markdown_table

WORKLOADS = ("humaneval", "code-edit", "prose")
TINY = ["--quick", "--prompts", "1", "--max-tokens", "12", "--controller-seconds", "6", "--trials", "4",
        "--no-progress"]


def _demo(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tuner.cli", "demo", *TINY, "--out", str(out), *extra]


def _alive(pid: int) -> bool:
    """A process with this id exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.model
def test_quick_demo_prints_the_table_writes_the_report_and_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(_demo(out), capture_output=True, text=True, timeout=300,
                          env=os.environ | {"OMP_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    for column in ("workload", "chosen config", "tokens/s off", "tokens/s tuned", "speedup"):
        assert column in done.stdout
    results = json.loads((out / "results.json").read_text())
    table = results["table"]
    assert [row["workload"] for row in table] == list(WORKLOADS)
    for row in table:
        assert row["tokens_per_s_off"] > 0 and row["tokens_per_s_tuned"] > 0 and row["requests_per_arm"] == 1
        assert row["verdict"].startswith(("speculate: ", "do not speculate")) and row["workload"] in done.stdout
    # the profiles the restarted engine applied are the ones the searches saved
    assert {s["workload"]: s["profile_version"] for s in results["studies"]} == \
        {row["workload"]: row["profile_version"] for row in table}
    for name in ("report.html", "acceptance.png", "throughput.png", "decisions.png", "table.md", "cost-model.json"):
        assert (out / name).stat().st_size > 0, name
    assert sorted(p.name for p in (out / "traces").iterdir()) == sorted(f"{w}.jsonl" for w in WORKLOADS)
    report = (out / "report.html").read_text()
    assert all(f'src="{png}"' in report for png in ("acceptance.png", "throughput.png", "decisions.png"))
    assert len(results["pids"]) == 4  # engine, steering sidecar, API sidecar, restarted engine
    assert not [pid for pid in results["pids"] if _alive(pid)]


@pytest.mark.model
def test_ctrl_c_stops_every_service_the_demo_started(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.Popen(_demo(out, "--controller-seconds", "120"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ | {"OMP_NUM_THREADS": "2"})
    try:
        deadline = time.monotonic() + 180
        while "Uvicorn running" not in _read(out / "logs" / "sidecar.log"):  # engine up, sidecar up
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        children = _children(proc.pid)
        assert len(children) == 2
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "interrupted: every process the demo started is stopped"
    assert not [pid for pid in children if _alive(pid)]


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_service_that_cannot_start_is_one_line_naming_its_log(tmp_path: Path) -> None:
    with Services(tmp_path, dict(os.environ)) as services:
        with pytest.raises(ServiceError) as caught:
            services.start("engine", ["engine", "serve", "--target", str(tmp_path / "missing")], progress=False)
        pid = services.pids[0]
    message = str(caught.value)
    assert message.startswith("engine exited with code 2 while starting: error: ") and "\n" not in message
    assert str(tmp_path / "engine.log") in message
    assert not _alive(pid)


def _row(config: SpecConfig, off: float, tuned: float, predicted: float | None = 1.4) -> Row:
    return Row("code-edit", config, 3, off, tuned, 2.5 if config.speculative else None, predicted, 2)


def test_verdict_follows_the_measured_speedup_not_the_prediction() -> None:
    ngram = SpecConfig(method="ngram", k=8)
    assert _row(ngram, 4.0, 6.4).verdict() == ("speculate: ngram k=8 chain n=1..4 - 1.60x measured, mean "
                                               "acceptance length 2.50")
    assert _row(ngram, 4.0, 4.1).verdict() == ("do not speculate: the tuned ngram k=8 chain n=1..4 measured 1.02x "
                                               "here, replay predicted 1.40x")
    assert _row(OFF, 4.0, 4.0, None).verdict().startswith("do not speculate: no config beat off")


def test_markdown_table_has_the_demo_columns() -> None:
    text = markdown_table([_row(SpecConfig(method="draft", k=4), 3.5, 5.6)])
    assert text.splitlines()[0] == ("| workload | chosen config | tokens/s off | tokens/s tuned | speedup | mean "
                                    "acceptance length |")
    assert text.splitlines()[2] == "| code-edit | draft k=4 chain | 3.50 | 5.60 | 1.60x | 2.50 |"
