"""Workflows on the assembled local application, with real child processes on a real SQLite file
(issue 18 items 4-5; SPEC §4.2-§4.8, ADR-0229 verification).

Both lifecycles are stepped by the test, so the order of cycles is the test's and only the
children run on their own; each wait ends on its event or at a generous named deadline."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.specs import BUDGETS, Profile
from kernel.task import LOCAL_EXECUTOR_TYPE
from kernel.workflow import AdmitWorkflow, PinnedStep, RequestWorkflowCancel
from runners.edge.projection import project_file
from runners.engine import execute_workflow
from runners.lifecycle import CycleReport
from runners.lifecycle.cadence import CycleFailed
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.control import ControlReport
from runners.local.scheduler import SchedulerReport
from runners.worker.posix.executor import InspectionResult
from tests.support.local_app import Stepped, add_task, until

Reports = list[CycleReport[ControlReport | SchedulerReport]]


@pytest.fixture
def stepped() -> Stepped:
    return Stepped()


@pytest.fixture
def reports() -> Reports:
    return []


def _application(
    tmp_path: Path, stepped: Stepped, reports: Reports, profile: Profile = Profile.STANDALONE
) -> LocalApplication:
    return LocalApplication(
        tmp_path / "ql3.db", profile, schedulers=stepped, on_cycle=reports.append
    )


@pytest.fixture
def app(tmp_path: Path, stepped: Stepped, reports: Reports) -> Iterator[LocalApplication]:
    made = _application(tmp_path, stepped, reports)
    yield made
    made.stop()


def admit(app: LocalApplication, steps: list[tuple[str, list[str], tuple[str, ...]]]) -> str:
    """A Workflow of `(key, argv, after)` steps, each step's argv a task of its own."""
    run_id = f"wf-{secrets.token_hex(8)}"
    pins = []
    for key, argv, after in steps:
        task = f"{run_id}-{key}"
        add_task(app, task, argv)
        pins.append(PinnedStep(key, f"{run_id}-{key}", task, 1, LOCAL_EXECUTOR_TYPE, after))
    digest = hashlib.sha256(repr(steps).encode()).hexdigest()
    command = AdmitWorkflow(run_id, "local", "plan", digest, tuple(pins))
    outcome = execute_workflow(app.store, command, wall_clock_ms())
    assert outcome.kind.value == "applied", outcome
    return run_id


def _rows(app: LocalApplication, table: str, run_id: str) -> list[dict[str, object]]:
    return [r for r in app.store.project().get(table, []) if r["run_id"] == run_id]


def _status(app: LocalApplication, run_id: str) -> str:
    return str(_rows(app, "runs", run_id)[0]["status"])


def _scheduler_reports(reports: Reports) -> list[SchedulerReport]:
    values = (getattr(r.result, "value", None) for r in reports)
    return [v for v in values if isinstance(v, SchedulerReport)]


@pytest.mark.spec("WF-14", "WF-01")
def test_a_two_step_workflow_runs_each_step_once_with_one_admission_each(
    app: LocalApplication, stepped: Stepped, reports: Reports, tmp_path: Path
) -> None:
    """ADR-0229 verification 3: both steps succeed, exactly one Attempt per step, exactly two
    admissions, no duplicate dispatch (one spawn each, the second after the first finished)."""
    marker = tmp_path / "marker"
    run_id = admit(
        app,
        [
            ("build", ["sh", "-c", f"echo build >> {marker}"], ()),
            ("test", ["sh", "-c", f"echo test >> {marker}"], ("build",)),
        ],
    )
    app.start()
    until(app.idle, stepped.both, "the Workflow settled")
    assert _status(app, run_id) == "succeeded"
    assert marker.read_text() == "build\ntest\n"  # in order, each once
    steps = {str(s["step_key"]): s for s in _rows(app, "step_runs", run_id)}
    assert {k: s["status"] for k, s in steps.items()} == {"build": "succeeded", "test": "succeeded"}
    attempts = _rows(app, "attempts", run_id)
    ledger = _rows(app, "task_admissions", run_id)
    assert len(attempts) == len(ledger) == 2
    assert {a["step_run_id"] for a in attempts} == {s["step_run_id"] for s in steps.values()}
    spawned = [attempt for _run, attempt in app.launcher.spawns.entries()]
    assert sorted(spawned) == sorted(str(a["attempt_id"]) for a in attempts)
    events = [e for e in app.store.project()["events"] if e["run_id"] == run_id]
    assert sum(1 for e in events if e["type"] == "attempt.starting") == 2
    # WF-01: every scheduler cycle ran the five phases in the record's order.
    order = [
        "cancellation_convergence",
        "trigger_schedule",
        "workflow_frontier",
        "task_admission",
        "dispatch",
    ]
    cycles = _scheduler_reports(reports)
    assert cycles
    assert all([p.value for p in c.phases] == order for c in cycles)


