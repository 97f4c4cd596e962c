"""`qlk task add|list|remove` on real SQLite files (issue 15 item 4): the round trip, identical
re-adds, refusals as one line naming the flag (SPEC E-7: exit 2, no traceback), the retry policy
flags (A-3, A-4), `--cwd` made absolute (TK-2), environment values never printed, and the
duration syntax (`conformance/cli/durations.py`, decision CLI-12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.durations import (
    DurationError,
    format_duration,
    format_time,
    iso_time,
    parse_duration,
)
from tests.support.qlk import one_line, qlk, qlk_process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ql3.db"


def listed(capsys: pytest.CaptureFixture[str], db: Path) -> list[dict[str, Any]]:
    status, out, _ = qlk(capsys, db, "task", "list", "--json")
    assert status == 0
    documents: list[dict[str, Any]] = json.loads(out)
    return documents


# -- the round trip ------------------------------------------------------------------------------


def test_add_list_remove_round_trip(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "echo", "hello") == (
        0,
        "added hello revision 1\n",
        "",
    )
    [task] = listed(capsys, db)
    assert task["name"] == "hello"
    assert task["revision"] == 1
    assert task["state"] == "active"
    assert task["argv"] == ["echo", "hello"]
    assert task["cron"] is None
    assert task["retry_policy"] is None
    status, out, _ = qlk(capsys, db, "task", "list")
    assert status == 0
    assert "| hello | 1   | active |" in out
    assert "echo hello" in out
    assert qlk(capsys, db, "task", "remove", "hello") == (0, "removed hello\n", "")
    [task] = listed(capsys, db)
    assert task["state"] == "removed"
    assert task["removed_at_ms"] is not None
    status, out, _ = qlk(capsys, db, "task", "list")
    assert "| removed |" in out


def test_list_of_an_empty_database(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert listed(capsys, db) == []
    status, out, _ = qlk(capsys, db, "task", "list")
    assert status == 0
    assert out.startswith("no tasks")


def test_identical_re_add_is_unchanged_and_an_edit_is_the_next_revision(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "echo", "hi")[1] == (
        "added hello revision 1\n"
    )
    assert qlk(capsys, db, "task", "add", "hello", "--", "echo", "hi") == (
        0,
        "hello unchanged (revision 1)\n",
        "",
    )
    assert qlk(capsys, db, "task", "add", "hello", "--", "echo", "bye")[1] == "hello revision 2\n"
    assert qlk(capsys, db, "task", "remove", "hello")[0] == 0
    status, out, _ = qlk(capsys, db, "task", "add", "hello", "--", "echo", "bye")
    assert status == 0
    assert out == "hello revision 3 (added again after its removal)\n"
    [task] = listed(capsys, db)
    assert (task["revision"], task["state"], task["argv"]) == (3, "active", ["echo", "bye"])


def test_a_cron_task_shows_its_next_fire(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = qlk(capsys, db, "task", "add", "tick", "--cron", "*/5  * * * *", "--", "true")
    assert status == 0
    first, second = out.splitlines()
    assert first == "added tick revision 1"
    [task] = listed(capsys, db)
    assert task["cron"] == "*/5 * * * *"  # the stored form (TK-3)
    due = task["next_due_ms"]
    assert isinstance(due, int)
    assert due % 300_000 == 0
    assert second == f"tick next runs at {format_time(due)}"
    assert task["next_due"] == iso_time(due)


def test_the_command_after_the_first_double_dash_is_kept_verbatim(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Options after NAME, then `--`: everything after it is the command, a second `--` and
    option-looking words included (argparse alone would lose it)."""
    argv = ["sh", "-c", "echo $0", "--", "--cron", "--debug"]
    status, _, err = qlk(capsys, db, "task", "add", "t", "--cron", "0 3 * * *", "--", *argv)
    assert (status, err) == (0, "")
    [task] = listed(capsys, db)
    assert task["argv"] == argv
    assert task["cron"] == "0 3 * * *"


# -- refusals: exit 2, one line naming the flag --------------------------------------------------


