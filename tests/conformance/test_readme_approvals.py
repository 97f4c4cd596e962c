"""The README's "Tasks that need approval" section, run as written with real `qlk` processes
(issue 19, "Done when": a task that requires approval waits, is approved with `qlk approve`,
runs once; a denied one never runs).

The section's shell lines run in a fresh directory (the default `./ql3.db`) beside an executable
`./deploy.sh` that appends one line to a file each time it runs. One line is added before `qlk
approve`: a third request that nobody decides. `qlk serve --approvals` stays in the background;
once the approved request's Run has succeeded, the lifecycle has cycled after the denial and
after the third request was made (it admitted a Run approved after both), so the denied and the
undecided requests having no Run is evidence, not a timing guess. Waits are bounded polls with a
generous deadline (decision KM-10); nothing asserts a duration."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.support.qlk import qlk_process

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 180.0
SECTION = "## Tasks that need approval"
#: What `./deploy.sh` does: one line per run, so the file counts the runs.
DEPLOY = "#!/bin/sh\necho deployed >> deployed.txt\n"


def _lines() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    [sh] = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [re.sub(r"\s+#.*$", "", line) for line in sh.splitlines() if line.strip()]


def _rows(db: Path, query: str, *args: object) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(query, args).fetchall()


def _env(tmp_path: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k not in {"QL3_DB", "QL3_DSN"}}
    keep = {k: v for k, v in keep.items() if not k.startswith("PYTEST_")}
    return {
        **keep,
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "USER": "alice",
        "LOGNAME": "alice",
    }


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow  # a background `qlk serve` and a dozen `qlk` processes
def test_the_readme_approval_section_runs_as_written(tmp_path: Path) -> None:
    lines = _lines()
    assert [line.split()[0] for line in lines] == [
        "qlk", "qlk", "ID=$(qlk", "NO=$(qlk", "qlk", "qlk", "qlk", "qlk",
    ]  # fmt: skip
    assert lines[1].endswith("&")  # the server runs in the background
    approve = next(i for i, line in enumerate(lines) if line.startswith("qlk approve"))
    script_lines = [
        "set -e",
        *lines[:approve],
        "WAIT=$(qlk submit --task deploy)",  # the request nobody decides
        *lines[approve:],
        'echo "ID=$ID NO=$NO WAIT=$WAIT SERVE=$!"',
    ]
    deploy = tmp_path / "deploy.sh"
    deploy.write_text(DEPLOY, encoding="utf-8")
    deploy.chmod(0o755)
    output = tmp_path / "script.out"
    # Files, not pipes: the background server keeps its stdout open after the script ends.
    with output.open("w") as out, (tmp_path / "script.err").open("w") as err:
        done = subprocess.run(
            ["/bin/bash", "-c", "\n".join(script_lines)],
            cwd=tmp_path,
            env=_env(tmp_path),
            stdout=out,
            stderr=err,
            timeout=300,
            check=False,
        )
    text = output.read_text() + (tmp_path / "script.err").read_text()
    found = re.search(r"ID=(apr-\S+) NO=(apr-\S+) WAIT=(apr-\S+) SERVE=(\d+)", text)
    assert found is not None, text
    action_id, denied, waiting, serve_pid = found.groups()
    serve = int(serve_pid)
    db = tmp_path / "ql3.db"
    run_id, denied_run, waiting_run = (f"run-{a.removeprefix('apr-')}" for a in found.groups()[:3])
    try:
        assert done.returncode == 0, text
        assert f"approved {action_id} (as alice)" in text
        assert f"denied {denied} (as alice)" in text
        assert "deploy: awaiting approval (qlk approve apr-" in text
        # `qlk approvals` listed both requests as pending, with who asked.
        assert re.search(rf"\| {action_id} \| deploy \| pending \| alice, ", text), text
        assert re.search(rf"\| {denied} \| deploy \| pending \| alice, ", text), text
        deadline = time.monotonic() + DEADLINE_S
        while _rows(db, "SELECT status FROM runs WHERE run_id = ?", run_id) != [("succeeded",)]:
            assert _pid_alive(serve), "qlk serve --approvals exited\n" + text
            assert time.monotonic() < deadline, "the approved request's Run never succeeded"
            time.sleep(0.2)
    finally:
        os.kill(serve, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while _pid_alive(serve) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not _pid_alive(serve), "qlk serve did not stop on SIGTERM"
    # Ran exactly once: one Run, one Attempt, succeeded; the command's side effect happened once.
    assert _rows(db, "SELECT count(*) FROM runs") == [(1,)]
    attempts = _rows(db, "SELECT status FROM attempts WHERE run_id = ?", run_id)
    assert attempts == [("succeeded",)]
    assert (tmp_path / "deployed.txt").read_text() == "deployed\n"
    # The denied request never ran, and the undecided one still waits: no Run for either.
    actions = {
        str(a): str(s) for a, s in _rows(db, "SELECT action_id, status FROM approved_actions")
    }
    assert actions == {action_id: "started", denied: "denied", waiting: "pending"}
    for other in (denied_run, waiting_run):
        assert _rows(db, "SELECT count(*) FROM runs WHERE run_id = ?", other) == [(0,)]
    # `qlk status` of each says so, exit 0.
    shown = qlk_process(tmp_path, "status", run_id)
    assert shown.returncode == 0
    assert shown.stdout.startswith(f"run {run_id}: succeeded\n")
    shown = qlk_process(tmp_path, "status", waiting_run)
    assert (shown.returncode, shown.stdout) == (
        0,
        f"run {waiting_run}: awaiting approval (qlk approve {waiting})\n",
    )
    shown = qlk_process(tmp_path, "status", denied_run)
    assert shown.returncode == 0
    assert re.fullmatch(rf"run {denied_run}: denied by alice at .*; it never runs \({denied}\)\n",
                        shown.stdout)  # fmt: skip
