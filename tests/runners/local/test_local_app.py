"""The assembled local application on a real SQLite file with real child processes (issue 15
item 2; runners/local/app.py, control.py, scheduler.py; SPEC O-1..O-4).

Most tests drive both lifecycles with stepped schedulers, so the order of cycles is the test's
and only the children run on their own; every wait for a child ends on its event or at a named
generous deadline (30 s for commands that take milliseconds)."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel import (
    ActivateLocal,
    Actor,
    CancelReason,
    NotRunningEvidence,
    Page,
    RecoverLocalStartup,
    RequestCancel,
    RunStatus,
)
from kernel.specs import (
    BUDGETS,
    LocalControlPhase,
    Profile,
)
from kernel.task import LOCAL_EXECUTOR_TYPE
from runners.engine import execute
from runners.lifecycle import CycleContext, CycleReport
from runners.local import dispatcher
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.control import ControlReport, LocalExecutionControl
from runners.local.reads import run_status_counts
from runners.local.scheduler import SchedulerReport
from runners.worker.posix.executor import InspectionResult
from tests.support.local_app import Stepped, add_task, submit_run, until

#: O-1 and O-4 as SPEC §6.2 states them, written out here (not read from the kernel's table), so
#: that a change to the kernel's sequence changes what this runtime test sees.
O1 = ["startup_recovery", "first_control_cycle", "start_control", "start_scheduler"]
O4 = ["drain_scheduler", "drain_control", "close_storage"]
O2 = ("completions", "cancellation", "lost_retry", "cleanup")
O3 = (
    "cancellation_convergence",
    "trigger_schedule",
    "workflow_frontier",
    "task_admission",
    "dispatch",
)


@pytest.fixture
def stepped() -> Stepped:
    return Stepped()


@pytest.fixture
def reports() -> list[CycleReport[ControlReport | SchedulerReport]]:
    return []


@pytest.fixture
def app(
    tmp_path: Path,
    stepped: Stepped,
    reports: list[CycleReport[ControlReport | SchedulerReport]],
) -> Iterator[LocalApplication]:
    made = LocalApplication(
        tmp_path / "ql3.db", Profile.STANDALONE, schedulers=stepped, on_cycle=reports.append
    )
    yield made
    made.stop()


def _runs(app: LocalApplication) -> dict[str, dict[str, object]]:
    return {str(r["run_id"]): r for r in app.store.project()["runs"]}


def _attempts(app: LocalApplication, run_id: str) -> list[dict[str, object]]:
    return [a for a in app.store.project()["attempts"] if a["run_id"] == run_id]


@pytest.mark.spec("CAD-01", "CAD-08")
def test_start_and_stop_follow_the_kernels_sequences(
    app: LocalApplication,
    stepped: Stepped,
    reports: list[CycleReport[ControlReport | SchedulerReport]],
) -> None:
    """O-1: startup recovery, the first execution-control cycle, then the lifecycles, the
    scheduler last; O-4: scheduler drain, execution-control drain, storage close."""
    app.start()
    assert app.steps == O1
    assert [type(getattr(r.result, "value", None)) for r in reports] == [ControlReport]
    stepped.scheduler()
    assert isinstance(getattr(reports[-1].result, "value", None), SchedulerReport)
    stopped = app.stop()
    assert stopped.drained
    assert app.steps == O1 + O4
    assert app.stop() is stopped  # a second stop shares the first result (CAD-08)


@pytest.mark.spec("CAD-01")
def test_the_first_control_cycle_completes_work_left_by_a_crash_before_any_dispatch(
    tmp_path: Path, stepped: Stepped
) -> None:
    """A child that finished while no application ran is completed by the first execution-
    control cycle (via startup recovery's adoption or the receipt), before the scheduler runs."""
    first = LocalApplication(tmp_path / "ql3.db", schedulers=stepped)
    add_task(first, "quick", ["true"])
    run_id = submit_run(first, "quick")
    first.start()
    stepped.scheduler()  # the dispatch phase launches the child
    assert _attempts(first, run_id)[0]["status"] in {"starting", "running"}
    attempt_id = str(_attempts(first, run_id)[0]["attempt_id"])
    first.store.close()  # "crash": no stop, no drain, the child runs on
    receipt = first.layout.receipts / f"{attempt_id}.json"
    until(receipt.exists, lambda: None, "the child's receipt")
    again = LocalApplication(tmp_path / "ql3.db", schedulers=Stepped())
    try:
        again.start()
        assert _runs(again)[run_id]["status"] == "succeeded"
        assert again.steps == O1
    finally:
        again.stop()


@pytest.mark.spec("RETRY-21", "CAD-12")
def test_submitted_runs_succeed_with_one_attempt_and_one_spawn_each(
    app: LocalApplication,
    stepped: Stepped,
    reports: list[CycleReport[ControlReport | SchedulerReport]],
) -> None:
    """Twenty submissions: each scheduler cycle starts at most its budget (4 standalone), every
    Run succeeds with exactly one Attempt, and the launcher registered exactly one spawn each."""
    add_task(app, "hello", ["sh", "-c", "echo hi"])
    run_ids = [submit_run(app, "hello") for _ in range(20)]
    app.start()
    until(app.idle, stepped.both, "20 Runs settled")
    per_cycle = [
        sum(1 for d in value.dispatches if d.run_id is not None)
        for value in (getattr(r.result, "value", None) for r in reports)
        if isinstance(value, SchedulerReport)
    ]
    runs = _runs(app)
    assert {runs[r]["status"] for r in run_ids} == {"succeeded"}
    assert all(len(_attempts(app, r)) == 1 for r in run_ids)
    spawned = [attempt for _run, attempt in app.launcher.spawns.entries()]
    assert len(spawned) == len(set(spawned)) == 20
    budget = BUDGETS[Profile.STANDALONE].scheduler_dispatch_activations
    assert budget is not None
    assert max(per_cycle) <= budget
    log = app.layout.log_path(str(_attempts(app, run_ids[0])[0]["attempt_id"]))
    assert log.read_text() == "hi\n"


def test_a_failing_command_and_a_missing_program_fail_their_runs(
    app: LocalApplication, stepped: Stepped
) -> None:
    """Exit 3 is a `failed` Run with exit code 3; a program that does not exist never ran: the
    refusal receipt (decision LR-3) fails the Run with exit code 127."""
    add_task(app, "three", ["sh", "-c", "exit 3"])
    add_task(app, "missing", ["/nonexistent/program-" + secrets.token_hex(4)])
    three, missing = submit_run(app, "three"), submit_run(app, "missing")
    app.start()
    until(app.idle, stepped.both, "both Runs settled")
    runs = _runs(app)
    assert runs[three]["status"] == runs[missing]["status"] == "failed"
    assert _attempts(app, three)[0]["exit_code"] == 3
    assert _attempts(app, missing)[0]["exit_code"] == 127


@pytest.mark.spec("CAD-02")
def test_a_cancelled_running_process_is_stopped_and_its_run_cancelled(
    app: LocalApplication, stepped: Stepped
) -> None:
    """§1.9, L5: the cancellation step stops the live process through its recorded handle and
    records the stop; the process is really gone."""
    add_task(app, "sleepy", ["sleep", "60"])
    run_id = submit_run(app, "sleepy")
    app.start()
    stepped.scheduler()
    until(
        lambda: _attempts(app, run_id)[0]["status"] == "running",
        stepped.control,
        "the Attempt running",
    )
    handle = str(_attempts(app, run_id)[0]["executor_handle"])
    execute(app.store, RequestCancel(run_id, CancelReason.USER, Actor.USER), wall_clock_ms())
    until(app.idle, stepped.control, "the Run cancelled and the process reaped")
    assert _runs(app)[run_id]["status"] == "cancelled"
    assert _attempts(app, run_id)[0]["status"] == "cancelled"
    assert app.launcher.inspect(handle) is not InspectionResult.RUNNING


@pytest.mark.spec("CAD-02")
def test_a_queued_cancelled_run_converges_without_a_process(
    app: LocalApplication, stepped: Stepped
) -> None:
    add_task(app, "never", ["true"])
    run_id = submit_run(app, "never")
    execute(app.store, RequestCancel(run_id, CancelReason.USER, Actor.USER), wall_clock_ms())
    app.start()  # the first execution-control cycle converges it
    stepped.scheduler()
    assert _runs(app)[run_id]["status"] == "cancelled"
    assert app.launcher.spawns.entries() == []


@pytest.mark.spec("CAD-02", "CAD-05")
def test_control_cycle_steps_follow_the_kernel_and_a_drain_makes_no_lost_retry_call(
    app: LocalApplication,
) -> None:
    """The cycle runs exactly the kernel's `local_control_phases`: all four on a slow cycle,
    no cleanup otherwise, and no lost-retry page while draining (the lost-retry call is counted
    on the store itself)."""
    calls: list[int] = []
    original = app.store.lost_retry_candidates

    def counting(observed_at_ms: int, limit: int):  # type: ignore[no-untyped-def]
        calls.append(limit)
        return original(observed_at_ms, limit)

    app.store.lost_retry_candidates = counting  # type: ignore[method-assign]
    cycle = LocalExecutionControl(app.store, app.launcher, app.budget, wall_clock_ms)
    every = app.budget.execution_control_slow_cleanup
    assert every is not None
    slow = cycle(CycleContext(every.every_nth_cycle, lambda: False))
    assert slow.phases == O2
    plain = cycle(CycleContext(1, lambda: False))
    assert LocalControlPhase.CLEANUP not in plain.phases
    assert calls == [16, 16]  # CAD-03: the standalone page
    draining = cycle(CycleContext(2, lambda: True))
    assert LocalControlPhase.LOST_RETRY not in draining.phases
    assert draining.lost_retry is None
    assert calls == [16, 16]


@pytest.mark.spec("CAD-15")
def test_a_slow_cycle_deletes_only_receipts_of_terminal_attempts(
    app: LocalApplication, stepped: Stepped
) -> None:
    add_task(app, "quick", ["true"])
    ids = [submit_run(app, "quick") for _ in range(3)]
    app.start()
    until(app.idle, stepped.both, "three Runs settled")
    attempts = [str(_attempts(app, r)[0]["attempt_id"]) for r in ids]
    assert sorted(app.launcher.receipt_ids(16)) == sorted(attempts)
    stray = app.layout.receipts / "att-unknown.json"
    (app.layout.receipts / f"{attempts[0]}.json").replace(stray)  # a receipt of no Attempt
    every = app.budget.execution_control_slow_cleanup
    assert every is not None
    cycle = LocalExecutionControl(app.store, app.launcher, app.budget, wall_clock_ms)
    report = cycle(CycleContext(every.every_nth_cycle, lambda: False))
    assert report.receipts_deleted == 2
    assert app.launcher.receipt_ids(16) == ["att-unknown"]


@pytest.mark.spec("CAD-09", "CAD-10")
def test_the_application_holds_one_connection_one_thread_per_lifecycle_and_no_psycopg(
    tmp_path: Path,
) -> None:
    """Measured in a running application (real daemon schedulers), in a fresh interpreter."""
    probe = r"""
import os, sys, threading, time
from pathlib import Path
from runners.local.app import LocalApplication
db = Path(sys.argv[1])
before = threading.active_count()
app = LocalApplication(db)
app.start()
time.sleep(0.3)
threads = threading.active_count() - before
links = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
         if os.path.exists(f"/proc/self/fd/{fd}")]
dbs = sum(1 for link in links if link == str(db))
print(threads, dbs, "psycopg" in sys.modules)
app.stop()
"""
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "ql3.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    threads, dbs, psycopg = done.stdout.split()
    assert (int(threads), int(dbs), psycopg) == (2, 1, "False")


def test_the_scheduler_cycle_runs_the_kernels_phases_in_order(
    app: LocalApplication,
    stepped: Stepped,
    reports: list[CycleReport[ControlReport | SchedulerReport]],
) -> None:
    app.start()
    stepped.scheduler()
    value = getattr(reports[-1].result, "value", None)
    assert isinstance(value, SchedulerReport)
    assert tuple(value.phases) == O3
    assert len(value.dispatches) == BUDGETS[Profile.STANDALONE].scheduler_dispatch_activations


def test_idle_counts_unsettled_runs_and_watched_processes(
    app: LocalApplication, stepped: Stepped
) -> None:
    assert app.idle()
    add_task(app, "hello", ["true"])
    submit_run(app, "hello")
    assert not app.idle()
    app.start()
    until(app.idle, stepped.both, "settled")
    assert run_status_counts(app.store) == {RunStatus.SUCCEEDED: 1}
    assert app.launcher.tracked == 0


@pytest.mark.spec("REC-07")
def test_a_start_whose_handle_fact_was_lost_completes_from_its_receipt_after_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the spawn and L2 (the handle fact) leaves a registered `starting` Attempt
    whose child runs on. Startup recovery inspects the identity the launcher journaled before
    the command was sent (decision LR-9): two `running` inspections are `live`, the Attempt is
    adopted, and L3 completes it from its receipt: one spawn, one Attempt, `succeeded`."""

    def crash_before_l2(store: object, command: object, observed_at_ms: int) -> object:
        if type(command).__name__ == "RecordLocalHandle":
            raise KeyboardInterrupt  # stands for the process dying here
        return execute(store, command, observed_at_ms)  # type: ignore[arg-type]

    monkeypatch.setattr(dispatcher, "execute", crash_before_l2)
    stepped = Stepped()
    first = LocalApplication(tmp_path / "ql3.db", schedulers=stepped)
    add_task(first, "nap", ["sleep", "2"])
    run_id = submit_run(first, "nap")
    first.start()
    with pytest.raises(KeyboardInterrupt):
        stepped.scheduler()
    assert _attempts(first, run_id)[0]["status"] == "starting"
    assert _attempts(first, run_id)[0]["executor_handle"] is None
    first.store.close()
    monkeypatch.undo()
    again_stepped = Stepped()
    again = LocalApplication(tmp_path / "ql3.db", schedulers=again_stepped)
    try:
        startup = again.start()
        attempt_id = str(_attempts(again, run_id)[0]["attempt_id"])
        assert (attempt_id, "replayed", "live") in startup.resolved
        assert startup.adopted == (attempt_id,)
        until(again.idle, again_stepped.control, "the receipt completes the Attempt")
        assert _runs(again)[run_id]["status"] == "succeeded"
        assert len(again.launcher.spawns.entries()) == 1
    finally:
        again.stop()


def _lost_runs(app: LocalApplication, count: int) -> list[str]:
    """`count` Runs made `lost` the way a restart makes them: activated (L1), then trusted
    not-running evidence with no receipt (§2.1)."""
    add_task(app, "gone", ["true"])
    run_ids = []
    for _ in range(count):
        run_id = submit_run(app, "gone")
        attempt_id = str(_attempts(app, run_id)[0]["attempt_id"])
        now = wall_clock_ms()
        activate = ActivateLocal(run_id, attempt_id, LOCAL_EXECUTOR_TYPE, 1, "0" * 64)
        assert execute(app.store, activate, now).kind.value == "applied"
        recover = RecoverLocalStartup(run_id, attempt_id, NotRunningEvidence())
        assert execute(app.store, recover, now).code.value == "lost"
        run_ids.append(run_id)
    return run_ids


@pytest.mark.spec("CAD-03")
@pytest.mark.parametrize("profile", [Profile.EDGE, Profile.STANDALONE])
def test_one_control_cycle_handles_at_most_the_profiles_lost_retry_page(
    tmp_path: Path, profile: Profile
) -> None:
    """2 per 5 s cycle on edge, 16 per 1 s cycle on standalone (ADR-0380 §3), for a backlog
    larger than either."""
    app = LocalApplication(tmp_path / "ql3.db", profile, schedulers=Stepped())
    try:
        _lost_runs(app, 20)
        budget = BUDGETS[profile]
        cycle = LocalExecutionControl(app.store, app.launcher, app.budget, wall_clock_ms)
        report = cycle(CycleContext(1, lambda: False))
        assert report.lost_retry is not None
        assert report.lost_retry.scanned == budget.execution_control_lost_retry_per_cycle
        assert report.lost_retry.has_more
        assert app.control.config.interval_ms == budget.execution_control_cadence_ms
    finally:
        app.stop()


@pytest.mark.spec("CAD-14")
def test_only_the_execution_control_cycle_calls_lost_retry(
    app: LocalApplication, stepped: Stepped
) -> None:
    """No second lost-retry cadence: scheduler cycles never read the lost-retry source; each
    execution-control cycle reads it once."""
    _lost_runs(app, 3)
    calls: list[str] = []
    original = app.store.lost_retry_candidates

    def counting(observed_at_ms: int, limit: int) -> Page[tuple[int, int, int, str]]:
        calls.append("call")
        return original(observed_at_ms, limit)

    app.store.lost_retry_candidates = counting  # type: ignore[method-assign]
    app.start()
    assert calls == ["call"]  # the first execution-control cycle (O-1)
    for _ in range(3):
        stepped.scheduler()
    assert calls == ["call"]
    stepped.control()
    assert calls == ["call", "call"]
    assert {r["status"] for r in _runs(app).values()} == {"failed"}  # no policy: R1 fails them
