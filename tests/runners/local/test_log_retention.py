"""Attempt log retention in the local application's slow-cycle cleanup (SPEC CAD-02: "only on
slow cycles, receipt and log cleanup"; Appendix D-1, O-2 step 4; decision LR-13).

Real SQLite files and real log files: Attempts are brought to each status through the kernel's
own commands on the application's store (`execute`), their logs are files in the application's
`logs/` directory, and one test runs a real child through `LocalApplication` end to end (kept
while it runs, however far the clock moves; deleted the retention after it was stopped). The
execution-control cycle is called with a clock the test sets, so "old" and "young" are exact.
The kernel's `log_cleanup_allowed` decides: replacing it changes what the runner deletes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel import (
    ActivateLocal,
    Actor,
    Applied,
    AttemptStatus,
    CancelReason,
    CompleteLocal,
    CompletionOutcome,
    LocalReceipt,
    NotRunningEvidence,
    RecordLocalHandle,
    RecoverLocalStartup,
    RequestCancel,
    log_cleanup_allowed,
)
from kernel.specs import (
    LOG_CLEANUP_PAGE,
    LOG_RETENTION_DEFAULT_MS,
    LOG_RETENTION_MS,
    BudgetError,
    LocalControlPhase,
    Profile,
)
from kernel.task import LOCAL_EXECUTOR_TYPE
from runners.engine import execute
from runners.lifecycle import CycleContext, CycleReport
from runners.local import control as control_module
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.control import ControlReport, LocalExecutionControl
from runners.local.reads import attempt_finish
from runners.local.schedule import submit
from runners.local.scheduler import SchedulerReport
from tests.support.local_app import Stepped, add_task, until
from tests.support.qlk import one_line, qlk

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
RETENTION = 2 * DAY
DIGEST = "ab" * 32


class Clock:
    """The cycle's clock, set by the test."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def app(tmp_path: Path) -> Iterator[LocalApplication]:
    made = LocalApplication(tmp_path / "ql3.db", Profile.EDGE, schedulers=Stepped())
    add_task(made, "work", ["true"])
    yield made
    made.stop()


def _every_nth(app: LocalApplication) -> int:
    slow = app.budget.execution_control_slow_cleanup
    assert slow is not None
    return slow.every_nth_cycle


def _control(
    app: LocalApplication, clock: Clock, retention_ms: int = RETENTION
) -> LocalExecutionControl:
    return LocalExecutionControl(
        app.store, app.launcher, app.budget, clock, log_retention_ms=retention_ms
    )


def _slow(app: LocalApplication, cycle: LocalExecutionControl) -> ControlReport:
    report = cycle(CycleContext(_every_nth(app), lambda: False))
    assert LocalControlPhase.CLEANUP in report.phases
    return report


def _attempt(app: LocalApplication, attempt_id: str, status: AttemptStatus | None, at: int) -> str:
    """An Attempt `attempt_id` brought to `status` through the kernel's commands (ended at `at`
    when terminal), and its log file; `status=None`: a log of no Attempt in the database."""
    log = app.layout.log_path(attempt_id)
    log.write_text(f"output of {attempt_id}\n")
    if status is None:
        return attempt_id
    run_id = f"run-{attempt_id}"
    admitted = submit(
        app.store, app.tasks, "work", now_ms=at - 3, run_id=run_id, attempt_id=attempt_id
    )
    assert isinstance(admitted, Applied), admitted
    steps: list[object] = []
    if status is not AttemptStatus.CLAIMED:
        steps.append(ActivateLocal(run_id, attempt_id, LOCAL_EXECUTOR_TYPE, 1, DIGEST))
    if status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING, AttemptStatus.LOST):
        steps.append(RecordLocalHandle(run_id, attempt_id, "pid:1", at - 2))
    if status is AttemptStatus.LOST:
        steps.append(RecoverLocalStartup(run_id, attempt_id, NotRunningEvidence()))
    elif status.terminal:
        outcome = CompletionOutcome(status.value)
        receipt = LocalReceipt(run_id, attempt_id, 1, DIGEST, outcome, at - 2, 0)
        steps.append(CompleteLocal(run_id, attempt_id, receipt))
    for step in steps:
        done = execute(app.store, step, at)  # type: ignore[arg-type]
        assert done.kind.value == "applied", (step, done)
    found = attempt_finish(app.store, attempt_id)
    assert found is not None
    assert found[0] is status
    assert found[1] == (at if status.terminal else None)
    return attempt_id


def _status(app: LocalApplication, attempt_id: str) -> AttemptStatus | None:
    found = attempt_finish(app.store, attempt_id)
    return None if found is None else found[0]


