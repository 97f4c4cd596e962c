"""`qlk submit` on real SQLite files (issue 15 item 4): the Run id alone on stdout (so that
`RUN=$(qlk submit --task hello)` works), the Run `queued` as `qlk status RUN --json` shows it,
ad-hoc commands as implicit tasks (TK-5), fresh portable ids (decision CLI-11), and refusals as
one line naming the flag (SPEC E-7: exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.submit import fresh_ids
from kernel import is_portable_id
from tests.support.qlk import one_line, qlk, qlk_process

RUN_ID = re.compile(r"run-[0-9a-f]{32}")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ql3.db"


def status_of(capsys: pytest.CaptureFixture[str], db: Path, run_id: str) -> dict[str, Any]:
    code, out, _ = qlk(capsys, db, "status", run_id, "--json")
    assert code == 0
    document: dict[str, Any] = json.loads(out)
    return document


def counts(capsys: pytest.CaptureFixture[str], db: Path) -> dict[str, int]:
    code, out, _ = qlk(capsys, db, "status", "--json")
    assert code == 0
    runs: dict[str, int] = json.loads(out)["runs"]
    return runs


@pytest.mark.spec("E-7")
def test_submit_prints_the_run_id_alone_and_the_run_is_queued(tmp_path: Path) -> None:
    """As a shell uses it: `RUN=$(qlk submit --task hello)`, then `qlk status $RUN --json`."""
    assert qlk_process(tmp_path, "task", "add", "hello", "--", "echo", "hello").returncode == 0
    done = qlk_process(tmp_path, "submit", "--task", "hello")
    assert (done.returncode, done.stderr) == (0, "")
    run_id = done.stdout.removesuffix("\n")
    assert "\n" not in run_id
    assert RUN_ID.fullmatch(run_id)
    assert is_portable_id(run_id)
    shown = qlk_process(tmp_path, "status", run_id, "--json")
    assert shown.returncode == 0
    document = json.loads(shown.stdout)
    assert document["run"]["run_id"] == run_id
    assert document["run"]["status"] == "queued"
    assert (document["run"]["task"], document["run"]["task_revision"]) == ("hello", 1)
    [attempt] = document["attempts"]
    assert attempt["number"] == 1
    assert attempt["status"] == "claimed"
    assert re.fullmatch(r"att-[0-9a-f]{32}", attempt["attempt_id"])
    assert [e["actor"] for e in document["events"]] == ["user", "user"]


def test_each_submission_is_a_new_run(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    runs = {qlk(capsys, db, "submit", "--task", "hello")[1].strip() for _ in range(3)}
    assert len(runs) == 3
    assert counts(capsys, db)["queued"] == 3


def test_an_adhoc_command_runs_as_its_implicit_task(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TK-5: the same command (argv, cwd, env, deadline) is the same task `adhoc:<16 hex>`
    and revision; each submission is its own Run."""
    (tmp_path / "sub").mkdir()
    args = ["--cwd", str(tmp_path / "sub"), "--env", "A=1", "--deadline", "1m"]
    command = ["--", "sh", "-c", "echo $A", "--", "x"]
    status, first, err = qlk(capsys, db, "submit", *args, *command)
    assert (status, err) == (0, "")
    second = qlk(capsys, db, "submit", *args, *command)[1]
    other = qlk(capsys, db, "submit", "--", "echo", "other")[1]
    runs = [status_of(capsys, db, line.strip())["run"] for line in (first, second, other)]
    assert len({r["run_id"] for r in runs}) == 3
    assert all(r["status"] == "queued" for r in runs)
    assert re.fullmatch(r"adhoc:[0-9a-f]{16}", runs[0]["task"])
    assert runs[0]["task"] == runs[1]["task"] != runs[2]["task"]
    assert [r["task_revision"] for r in runs] == [1, 1, 1]
    # ad-hoc tasks stay out of `task list`
    status, out, _ = qlk(capsys, db, "task", "list", "--json")
    assert (status, json.loads(out)) == (0, [])


@pytest.mark.spec("E-7")
def test_an_unknown_task_exits_2_in_one_line_and_admits_nothing(tmp_path: Path) -> None:
    done = qlk_process(tmp_path, "submit", "--task", "nope")
    assert (done.returncode, done.stdout) == (2, "")
    assert one_line(done.stderr) == "qlk: --task nope: no such task [TASK_NOT_FOUND]"
    shown = qlk_process(tmp_path, "status", "--json")
    assert json.loads(shown.stdout)["total"] == 0


def test_a_removed_task_is_refused(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    assert qlk(capsys, db, "task", "remove", "hello")[0] == 0
    status, out, err = qlk(capsys, db, "submit", "--task", "hello")
    assert (status, out) == (2, "")
    assert one_line(err).startswith("qlk: --task hello: the task was removed")
    assert one_line(err).endswith("[TASK_REMOVED]")
    assert sum(counts(capsys, db).values()) == 0


@pytest.mark.spec("E-7")
@pytest.mark.parametrize(
    ("args", "start"),
    [
        ([], "qlk: give exactly one of --task NAME and -- CMD"),
        (["--task", "hello", "--", "echo"], "qlk: give exactly one of --task NAME and -- CMD"),
        (["--task", "hello", "--cwd", "/"], "qlk: --cwd, --env and --deadline go with -- CMD"),
        (["--task", "hello", "--deadline", "1m"], "qlk: --cwd, --env and --deadline go with"),
        (["--", ""], "qlk: CMD: "),
        (["--deadline", "0s", "--", "true"], "qlk: --deadline 0s: a deadline is 1s to 7d"),
        (["--deadline", "soon", "--", "true"], "qlk: --deadline soon: not a duration"),
        (["--env", "X", "--", "true"], "qlk: --env: expected NAME=VALUE"),
        (["--cwd", "/nonexistent/dir", "--", "true"], "qlk: --cwd /nonexistent/dir: "),
    ],
)
def test_bad_submissions_exit_2_with_one_line(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], start: str
) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    status, out, err = qlk(capsys, db, "submit", *args)
    assert (status, out) == (2, "")
    assert one_line(err).startswith(start)
    assert sum(counts(capsys, db).values()) == 0


def test_fresh_ids_are_portable_distinct_and_say_what_they_are() -> None:
    """CLI-11: `run-`/`att-` and 32 hex, 36 characters (the portable maximum), never a
    scheduled fire's `fr:`/`fa:` prefix."""
    drawn = [fresh_ids() for _ in range(200)]
    ids = [i for pair in drawn for i in pair]
    assert len(set(ids)) == len(ids)
    for run_id, attempt_id in drawn:
        assert is_portable_id(run_id)
        assert is_portable_id(attempt_id)
        assert len(run_id) == len(attempt_id) == 36
        assert run_id.startswith("run-")
        assert attempt_id.startswith("att-")
