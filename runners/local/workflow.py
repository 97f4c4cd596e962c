"""The local parts of the Workflow scheduler (SPEC §4.2, ADR-0229 §1; WF-01..WF-03): phase 1
(whole-Workflow cancellation, with the launcher's exact stops), the Task half of dispatch (the
launcher), and the Workflow Task startup recovery (§4.5). The frontier and Task admission are
the same on every store (`runners.workflow_phases`, re-exported here).

Nothing here decides: the kernel answers each command, `stops_needed` names the processes
execution control must stop before a Workflow converges (§4.8), `task_launched` reads the launch
facts. No timer, thread or per-Workflow state (ADR-0229 §1).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

from kernel import (
    ActivateCandidate,
    ActivationAnswered,
    Candidate,
    CandidateSkipped,
    DispatchDone,
    Page,
    PageRead,
    Secret,
    dispatch_advance,
    dispatch_begin,
    token_digest,
    watched_after_startup,
)
from kernel.specs import Paging
from kernel.task import LOCAL_EXECUTOR_TYPE, TaskExecution
from kernel.workflow import (
    ConvergeWorkflowCancel,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    page_advances,
    stops_needed,
    task_launched,
)
from runners.edge.store import EdgeStore
from runners.edge.tasks import EdgeTaskStore
from runners.engine import in_transaction
from runners.local.dispatcher import FIRST_CALLBACK_SEQUENCE, DispatchReport
from runners.local.launcher import LaunchAmbiguous, Launched, LaunchRefused, LocalLauncher
from runners.local.reads import task_attempt_task
from runners.local.startup import adoptable, launch_evidence
from runners.workflow_phases import (
    PhaseFailed,
    WorkflowPhaseReport,
    frontier_phase,
    run_pages,
    task_admission_phase,
)

__all__ = [
    "PhaseFailed",
    "TaskRecoveryReport",
    "WorkflowPhaseReport",
    "frontier_phase",
    "task_admission_phase",
    "task_dispatch_once",
    "task_startup_recovery",
    "workflow_cancellation_phase",
]


def workflow_cancellation_phase(
    store: EdgeStore, launcher: LocalLauncher, paging: Paging, clock: Callable[[], int]
) -> WorkflowPhaseReport:
    """Phase 1 (§4.4, §4.8; WF-15, WF-16): for each Workflow with a cancellation intent, stop
    exactly the processes the kernel names, then converge Attempts, StepRuns and the parent in
    one transaction. A stop that is not conclusive writes nothing (the next cycle tries again)."""
    report = WorkflowPhaseReport()

    def converge(candidate: Candidate[tuple[int, str]]) -> None:
        with store.transaction() as tx:
            wf = tx.load_workflow(candidate.run_id)
        if wf is None:
            return
        reason = wf.run.cancel_reason
        stopped: list[str] = []
        for attempt_id in stops_needed(wf):
            attempt = wf.attempt(attempt_id)
            handle = None if attempt is None else attempt.executor_handle
            if handle is None or reason is None:
                report.errors.append(f"stop {attempt_id}: no recorded handle")
                continue
            result = launcher.stop(handle, reason)
            if result is None:
                report.errors.append(f"stop {attempt_id}: not conclusive")
                continue
            report.stops.append((attempt_id, result.value))
            stopped.append(attempt_id)
        command = ConvergeWorkflowCancel(candidate.run_id, tuple(stopped))
        outcome = in_transaction(store, command, clock)
        report.outcomes.append((candidate.run_id, outcome.kind.value, outcome.code.value))

    run_pages("cancellation", store.workflow_cancel_candidates, paging, converge, report)
    return report


def task_dispatch_once(
    store: EdgeStore,
    tasks: EdgeTaskStore,
    launcher: LocalLauncher,
    paging: Paging,
    clock: Callable[[], int],
) -> DispatchReport:
    """One activation of the Task half of D-15: the kernel's dispatcher step machine over the
    Task dispatch source (key `(admitted_at_ms, 0, attempt_id)`), `prepare_task` as the start
    barrier committed before the spawn, then the launch and the handle fact (§4.4, §4.7)."""
    scan, action = dispatch_begin(paging)
    prepared: dict[str, tuple[TaskExecution, Secret]] = {}
    while not isinstance(action, DispatchDone):
        if isinstance(action, ActivateCandidate):
            candidate = action.candidate
            assert candidate.attempt_id is not None
            execution = _execution(store, tasks, candidate.attempt_id)
            if execution is None:
                scan, action = dispatch_advance(scan, CandidateSkipped(candidate))
                continue
            token = Secret.of(secrets.token_urlsafe(32), "callback_token")
            prepared[candidate.attempt_id] = (execution, token)
            command = PrepareTask(
                run_id=candidate.run_id,
                attempt_id=candidate.attempt_id,
                local_executor_type=LOCAL_EXECUTOR_TYPE,
                callback_sequence=FIRST_CALLBACK_SEQUENCE,
                callback_token_sha256=token_digest(token.reveal()),
            )
            outcome = in_transaction(store, command, clock)
            scan, action = dispatch_advance(scan, ActivationAnswered(candidate, outcome))
        else:
            after = None if action.after is None else (action.after[0], action.after[2])
            page = store.task_dispatch_candidates(LOCAL_EXECUTOR_TYPE, action.limit, after)
            widened = Page(
                tuple(
                    Candidate(c.run_id, c.attempt_id, (c.key[0], 0, c.key[1])) for c in page.items
                ),
                page.has_more,
            )
            scan, action = dispatch_advance(scan, PageRead(widened))
    activated = action.activated
    if activated is None:
        return DispatchReport(action.end, action.tried)
    assert activated.attempt_id is not None
    execution, token = prepared[activated.attempt_id]
    started_at_ms = clock()
    launched = launcher.launch(
        activated.run_id,
        activated.attempt_id,
        execution,
        callback_sequence=FIRST_CALLBACK_SEQUENCE,
        token=token,
        started_at_ms=started_at_ms,
    )
    if isinstance(launched, Launched):
        # The handle fact (§4.7): a failure here leaves the Task Attempt `starting` with a
        # registration, which the completion or startup recovery resolves from the receipt.
        handle = RecordTaskHandle(
            activated.run_id, activated.attempt_id, launched.handle, started_at_ms
        )
        in_transaction(store, handle, clock)
        launch = "launched"
    elif isinstance(launched, LaunchRefused):
        launch = f"refused:{launched.code}"
    else:
        assert isinstance(launched, LaunchAmbiguous)
        launch = f"ambiguous:{launched.code}"
    return DispatchReport(action.end, action.tried, activated.run_id, activated.attempt_id, launch)


def _execution(store: EdgeStore, tasks: EdgeTaskStore, attempt_id: str) -> TaskExecution | None:
    found = task_attempt_task(store, attempt_id)
    return None if found is None else tasks.execution(*found)


@dataclass(frozen=True, slots=True)
class TaskRecoveryReport:
    """§4.5 at startup: `(attempt, outcome kind, code)` per started Task Attempt, and those
    adopted (two consistent live inspections) for execution control to watch."""

    resolved: tuple[tuple[str, str, str], ...] = ()
    live: tuple[str, ...] = ()


def task_startup_recovery(
    store: EdgeStore, launcher: LocalLauncher, page_size: int, clock: Callable[[], int]
) -> TaskRecoveryReport:
    """§4.5 once at startup (WF-08): every started Task Attempt resolved by its evidence (the
    receipt first, then two inspections of the persisted identity), one transaction each;
    `unknown` writes nothing. Pages follow the cursor until the source is exhausted."""
    resolved: list[tuple[str, str, str]] = []
    live: list[str] = []
    after: tuple[str] | None = None
    while True:
        page = store.task_recovery_candidates(page_size, after)
        if not page_advances(after, page, page_size):
            raise PhaseFailed("task recovery: the source broke the page rules")
        for candidate in page.items:
            assert candidate.attempt_id is not None
            with store.transaction() as tx:
                wf = tx.load_workflow(candidate.run_id)
            attempt = None if wf is None else wf.attempt(candidate.attempt_id)
            if attempt is None:
                continue
            evidence = launch_evidence(launcher, attempt)
            launched = task_launched(attempt, launcher.journaled_identity(attempt.attempt_id))
            command = RecoverTaskStartup(
                candidate.run_id, candidate.attempt_id, evidence, launched=launched
            )
            outcome = in_transaction(store, command, clock)
            resolved.append((candidate.attempt_id, outcome.kind.value, outcome.code.value))
            if watched_after_startup(outcome):
                launcher.adopt(candidate.run_id, candidate.attempt_id, adoptable(launcher, attempt))
                live.append(candidate.attempt_id)
        if not page.has_more or page.cursor is None:
            return TaskRecoveryReport(tuple(resolved), tuple(live))
        after = page.cursor