def _logs(app: LocalApplication) -> set[str]:
    return {p.name.removesuffix(".log") for p in app.layout.logs.iterdir()}


# -- what is deleted -------------------------------------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_a_slow_cycle_deletes_old_logs_of_settled_attempts_only(app: LocalApplication) -> None:
    """Settled and ended at least the retention ago: deleted. Settled but younger: kept until it
    is old enough. `claimed`/`starting`/`running`: kept whatever the clock says. A log of no
    Attempt in the database: kept (LR-13, fail closed)."""
    base = wall_clock_ms()
    old = {
        _attempt(app, "old-ok", AttemptStatus.SUCCEEDED, base),
        _attempt(app, "old-failed", AttemptStatus.FAILED, base),
        _attempt(app, "old-lost", AttemptStatus.LOST, base),
    }
    young = _attempt(app, "young-ok", AttemptStatus.SUCCEEDED, base + RETENTION)
    live = {
        _attempt(app, "live-running", AttemptStatus.RUNNING, base),
        _attempt(app, "live-starting", AttemptStatus.STARTING, base),
        _attempt(app, "live-claimed", AttemptStatus.CLAIMED, base),
    }
    orphan = _attempt(app, "orphan", None, base)
    clock = Clock(base + RETENTION)
    cycle = _control(app, clock)

    report = _slow(app, cycle)
    assert report.logs_deleted == len(old)
    assert report.errors == []
    assert _logs(app) == {young, orphan, *live}

    clock.now_ms = base + 2 * RETENTION - 1  # one millisecond short for the young one
    assert _slow(app, cycle).logs_deleted == 0
    clock.now_ms = base + 2 * RETENTION
    assert _slow(app, cycle).logs_deleted == 1
    assert _logs(app) == {orphan, *live}

    clock.now_ms = base + 365 * DAY  # a year on: the live Attempts and the orphan keep theirs
    assert _slow(app, cycle).logs_deleted == 0
    assert _logs(app) == {orphan, *live}


@pytest.mark.spec("CAD-02")
def test_only_slow_cycles_delete_logs(app: LocalApplication) -> None:
    base = wall_clock_ms()
    ended = {_attempt(app, f"done-{i}", AttemptStatus.SUCCEEDED, base) for i in range(3)}
    cycle = _control(app, Clock(base + 10 * RETENTION))
    every = _every_nth(app)
    for ordinal in range(1, every):
        report = cycle(CycleContext(ordinal, lambda: False))
        assert LocalControlPhase.CLEANUP not in report.phases
        assert report.logs_deleted == 0
        assert _logs(app) == ended
    report = cycle(CycleContext(every, lambda: False))
    assert LocalControlPhase.CLEANUP in report.phases
    assert report.logs_deleted == 3
    assert _logs(app) == set()


@pytest.mark.spec("CAD-02", "CAD-12")
def test_log_pages_resume_across_slow_cycles_until_every_old_log_is_gone(
    app: LocalApplication,
) -> None:
    """One page of `LOG_CLEANUP_PAGE` logs per slow cycle, resuming after the last name: live
    Attempts' logs early in the name order do not hold back the old ones behind them, and after
    the last page the next slow cycle starts over (a log that became old is then found)."""
    base = wall_clock_ms()
    live = {_attempt(app, f"a-{i:02d}", AttemptStatus.RUNNING, base) for i in range(20)}
    old = [_attempt(app, f"b-{i:02d}", AttemptStatus.SUCCEEDED, base) for i in range(30)]
    young = _attempt(app, "c-young", AttemptStatus.FAILED, base + RETENTION)
    clock = Clock(base + RETENTION)
    cycle = _control(app, clock)
    names = sorted(live | set(old) | {young})

    deleted: list[int] = []
    while len(deleted) < 4:
        deleted.append(_slow(app, cycle).logs_deleted)
    # Pages of 16 by name: a-00..a-15 | a-16..a-19, b-00..b-11 | b-12..b-27 | b-28, b-29, c-young.
    assert LOG_CLEANUP_PAGE == 16
    pages = [names[i : i + LOG_CLEANUP_PAGE] for i in range(0, len(names), LOG_CLEANUP_PAGE)]
    assert deleted == [sum(1 for n in page if n.startswith("b-")) for page in pages]
    assert deleted == [0, 12, 16, 2]
    assert _logs(app) == live | {young}

    clock.now_ms = base + 2 * RETENTION  # the young one is old now: the next pass finds it
    passes = [_slow(app, cycle).logs_deleted for _ in range(2)]
    assert passes == [0, 1]  # the first page starts over at a-00, the second reaches c-young
    assert _logs(app) == live
    assert all(n <= LOG_CLEANUP_PAGE for n in deleted + passes)


