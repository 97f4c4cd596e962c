"""A real SIGKILL behind the approval domain's start barrier never starts the action again
(issue 19: "a SIGKILL after the start barrier never starts it twice"; decision AA-D1).

A child process (`approval_kill_child.py`, the project's Python) opens the edge SQLite file and
runs one dispatch page exactly as the application's dispatcher does; the ports' `between` hook
SIGKILLs it after the first claim committed and before its start. The parent checks the child
died by SIGKILL and the file holds the action `starting` with no Run. Then it runs what the
application runs (`LocalApplication(db, approvals=True)`: O-1, then one Approved Action cycle,
recovery before dispatch) and checks that the reconciler resolved the action from the Run's
facts alone, `failed` with START_INTERRUPTED, that no Run was ever admitted for it (no Run row, no
`run.queued` Event), that the same cycle's dispatch phase still started the other approved
action, and that another dispatch page does not start it. The control case: a SIGKILL after the
page committed its start leaves exactly one Run, admitted once, and the reconciler finds nothing
to do.

There is no AA id for the approval domain (AA-01..AA-15 are the supervisor's), so no spec mark;
the tests are the evidence of the issue's at-most-once rule.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Final

import pytest

from kernel.approved_action import (
    ActionApplied,
    ApproveAction,
    CycleSummary,
    ResolveAction,
    StartAction,
)
from kernel.outcomes import Raced
from kernel.specs import Profile
from kernel.specs.approved_action import ActionEventType, ActionStatus
from kernel.specs.codes import Code
from kernel.specs.states import Actor
from kernel.task import TaskDefinition, define_task
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore, TaskWrite
from runners.engine import execute_action
from runners.lifecycle import CycleSucceeded
from runners.local.app import LocalApplication, wall_clock_ms
from runners.local.approvals import EdgeApprovalPorts
from runners.local.schedule import submit
from tests.support.local_app import Stepped

pytestmark = pytest.mark.slow  # real child processes (about a second each)

ROOT: Final = Path(__file__).resolve().parents[3]
CHILD: Final = "tests.runners.local.approval_kill_child"
CHILD_DEADLINE_S: Final = 120.0  # a failure guard only: the child takes about a second
SIGKILLED: Final = -9
TASK: Final = "gated"


def _request_and_approve(db: Path, n: int) -> list[tuple[str, str]]:
    """`n` approval requests of the task `gated` (which requires approval), each approved at
    its own time: their dispatch order is their order here. Returns (action id, Run id)."""
    store = EdgeStore(db)
    try:
        tasks = EdgeTaskStore(store)
        definition = define_task(TASK, ["true"], requires_approval=True)
        assert isinstance(definition, TaskDefinition), definition
        assert isinstance(tasks.add(definition, wall_clock_ms()), TaskWrite)
        made: list[tuple[str, str]] = []
        for i in range(n):
            run_id, attempt_id = f"run-{i + 1:032x}", f"att-{i + 1:032x}"
            requested = submit(
                store, tasks, TASK, now_ms=wall_clock_ms(), run_id=run_id,
                attempt_id=attempt_id, requested_by="ann",
            )  # fmt: skip
            assert isinstance(requested, ActionApplied), requested
            action_id = requested.action.action_id
            # One millisecond apart at least: the dispatch index orders by decision time.
            approved_at = max(wall_clock_ms(), requested.action.updated_at_ms + 1)
            approved = execute_action(store, ApproveAction(action_id, "bob"), approved_at)
            assert isinstance(approved, ActionApplied), approved
            while wall_clock_ms() <= approved_at:
                pass  # the next decision strictly later (a few microseconds of spinning)
            made.append((action_id, run_id))
        return made
    finally:
        store.close()


def _kill_child(db: Path, mode: str) -> str:
    """Run the child; it must die by SIGKILL. Returns what it printed."""
    done = subprocess.run(
        [sys.executable, "-m", CHILD, str(db), mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_DEADLINE_S,
        check=False,
    )
    assert done.returncode == SIGKILLED, (done.returncode, done.stdout, done.stderr)
    return done.stdout


def _facts(db: Path) -> tuple[dict[str, dict[str, object]], set[str], Counter[str]]:
    """The backdoor projection: actions by id, the Run ids, and `run.queued` Events per Run."""
    store = EdgeStore(db)
    try:
        projection = store.project()
    finally:
        store.close()
    actions = {str(a["action_id"]): a for a in projection.get("approved_actions", [])}
    runs = {str(r["run_id"]) for r in projection["runs"]}
    queued = Counter(str(e["run_id"]) for e in projection["events"] if e["type"] == "run.queued")
    return actions, runs, queued


def _application_cycle(db: Path) -> CycleSummary:
    """What `qlk serve --approvals` runs on the file: O-1, then one Approved Action cycle
    (recovery, then dispatch), then O-4."""
    app = LocalApplication(db, Profile.EDGE, schedulers=Stepped(), approvals=True)
    try:
        app.start()
        assert app.approvals is not None
        result = app.approvals.run_once()
    finally:
        app.stop()
    assert isinstance(result, CycleSucceeded), result
    assert isinstance(result.value, CycleSummary)
    return result.value


def test_a_sigkill_behind_the_barrier_never_starts_the_action(tmp_path: Path) -> None:
    db = tmp_path / "ql3.db"
    (first, first_run), (second, second_run) = _request_and_approve(db, 2)

    printed = _kill_child(db, "barrier")
    assert printed.splitlines() == [f"claimed {first}"]  # killed at its first barrier
    actions, runs, queued = _facts(db)
    assert actions[first]["status"] == ActionStatus.STARTING.value
    assert actions[first]["claimed_at_ms"] is not None
    assert actions[second]["status"] == ActionStatus.APPROVED.value  # the page was abandoned
    assert runs == set()
    assert not queued

    summary = _application_cycle(db)
    assert summary.recovery.counters.verified_failed == 1
    assert summary.dispatch.counters.started == 1  # the other one, not the interrupted one
    actions, runs, queued = _facts(db)
    assert actions[first]["status"] == ActionStatus.FAILED.value
    assert actions[first]["code"] == Code.START_INTERRUPTED.value
    assert actions[second]["status"] == ActionStatus.STARTED.value
    assert first_run not in runs
    assert queued[first_run] == 0
    assert runs == {second_run}
    assert queued[second_run] == 1

    store = EdgeStore(db)
    try:
        stored = store.action(first)
        assert stored is not None
        _action, events = stored
        assert [(e.type, e.actor) for e in events] == [
            (ActionEventType.REQUESTED, Actor.USER),
            (ActionEventType.APPROVED, Actor.USER),
            (ActionEventType.CLAIMED, Actor.SCHEDULER),
            (ActionEventType.FAILED, Actor.RECONCILER),
        ]
        # Another dispatch page has nothing to start; a late start or resolve changes nothing.
        page = EdgeApprovalPorts(store, wall_clock_ms).dispatch_batch(None, 8)
        assert page.counters.scanned == page.counters.started == 0
        for late in (StartAction(first), ResolveAction(first)):
            assert execute_action(store, late, wall_clock_ms()) == Raced(Code.NOT_ELIGIBLE)
    finally:
        store.close()
    actions, runs, queued = _facts(db)
    assert actions[first]["status"] == ActionStatus.FAILED.value
    assert first_run not in runs
    assert queued[first_run] == 0


def test_a_sigkill_after_the_start_committed_leaves_one_run_and_nothing_to_reconcile(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ql3.db"
    ((action_id, run_id),) = _request_and_approve(db, 1)

    printed = _kill_child(db, "after_start")
    assert printed.splitlines() == [f"claimed {action_id}", "page 1 1"]
    actions, runs, queued = _facts(db)
    assert actions[action_id]["status"] == ActionStatus.STARTED.value
    assert runs == {run_id}
    assert queued[run_id] == 1

    summary = _application_cycle(db)
    assert summary.recovery.counters.scanned == 0  # nothing behind the barrier
    assert summary.dispatch.counters.scanned == 0  # nothing approved left
    actions, runs, queued = _facts(db)
    assert actions[action_id]["status"] == ActionStatus.STARTED.value
    assert runs == {run_id}
    assert queued[run_id] == 1