@pytest.mark.spec("E-7")
@pytest.mark.parametrize("cron", ["61 * * * *", "@daily", "* * * *", "0 0 31 2 *"])
def test_a_bad_cron_exits_2_naming_the_flag_in_one_line(tmp_path: Path, cron: str) -> None:
    """Shape refusals (the kernel: `@daily`, 4 fields) and meaning refusals (croniter: minute
    61; `31 Feb` never fires) are the same exit 2 and code, and nothing is written."""
    db = tmp_path / "ql3.db"
    done = qlk_process(tmp_path, "task", "add", "bad", "--cron", cron, "--", "true", db=db)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith(f"qlk: --cron {cron!r}: ")
    assert line.endswith("[TASK_CRON_INVALID]")
    assert done.stdout == ""
    listing = qlk_process(tmp_path, "task", "list", "--json", db=db)
    assert (listing.returncode, json.loads(listing.stdout)) == (0, [])


@pytest.mark.spec("E-7")
@pytest.mark.parametrize("safety", [[], ["--safety", "unknown"]])
def test_an_unsafe_retry_policy_is_refused(tmp_path: Path, safety: list[str]) -> None:
    """A-4: retry enabled (`--max-attempts 3`) with `unknown` safety is refused when written."""
    db = tmp_path / "ql3.db"
    args = ["task", "add", "sync", "--max-attempts", "3", *safety, "--", "./sync.sh"]
    done = qlk_process(tmp_path, *args, db=db)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("qlk: --safety unknown: ")
    assert line.endswith("[RUN_RETRY_POLICY_UNSAFE]")


def test_a_safe_retry_policy_is_stored(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--max-attempts", "3", "--safety", "idempotent", "--backoff", "10s:5m"]
    assert qlk(capsys, db, "task", "add", "sync", *args, "--", "./sync.sh")[0] == 0
    [task] = listed(capsys, db)
    assert task["retry_policy"] == {
        "max_attempts": 3,
        "retry_on_lost": True,
        "safety": "idempotent",
        "backoff_base_ms": 10_000,
        "backoff_max_ms": 300_000,
    }
    status, out, _ = qlk(capsys, db, "task", "list")
    assert status == 0
    assert "3x idempotent 10s:5m" in out


@pytest.mark.spec("E-7")
@pytest.mark.parametrize(
    ("flags", "start", "code"),
    [
        (["--max-attempts", "17", "--safety", "idempotent"], "--max-attempts 17", "INVALID"),
        (
            ["--max-attempts", "2", "--safety", "deduplicated", "--backoff", "5m:10s"],
            "--max",
            "INV",
        ),
        (["--max-attempts", "2", "--backoff", "25h:25h", "--safety", "idempotent"], "--max", "INV"),
        (["--safety", "idempotent"], "--safety and --backoff", None),
        (["--backoff", "1s:2s"], "--safety and --backoff", None),
        (["--max-attempts", "2", "--backoff", "10s"], "--backoff 10s: give BASE:MAX", None),
        (["--max-attempts", "two"], "argument --max-attempts", None),
        (["--safety", "maybe"], "argument --safety", None),
    ],
)
def test_bad_retry_flags_exit_2_naming_the_flag(
    db: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    start: str,
    code: str | None,
) -> None:
    status, out, err = qlk(capsys, db, "task", "add", "t", *flags, "--", "true")
    assert (status, out) == (2, "")
    line = one_line(err)
    assert line.startswith(f"qlk: {start}")
    if code is not None:
        assert "[INVALID_RUN_RETRY_POLICY]" in line
    assert listed(capsys, db) == []


@pytest.mark.spec("E-7")
@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["task", "add", "hello"], "qlk: CMD: give the command after --"),
        (["task", "add", "hello", "--"], "qlk: CMD: give the command after --"),
        (["task", "add", "hello", "--", ""], "qlk: CMD: "),
        (["task", "add", "bad:name", "--", "true"], "qlk: NAME 'bad:name': not a task name"),
        (["task", "add", "t", "--deadline", "30", "--", "true"], "qlk: --deadline 30: "),
        (["task", "add", "t", "--deadline", "8d", "--", "true"], "qlk: --deadline 8d: "),
        (["task", "add", "t", "--env", "NOEQUALS", "--", "true"], "qlk: --env: expected"),
        (["task", "add", "t", "--env", "A=1", "--env", "A=2", "--", "true"], "qlk: --env: A is"),
        (["task", "add", "t", "--env", "1A=x", "--", "true"], "qlk: --env: each --env"),
        (["task", "add", "t", "--cwd", "/nonexistent/dir", "--", "true"], "qlk: --cwd /nonex"),
        (["task", "remove", "nope"], "qlk: NAME 'nope': no such task [TASK_NOT_FOUND]"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], start: str
) -> None:
    status, out, err = qlk(capsys, db, *args)
    assert (status, out) == (2, "")
    assert one_line(err).startswith(start)