@pytest.mark.spec("WF-15")
def test_a_workflow_cancelled_before_startup_converges_in_the_first_cycle(
    tmp_path: Path, stepped: Stepped, reports: Reports
) -> None:
    """ADR-0229 verification 4: cancelled before the application starts, the Workflow ends
    `cancelled` in the first scheduler cycle with no Attempt started, and ordinary startup
    recovery scans 0 rows."""
    app = _application(tmp_path, stepped, reports)
    try:
        run_id = admit(app, [("only", ["sleep", "60"], ()), ("next", ["true"], ("only",))])
        cancel = RequestWorkflowCancel(run_id)
        assert execute_workflow(app.store, cancel, wall_clock_ms()).kind.value == "applied"
        startup = app.start()
        assert startup.resolved == ()
        assert startup.adopted == ()
        stepped.scheduler()
        assert _status(app, run_id) == "cancelled"
        assert {s["status"] for s in _rows(app, "step_runs", run_id)} == {"cancelled"}
        assert _rows(app, "attempts", run_id) == []
        assert list(app.launcher.spawns.entries()) == []
    finally:
        app.stop()


@pytest.mark.spec("WF-16")
def test_cancelling_a_workflow_stops_the_running_process_first(
    app: LocalApplication, stepped: Stepped, reports: Reports
) -> None:
    """ADR-0229 verification 4 (in flight): with a step's real process running, the persisted
    intent makes phase 1 stop that process exactly, and only then are the Attempt, every
    StepRun and the parent `cancelled`, in one transaction."""
    run_id = admit(app, [("sleepy", ["sleep", "60"], ()), ("after", ["true"], ("sleepy",))])
    app.start()
    until(
        lambda: [a["status"] for a in _rows(app, "attempts", run_id)] == ["running"],
        stepped.both,
        "the step's process running",
    )
    (attempt,) = _rows(app, "attempts", run_id)
    handle = str(attempt["executor_handle"])
    assert app.launcher.inspect(handle) is InspectionResult.RUNNING
    cancel = RequestWorkflowCancel(run_id)
    assert execute_workflow(app.store, cancel, wall_clock_ms()).kind.value == "applied"
    stepped.scheduler()  # phase 1: stop, then converge
    phase = _scheduler_reports(reports)[-1].cancellation
    assert phase is not None
    assert [a for a, _result in phase.stops] == [attempt["attempt_id"]]  # the stop came first
    assert phase.outcomes == [(run_id, "applied", "converged")]
    assert _status(app, run_id) == "cancelled"
    assert [a["status"] for a in _rows(app, "attempts", run_id)] == ["cancelled"]
    assert {s["status"] for s in _rows(app, "step_runs", run_id)} == {"cancelled"}
    until(app.idle, stepped.control, "the stopped child reaped")
    assert app.launcher.inspect(handle) is not InspectionResult.RUNNING
    assert _status(app, run_id) == "cancelled"  # its late receipt changed nothing


