"""`qlk status`, `qlk logs` and `qlk cancel` on real SQLite files (issue 15 item 4): counts by
status and bounded backlogs (`runners.local.status`, decision CLI-13), one Run with its Attempts,
Events and log location and never a token digest, logs of a Run with and without a log (CLI-14),
`--follow` until the Run is terminal, and the cancellation intent's three outcomes (CLI-16).
Exit statuses are SPEC E-7's."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import logs as logs_command
from kernel import Applied, CancelReason, ConvergeCancel, RequestCancel, RunStatus
from kernel.task import TaskDefinition, define_task
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.engine import execute
from runners.local.launcher import LocalLayout
from runners.local.schedule import submit
from runners.local.status import BacklogSource, overview, run_detail, run_progress
from tests.support.qlk import one_line, qlk, qlk_process

RUN_KEYS = {
    "run_id",
    "status",
    "task",
    "task_revision",
    "created_at_ms",
    "queued_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "updated_at_ms",
    "cancel_requested_at_ms",
    "cancel_reason",
    "error_code",
    "retry_of_run_id",
}
ATTEMPT_KEYS = {
    "number",
    "attempt_id",
    "status",
    "exit_code",
    "error_code",
    "created_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "log",
}


def one_line_any(stderr: str) -> str:
    return one_line(stderr, prefix=None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ql3.db"


def json_of(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> dict[str, Any]:
    status, out, _ = qlk(capsys, db, *args, "--json")
    assert status == 0
    document: dict[str, Any] = json.loads(out)
    return document


def submitted(capsys: pytest.CaptureFixture[str], db: Path, task: str = "hello") -> str:
    status, out, _ = qlk(capsys, db, "submit", "--task", task)
    assert status == 0
    return out.strip()


@pytest.fixture
def hello(db: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The task `hello` exists."""
    assert qlk(capsys, db, "task", "add", "hello", "--", "echo", "hello")[0] == 0
    return "hello"