@pytest.mark.spec("CAD-02")
def test_receipts_and_logs_are_cleaned_on_the_same_slow_cycle(app: LocalApplication) -> None:
    """Step 4 is receipt and log cleanup: the receipt page and the log page are both read."""
    base = wall_clock_ms()
    _attempt(app, "done", AttemptStatus.SUCCEEDED, base)
    read: list[str] = []
    receipt_ids, log_ids = app.launcher.receipt_ids, app.launcher.log_ids

    def receipts(limit: int, after: str | None = None) -> list[str]:
        read.append("receipts")
        return receipt_ids(limit, after)

    def logs(limit: int, after: str | None = None) -> list[str]:
        read.append("logs")
        return log_ids(limit, after)

    app.launcher.receipt_ids = receipts  # type: ignore[method-assign]
    app.launcher.log_ids = logs  # type: ignore[method-assign]
    report = _slow(app, _control(app, Clock(base + RETENTION)))
    assert read == ["receipts", "logs"]
    assert report.logs_deleted == 1


# -- the kernel decides ----------------------------------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_the_runner_asks_the_kernel_for_every_log_and_deletes_what_it_allows(
    app: LocalApplication, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each log of the page is offered to the kernel's rule with its Attempt's database facts,
    the cycle's time and the configured retention; exactly the allowed ones are deleted."""
    base = wall_clock_ms()
    _attempt(app, "x-done", AttemptStatus.SUCCEEDED, base)
    _attempt(app, "x-running", AttemptStatus.RUNNING, base)
    _attempt(app, "x-young", AttemptStatus.TIMED_OUT, base + HOUR)
    _attempt(app, "x-orphan", None, base)
    asked: list[tuple[object, ...]] = []

    def recording(
        status: AttemptStatus | None, finished: int | None, now: int, retention: int
    ) -> bool:
        allowed = log_cleanup_allowed(status, finished, now, retention)
        asked.append((status, finished, now, retention, allowed))
        return allowed

    monkeypatch.setattr(control_module, "log_cleanup_allowed", recording)
    now = base + 3 * HOUR
    report = _slow(app, _control(app, Clock(now), retention_ms=2 * HOUR))
    assert asked == [
        (AttemptStatus.SUCCEEDED, base, now, 2 * HOUR, True),
        (None, None, now, 2 * HOUR, False),
        (AttemptStatus.RUNNING, None, now, 2 * HOUR, False),
        (AttemptStatus.TIMED_OUT, base + HOUR, now, 2 * HOUR, True),
    ]
    assert report.logs_deleted == 2
    assert _logs(app) == {"x-orphan", "x-running"}


@pytest.mark.spec("CAD-02")
@pytest.mark.parametrize("verdict", [True, False])
def test_a_changed_rule_changes_what_is_deleted(
    app: LocalApplication, monkeypatch: pytest.MonkeyPatch, verdict: bool
) -> None:
    """The runner holds no rule of its own: a rule that allows everything deletes even a running
    Attempt's log (which the real rule never allows), and one that allows nothing keeps even a
    long-settled one."""
    base = wall_clock_ms()
    names = {
        _attempt(app, "y-done", AttemptStatus.SUCCEEDED, base),
        _attempt(app, "y-running", AttemptStatus.RUNNING, base),
    }
    rule: Callable[..., bool] = lambda *_facts: verdict  # noqa: E731
    monkeypatch.setattr(control_module, "log_cleanup_allowed", rule)
    report = _slow(app, _control(app, Clock(base + 10 * RETENTION)))
    assert report.logs_deleted == (2 if verdict else 0)
    assert _logs(app) == (set() if verdict else names)


# -- the launcher's listing and deletion -----------------------------------------------------------
def test_log_listing_is_a_bounded_keyset_page_of_log_files(app: LocalApplication) -> None:
    logs = app.layout.logs
    for name in ("b", "a", "c", "d"):
        (logs / f"{name}.log").write_text("x")
    (logs / ".hidden.log").write_text("x")
    (logs / "notes.txt").write_text("x")
    (logs / "dir.log").mkdir()
    assert app.launcher.log_ids(16) == ["a", "b", "c", "d"]
    assert app.launcher.log_ids(2) == ["a", "b"]
    assert app.launcher.log_ids(2, after="b") == ["c", "d"]
    assert app.launcher.log_ids(16, after="d") == []
    app.launcher.delete_log("a")
    app.launcher.delete_log("a")  # a missing log is success
    assert app.launcher.log_ids(16) == ["b", "c", "d"]
    for bad in ("", "../ql3", ".hidden"):
        with pytest.raises(ValueError, match="not an Attempt id"):
            app.launcher.delete_log(bad)
    assert (logs / ".hidden.log").exists()