@pytest.mark.spec("WF-02")
@pytest.mark.parametrize("profile", [Profile.EDGE, Profile.STANDALONE])
def test_no_phase_exceeds_its_budget_for_a_large_backlog(
    tmp_path: Path, stepped: Stepped, reports: Reports, profile: Profile
) -> None:
    """§4.2: with 80 Workflows waiting, no cycle advances more frontiers, admits more Tasks or
    activates more Attempts than its profile's page size x pages (edge 1/1/1, standalone
    64/64/4), and the pages read never exceed the page count."""
    app = _application(tmp_path, stepped, reports, profile)
    try:
        for _ in range(80):
            admit(app, [("one", ["true"], ())])
        app.start()
        for _ in range(6):
            stepped.scheduler()
        budget = BUDGETS[profile]
        assert budget.scheduler_frontier is not None
        assert budget.scheduler_task_admission is not None
        assert budget.scheduler_dispatch_activations is not None
        frontier, admission = budget.scheduler_frontier, budget.scheduler_task_admission
        cycles = _scheduler_reports(reports)
        assert len(cycles) == 6
        for cycle in cycles:
            assert cycle.frontier is not None
            assert cycle.admission is not None
            assert len(cycle.frontier.outcomes) <= frontier.page_size * frontier.pages
            assert cycle.frontier.pages <= frontier.pages
            assert len(cycle.admission.outcomes) <= admission.page_size * admission.pages
            assert cycle.admission.pages <= admission.pages
            launched = [d for d in cycle.dispatches if d.attempt_id is not None]
            assert len(launched) <= budget.scheduler_dispatch_activations
        # The budget was really the limit: the backlog kept every phase busy.
        assert max(len(c.frontier.outcomes) for c in cycles if c.frontier) == min(
            80, frontier.page_size * frontier.pages
        )
    finally:
        app.stop()


@pytest.mark.spec("WF-13")
def test_no_admission_or_attempt_is_created_after_stop_begins(
    app: LocalApplication, stepped: Stepped
) -> None:
    """§4.8: stop drains the scheduler first; afterwards no cycle runs, so a waiting Workflow
    gets no admission and no Attempt, and concurrent stops share one result."""
    run_id = admit(app, [("one", ["true"], ())])
    app.start()
    first = app.stop()
    assert app.stop() is first
    with pytest.raises(AssertionError, match="no timer armed"):
        stepped.scheduler()  # the drained scheduler runs no further cycle
    after = project_file(app.layout.db)
    assert [r for r in after.get("task_admissions", []) if r["run_id"] == run_id] == []
    assert [r for r in after["attempts"] if r["run_id"] == run_id] == []


@pytest.mark.spec("WF-03")
def test_a_failing_phase_ends_the_cycle_and_the_next_cadence_runs_it_again(
    app: LocalApplication,
    stepped: Stepped,
    reports: Reports,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B-61: phase 1 failing ends the cycle (no frontier, admission or dispatch in it); the
    lifecycle arms its one next cadence and nothing else (no timer, watcher or retry loop of
    the phase's own); the next cycle runs every phase."""
    run_id = admit(app, [("one", ["true"], ())])
    app.start()
    real = app.store.workflow_cancel_candidates
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the source failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(app.store, "workflow_cancel_candidates", failing_once)
    clock = stepped.by_name["scheduler"]
    armed = len(clock.armed)
    stepped.scheduler()
    assert isinstance(reports[-1].result, CycleFailed)
    assert reports[-1].result.error == "RuntimeError"
    assert len(clock.armed) == armed + 1  # exactly the next cadence
    assert clock.pending_ms is not None
    assert {s["status"] for s in _rows(app, "step_runs", run_id)} == {"pending"}
    assert _rows(app, "task_admissions", run_id) == []
    stepped.scheduler()
    last = _scheduler_reports(reports)[-1]
    assert len(last.phases) == 5
    assert len(_rows(app, "task_admissions", run_id)) == 1
    assert len(calls) == 2
