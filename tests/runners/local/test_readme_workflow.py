"""The README's "Running a Workflow" section, run as written with real `qlk` processes (issue 18
item 5: the two-step vertical and both cancellation scenarios from the README's commands).

The section's plan file and shell lines run in a fresh directory (the default `./ql3.db`); then
the in-flight cancellation the prose describes: a Workflow whose step sleeps, `qlk serve` in
the background, `qlk cancel` once the step's process runs, and the process stopped before the
Attempt, the steps and the Workflow end `cancelled`."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 120.0


def _blocks() -> tuple[str, list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Running a Workflow") :]
    section = section[: section.index("\n## ", 1)]
    [toml] = re.findall(r"```toml\n(.*?)```", section, re.S)
    [sh] = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = [re.sub(r"\s+#.*$", "", line) for line in sh.splitlines() if line.strip()]
    return toml, lines


def _rows(db: Path, query: str, *args: object) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(query, args).fetchall()


def _env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in {"QL3_DB", "QL3_DSN"}}
    return {**keep, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}


@pytest.mark.spec("WF-14", "WF-15")
def test_the_readme_workflow_section_runs_as_written(tmp_path: Path) -> None:
    toml, lines = _blocks()
    assert [line.split()[0] for line in lines] == [
        "RUN=$(qlk", "qlk", "qlk", "qlk", "EARLY=$(qlk", "qlk", "qlk",
    ]  # fmt: skip
    (tmp_path / "plan.toml").write_text(toml, encoding="utf-8")
    script = "\n".join(["set -e", *lines, 'echo "RUN=$RUN EARLY=$EARLY"'])
    done = subprocess.run(
        ["/bin/bash", "-c", script],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ids = re.search(r"RUN=(\S+) EARLY=(\S+)", done.stdout)
    assert ids is not None, done.stdout
    run_id, early = ids.groups()
    assert f"run {run_id}: succeeded" in done.stdout
    db = tmp_path / "ql3.db"
    # WF-14: both steps succeeded, one Attempt each, two admissions, their output in order.
    steps = _rows(db, "SELECT step_key, status FROM step_runs WHERE run_id = ? ORDER BY ordinal",
                  run_id)  # fmt: skip
    assert steps == [("build", "succeeded"), ("test", "succeeded")]
    attempts = _rows(db, "SELECT attempt_id, status FROM attempts WHERE run_id = ?", run_id)
    assert sorted(str(status) for _, status in attempts) == ["succeeded", "succeeded"]
    assert all(str(a).startswith("wta:") for a, _ in attempts)
    ledger = _rows(db, "SELECT count(*) FROM task_admissions WHERE run_id = ?", run_id)
    assert ledger == [(2,)]
    logs = [(tmp_path / "ql3.db.d" / "logs" / f"{a}.log") for a, _ in attempts]
    assert sorted(p.read_text() for p in logs) == ["built\n", "tested\n"]
    # WF-15: the Workflow cancelled before it started ended cancelled with no Attempt.
    assert _rows(db, "SELECT status FROM runs WHERE run_id = ?", early) == [("cancelled",)]
    assert _rows(db, "SELECT count(*) FROM attempts WHERE run_id = ?", early) == [(0,)]


@pytest.mark.spec("WF-16")
def test_cancelling_a_workflow_with_a_running_step_from_the_cli(tmp_path: Path) -> None:
    """The prose's in-flight case with the README's commands: the step's process is stopped
    first, then the Attempt, every step and the Workflow are `cancelled`."""
    (tmp_path / "slow.toml").write_text(
        'name = "slow"\n[[steps]]\nkey = "nap"\nargv = ["sleep", "600"]\n'
        '[[steps]]\nkey = "after"\nargv = ["true"]\nafter = ["nap"]\n',
        encoding="utf-8",
    )
    env = _env(tmp_path)
    qlk = [sys.executable, "-m", "conformance.cli"]

    def run(*args: str) -> str:
        done = subprocess.run([*qlk, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run_id = run("workflow", "submit", "slow.toml").strip()
    db = tmp_path / "ql3.db"
    serve = subprocess.Popen([*qlk, "serve"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        handle: object = None
        while handle is None:
            assert time.monotonic() < deadline, "the step's process never ran"
            found = _rows(db, "SELECT executor_handle FROM attempts WHERE run_id = ? "
                          "AND status = 'running'", run_id)  # fmt: skip
            handle = found[0][0] if found else None
            time.sleep(0.1)
        pid = int(str(handle).split(":")[3])
        os.kill(pid, 0)  # the step's process runs
        run("cancel", run_id)
        while _rows(db, "SELECT status FROM runs WHERE run_id = ?", run_id) != [("cancelled",)]:
            assert time.monotonic() < deadline, "the Workflow never converged"
            time.sleep(0.1)
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    steps = _rows(db, "SELECT status FROM step_runs WHERE run_id = ?", run_id)
    assert sorted(str(s) for (s,) in steps) == ["cancelled", "cancelled"]
    assert _rows(db, "SELECT status FROM attempts WHERE run_id = ?", run_id) == [("cancelled",)]
    with pytest.raises(ProcessLookupError):  # stopped (and reaped by the application)
        os.kill(pid, 0)