# -- the application end to end, with a real child -------------------------------------------------
@pytest.mark.spec("CAD-02")
def test_a_real_childs_log_is_kept_while_it_runs_and_deleted_the_retention_after_it_ended(
    tmp_path: Path,
) -> None:
    """`LocalApplication(log_retention_ms=...)` with its own execution-control lifecycle: the
    child's log survives slow cycles a year on while the child runs; the child is cancelled and
    stopped; its log survives until the retention after the stop, then a slow cycle deletes it."""
    shift = [0]
    reports: list[CycleReport[ControlReport | SchedulerReport]] = []
    stepped = Stepped()
    app = LocalApplication(
        tmp_path / "ql3.db",
        Profile.EDGE,
        clock=lambda: wall_clock_ms() + shift[0],
        schedulers=stepped,
        on_cycle=reports.append,
        log_retention_ms=HOUR,
    )
    try:
        code = "print('hello', flush=True); import time; time.sleep(120)"
        add_task(app, "nap", [sys.executable, "-c", code])
        admitted = submit(
            app.store,
            app.tasks,
            "nap",
            now_ms=wall_clock_ms(),
            run_id="run-nap",
            attempt_id="att-nap",
        )
        assert isinstance(admitted, Applied), admitted
        app.start()
        stepped.scheduler()
        log = app.layout.log_path("att-nap")
        until(lambda: log.exists() and "hello" in log.read_text(), lambda: None, "child output")

        def control_reports() -> list[ControlReport]:
            values = [getattr(r.result, "value", None) for r in reports]
            return [v for v in values if isinstance(v, ControlReport)]

        def next_slow_cycle() -> ControlReport:
            for _ in range(2 * _every_nth(app)):
                stepped.control()
                last = control_reports()[-1]
                if LocalControlPhase.CLEANUP in last.phases:
                    return last
            raise AssertionError("no slow cycle")

        shift[0] = 365 * DAY
        assert next_slow_cycle().logs_deleted == 0
        assert attempt_finish(app.store, "att-nap") == (AttemptStatus.RUNNING, None)
        assert log.exists()

        intent = RequestCancel("run-nap", CancelReason.USER, Actor.USER)
        execute(app.store, intent, wall_clock_ms() + shift[0])
        until(
            lambda: _status(app, "att-nap") is AttemptStatus.CANCELLED,
            stepped.control,
            "the child stopped (L4)",
        )
        found = attempt_finish(app.store, "att-nap")
        assert found is not None
        assert found[1] is not None
        assert next_slow_cycle().logs_deleted == 0  # ended less than an hour ago
        assert log.exists()
        shift[0] += HOUR
        assert next_slow_cycle().logs_deleted == 1
        assert not log.exists()
        assert sum(r.logs_deleted for r in control_reports()) == 1
    finally:
        app.stop()


# -- configuration ---------------------------------------------------------------------------------
def test_the_application_defaults_to_the_kernels_retention_and_refuses_one_out_of_range(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ql3.db"
    for bad in (LOG_RETENTION_MS.minimum - 1, LOG_RETENTION_MS.maximum + 1, -1):
        with pytest.raises(BudgetError, match="log_retention_ms"):
            LocalApplication(db, log_retention_ms=bad)
        assert not db.exists()  # refused before anything was opened
    app = LocalApplication(db, schedulers=Stepped())
    try:
        assert app.store is not None
    finally:
        app.stop()
    with pytest.raises(BudgetError, match="log_retention_ms"):
        LocalExecutionControl(
            app.store, app.launcher, app.budget, wall_clock_ms, log_retention_ms=0
        )
    assert LOG_RETENTION_DEFAULT_MS == 7 * DAY


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("soon", "not a duration"),
        ("30", "not a duration"),
        ("0", "from 1m to 365d"),
        ("59s", "from 1m to 365d"),
        ("366d", "from 1m to 365d"),
    ],
)
def test_serve_refuses_a_bad_log_retention_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str
) -> None:
    """`qlk serve --log-retention DUR`: bad input is exit 2, one stderr line naming the flag,
    and nothing is opened."""
    db = tmp_path / "ql3.db"
    status, out, err = qlk(capsys, db, "serve", "--log-retention", text, "--until-idle")
    assert status == 2
    line = one_line(err)
    assert f"--log-retention {text}" in line
    assert says in line
    assert out == ""
    assert not db.exists()


def test_serve_runs_with_a_log_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ql3.db"
    status, _out, err = qlk(capsys, db, "serve", "--log-retention", "1h30m", "--until-idle")
    assert status == 0, err
    assert db.exists()