def test_a_refusal_never_prints_an_environment_value(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--env", "TOKEN=hunter2-secret", "--env", "1BAD=hunter2-secret"]
    status, _, err = qlk(capsys, db, "task", "add", "t", *args, "--", "true")
    assert status == 2
    assert "hunter2" not in err
    status, _, err = qlk(capsys, db, "task", "add", "t", "--env", "hunter2-secret", "--", "true")
    assert status == 2
    assert "hunter2" not in err


def test_removing_twice_is_refused(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    assert qlk(capsys, db, "task", "remove", "hello")[0] == 0
    status, _, err = qlk(capsys, db, "task", "remove", "hello")
    assert status == 2
    assert one_line(err) == "qlk: NAME 'hello': the task is already removed [TASK_REMOVED]"


def test_environment_values_are_never_listed(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--env", "API_TOKEN=hunter2-secret", "--env", "MODE=full"]
    assert qlk(capsys, db, "task", "add", "t", *args, "--", "true")[0] == 0
    [task] = listed(capsys, db)
    assert task["env_names"] == ["API_TOKEN", "MODE"]
    assert "hunter2" not in json.dumps(task)
    _, out, _ = qlk(capsys, db, "task", "list")
    assert "hunter2" not in out


def test_a_relative_cwd_is_made_absolute(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TK-2: the kernel stores absolute directories; the CLI resolves a relative one."""
    (tmp_path / "work" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work")
    assert qlk(capsys, db, "task", "add", "t", "--cwd", "sub/../sub", "--", "true")[0] == 0
    [task] = listed(capsys, db)
    assert task["cwd"] == str(tmp_path / "work" / "sub")


# -- the database setting and file -----------------------------------------------------------------


@pytest.mark.spec("E-7")
def test_a_file_that_is_not_a_database_exits_2_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n" * 200, encoding="utf-8")
    done = qlk_process(tmp_path, "task", "list", db=bad)
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(f"qlk: {bad}: not a SQLite database")


def test_the_database_comes_from_ql3_db_or_the_working_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "QL3_DB"}
    env["PYTHONPATH"] = str(ROOT)
    add = [sys.executable, "-m", "conformance.cli", "task", "add", "here", "--", "true"]
    done = subprocess.run(add, cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert done.stdout == "added here revision 1\n"
    assert (tmp_path / "ql3.db").is_file()
    other = tmp_path / "other.db"
    done = subprocess.run(
        add,
        cwd=tmp_path,
        env={**env, "QL3_DB": str(other)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "added here revision 1\n"  # a new database: revision 1 again
    assert other.is_file()


# -- durations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0", 0),
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        ("1d2h3m4s5ms", 93_784_005),
    ],
)
def test_durations_parse_and_format_back(text: str, ms: int) -> None:
    assert parse_duration(text) == ms
    assert parse_duration(format_duration(ms)) == ms
    assert format_duration(ms) == text


@pytest.mark.parametrize(
    "text", ["", "30", "5 m", "1.5h", "m", "5w", "30m1h", "1h1h", "-5s", "1s "]
)
def test_not_durations_are_refused(text: str) -> None:
    with pytest.raises(DurationError, match="not a duration"):
        parse_duration(text)