def cancelled_outright(db: Path, run_id: str) -> None:
    """Finish a Run the way the running application does for one that never started: the
    intent, then convergence (§1.9), through the engine."""
    store = EdgeStore(db)
    try:
        execute(store, RequestCancel(run_id, CancelReason.USER), time.time_ns() // 1_000_000)
        outcome = execute(store, ConvergeCancel(run_id), time.time_ns() // 1_000_000)
        assert isinstance(outcome, Applied)
    finally:
        store.close()


def latest_attempt(db: Path, run_id: str) -> str:
    store = EdgeStore(db)
    try:
        progress = run_progress(store, run_id)
    finally:
        store.close()
    assert progress is not None
    assert progress.latest_attempt_id is not None
    return progress.latest_attempt_id


# -- status: the overview ------------------------------------------------------------------------


def test_status_of_an_empty_database_counts_zero_everywhere(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json_of(capsys, db, "status")
    assert document["runs"] == {s.value: 0 for s in RunStatus}
    assert document["total"] == 0
    assert document["runs_capped"] == []
    assert set(document["backlog"]) == {s.value for s in BacklogSource}
    for backlog in document["backlog"].values():
        assert backlog == {
            "count": 0,
            "capped": False,
            "oldest_at_ms": None,
            "oldest_age_ms": None,
        }


def test_status_counts_runs_by_status_and_the_backlogs(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [submitted(capsys, db) for _ in range(4)]
    assert qlk(capsys, db, "cancel", runs[0])[0] == 0  # an intent: out of the dispatch backlog
    cancelled_outright(db, runs[1])
    document = json_of(capsys, db, "status")
    assert document["runs"]["queued"] == 3
    assert document["runs"]["cancelled"] == 1
    assert document["total"] == 4
    backlog = document["backlog"]
    assert backlog["dispatch"]["count"] == 2
    assert backlog["cancelling"]["count"] == 1
    assert backlog["running"]["count"] == backlog["lost"]["count"] == 0
    assert backlog["dispatch"]["oldest_age_ms"] >= 0
    status, out, _ = qlk(capsys, db, "status")
    assert status == 0
    assert out.startswith("4 runs at ")
    assert "| queued      |    3 |" in out
    assert "| cancelled   |    1 |" in out
    assert "| dispatch   |       2 |" in out


def test_the_overview_is_bounded_and_ages_are_from_the_observation_time(db: Path) -> None:
    """CLI-13: a count stops after `cap` (and says so); the oldest item's age is measured from
    the time passed in (the kernel's time-as-input rule, read by the CLI at its edge)."""
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        definition = define_task("tick", ["true"], cron="* * * * *")
        assert isinstance(definition, TaskDefinition)
        assert isinstance(tasks.add(definition, 0), TaskWrite)
        for n in range(3):
            outcome = submit(
                store, tasks, "tick", now_ms=1_000 + n, run_id=f"r-{n}", attempt_id=f"a-{n}"
            )
            assert isinstance(outcome, Applied)
        exact = overview(store, 181_000)
        capped = overview(store, 181_000, cap=2)
    finally:
        store.close()
    queued = {c.status: c for c in exact.counts}[RunStatus.QUEUED]
    assert (queued.count, queued.capped) == (3, False)
    dispatch = {b.source: b for b in exact.backlogs}[BacklogSource.DISPATCH]
    assert (dispatch.count, dispatch.oldest_at_ms) == (3, 1_000)
    assert dispatch.oldest_age_ms(181_000) == 180_000
    schedule = {b.source: b for b in exact.backlogs}[BacklogSource.SCHEDULE]
    assert (schedule.count, schedule.oldest_at_ms) == (1, 60_000)  # due since the first minute
    queued = {c.status: c for c in capped.counts}[RunStatus.QUEUED]
    assert (queued.count, queued.capped) == (2, True)
    assert capped.capped
    dispatch = {b.source: b for b in capped.backlogs}[BacklogSource.DISPATCH]
    assert (dispatch.count, dispatch.capped) == (2, True)
    store = EdgeStore(db)
    try:
        with pytest.raises(ValueError, match="cap"):
            overview(store, 0, cap=0)
    finally:
        store.close()


# -- status: one Run -------------------------------------------------------------------------------


def test_status_of_a_run_shows_attempts_events_and_the_log_location(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    document = json_of(capsys, db, "status", run_id)
    assert set(document) == {"run", "attempts", "events", "events_truncated", "log", "log_exists"}
    assert set(document["run"]) == RUN_KEYS
    [attempt] = document["attempts"]
    assert set(attempt) == ATTEMPT_KEYS
    log = LocalLayout(db).log_path(attempt["attempt_id"])
    assert document["log"] == attempt["log"] == str(log)
    assert document["log_exists"] is False
    assert [(e["seq"], e["type"]) for e in document["events"]] == [
        (1, "run.queued"),
        (2, "attempt.claimed"),
    ]
    assert set(document["events"][0]) == {"seq", "type", "actor", "at_ms", "attempt_id", "code"}
    status, out, _ = qlk(capsys, db, "status", run_id)
    assert status == 0
    assert out.splitlines()[0] == f"run {run_id}: queued"
    assert "hello (revision 1)" in out
    assert f"{log} (not written yet)" in out
    assert attempt["attempt_id"] in out
    assert "| 2   | attempt.claimed | user  |" in out


@pytest.mark.spec("E-7")
def test_status_of_an_unknown_run_exits_2_naming_it(tmp_path: Path) -> None:
    done = qlk_process(tmp_path, "status", "run-nope")
    assert (done.returncode, done.stdout) == (2, "")
    assert one_line_any(done.stderr) == "qlk: RUN run-nope: no such run [RUN_NOT_FOUND]"


# -- cancel ----------------------------------------------------------------------------------------


def test_cancel_of_a_queued_run_records_the_intent(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    status, out, err = qlk(capsys, db, "cancel", run_id)
    assert (status, err) == (0, "")
    assert out.startswith(f"{run_id}: cancellation requested (user); ")
    assert "qlk serve" in out
    assert "finishes it as cancelled" in out
    document = json_of(capsys, db, "status", run_id)
    assert document["run"]["status"] == "queued"  # the intent only: the application finishes it
    assert document["run"]["cancel_reason"] == "user"
    assert isinstance(document["run"]["cancel_requested_at_ms"], int)
    assert document["events"][-1]["type"] == "run.cancel_requested"
    assert document["events"][-1]["actor"] == "user"
    status, out, _ = qlk(capsys, db, "cancel", run_id)
    assert status == 0
    assert out.startswith(f"{run_id}: cancellation already requested at ")
    assert len(json_of(capsys, db, "status", run_id)["events"]) == 3  # nothing appended


def test_cancel_with_reason_timeout_ends_timed_out(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    status, out, _ = qlk(capsys, db, "cancel", run_id, "--reason", "timeout")
    assert status == 0
    assert "(timeout)" in out
    assert "finishes it as timed_out" in out
    assert json_of(capsys, db, "status", run_id)["run"]["cancel_reason"] == "timeout"


def test_cancel_of_a_terminal_run_says_so(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    cancelled_outright(db, run_id)
    status, out, _ = qlk(capsys, db, "cancel", run_id)
    assert (status, out) == (0, f"{run_id}: already cancelled; nothing to cancel\n")


@pytest.mark.spec("E-7")
@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["cancel", "run-nope"], "qlk: RUN run-nope: no such run [RUN_NOT_FOUND]"),
        (["cancel", "not a run id"], "qlk: RUN not a run id: no such run [RUN_NOT_FOUND]"),
        (["cancel", "run-x", "--reason", "shutdown"], "qlk: argument --reason: invalid choice"),
        (["logs", "run-nope"], "qlk: RUN run-nope: no such run [RUN_NOT_FOUND]"),
        (["logs", "run-nope", "--follow"], "qlk: RUN run-nope: no such run [RUN_NOT_FOUND]"),
    ],
)
def test_unknown_runs_and_bad_reasons_exit_2(
    db: Path, capsys: pytest.CaptureFixture[str], args: list[str], start: str
) -> None:
    status, out, err = qlk(capsys, db, *args)
    assert (status, out) == (2, "")
    assert one_line_any(err).startswith(start)


# -- logs ------------------------------------------------------------------------------------------


@pytest.mark.spec("E-7")
def test_logs_of_a_run_without_a_log_is_a_note_and_exit_0(tmp_path: Path) -> None:
    """CLI-14: a queued Run has no log yet; that is not an error."""
    assert qlk_process(tmp_path, "task", "add", "hello", "--", "true").returncode == 0
    run_id = qlk_process(tmp_path, "submit", "--task", "hello").stdout.strip()
    done = qlk_process(tmp_path, "logs", run_id)
    assert (done.returncode, done.stdout) == (0, "")
    assert one_line_any(done.stderr) == (
        f"qlk logs: run {run_id} is queued and its latest Attempt has not written a log yet"
    )


def test_logs_prints_the_latest_attempts_file(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    log = LocalLayout(db).log_path(latest_attempt(db, run_id))
    log.parent.mkdir(parents=True)
    log.write_bytes(b"hello\ncaf\xc3\xa9 \xff\n")
    status, out, err = qlk(capsys, db, "logs", run_id)
    assert (status, err) == (0, "")
    assert out == "hello\ncafé \ufffd\n"  # bytes that are not UTF-8 are shown as U+FFFD


def test_logs_follow_prints_appends_until_the_run_is_terminal(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_command, "POLL_S", 0.01)
    run_id = submitted(capsys, db)
    log = LocalLayout(db).log_path(latest_attempt(db, run_id))
    log.parent.mkdir(parents=True)
    written = threading.Event()

    def child() -> None:
        """What a running command and then the application do: write, write, end the Run."""
        time.sleep(0.1)  # `--follow` starts before the log exists
        with log.open("ab") as file:
            for n in range(3):
                file.write(f"line {n}\n".encode())
                file.flush()
                time.sleep(0.05)
        written.set()
        cancelled_outright(db, run_id)

    writer = threading.Thread(target=child)
    writer.start()
    try:
        status, out, err = qlk(capsys, db, "logs", run_id, "--follow")
    finally:
        writer.join(timeout=60)
    assert written.is_set()
    assert (status, err) == (0, "")
    assert out == "line 0\nline 1\nline 2\n"


def test_logs_follow_of_a_run_that_ended_without_a_log(
    db: Path, hello: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = submitted(capsys, db)
    cancelled_outright(db, run_id)
    status, out, err = qlk(capsys, db, "logs", run_id, "--follow")
    assert (status, out) == (0, "")
    assert one_line_any(err) == f"qlk logs: run {run_id} ended cancelled without writing a log"


# -- end to end, with the running application ----------------------------------------------


@pytest.mark.slow  # a real `qlk serve` process and a real child (~5 s)
def test_a_run_served_end_to_end_shows_success_its_log_and_no_digest(tmp_path: Path) -> None:
    command = ["sh", "-c", "echo out; echo err >&2"]
    assert qlk_process(tmp_path, "task", "add", "hello", "--", *command).returncode == 0
    run_id = qlk_process(tmp_path, "submit", "--task", "hello").stdout.strip()
    served = qlk_process(tmp_path, "serve", "--until-idle")
    assert served.returncode == 0, served.stderr
    shown = qlk_process(tmp_path, "status", run_id, "--json")
    document = json.loads(shown.stdout)
    assert document["run"]["status"] == "succeeded"
    [attempt] = document["attempts"]
    assert (attempt["status"], attempt["exit_code"]) == ("succeeded", 0)
    assert document["log_exists"] is True
    logs = qlk_process(tmp_path, "logs", run_id)
    assert (logs.returncode, logs.stderr) == (0, "")
    assert sorted(logs.stdout.splitlines()) == ["err", "out"]
    followed = qlk_process(tmp_path, "logs", "--follow", run_id)
    assert followed.stdout == logs.stdout
    store = EdgeStore(tmp_path / "ql3.db")
    try:
        projection = store.project()
        detail = run_detail(store, run_id)
    finally:
        store.close()
    assert detail is not None
    digests = [a["callback_token_sha256"] for a in projection["attempts"]]
    assert all(isinstance(d, str) and len(d) == 64 for d in digests)
    human = qlk_process(tmp_path, "status", run_id).stdout
    for digest in digests:
        assert digest not in shown.stdout
        assert digest not in human
